"""A MuJoCo scene mirrored in a viser page: each body a frame whose pose follows ``qpos``, each
visible geom a primitive (box, sphere, cylinder, capsule, ellipsoid, plane) or its mesh.

Only geometry and colours are read from the model; poses come from ``mj_kinematics`` on a
private ``MjData``, so the mirror never touches the controller's data. Height fields and
signed-distance geoms are not drawn (:attr:`SceneMirror.skipped` names them).
"""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.errors import TwinloopError

#: MuJoCo draws geom groups 0-2 by default; the mirror draws the same
VISIBLE_GROUPS = 3


def load_viser():
    """The ``viser`` module, or a :class:`TwinloopError` saying how to install it."""
    try:
        import viser
    except ImportError as exc:
        raise TwinloopError("the live view needs viser: pip install 'twinloop[view]'") from exc
    return viser


def _rgb(model: mujoco.MjModel, g: int) -> tuple[tuple[int, int, int], float]:
    rgba = model.geom_rgba[g]
    if model.geom_matid[g] >= 0 and np.allclose(rgba, [0.5, 0.5, 0.5, 1.0]):  # MuJoCo's unset colour
        rgba = model.mat_rgba[model.geom_matid[g]]
    return tuple(int(round(255 * c)) for c in rgba[:3]), float(rgba[3])


class SceneMirror:
    """The bodies and geoms of ``model`` under ``root`` in a viser scene.

    Args:
        scene: a ``viser.SceneApi`` (``server.scene``).
        model: the MuJoCo model whose geometry is drawn.
        root: the scene-tree prefix (two mirrors of one model side by side need two roots).
        opacity: ``None`` (the geoms' own) or a value in (0, 1] for every geom (a ghost twin).
        offset: ``(3,)`` metres the whole mirror is shifted by.
    """

    def __init__(self, scene, model: mujoco.MjModel, root: str = "/world", opacity: float | None = None,
                 offset=(0.0, 0.0, 0.0)):
        self.model, self.scene, self.root = model, scene, root
        self.data = mujoco.MjData(model)
        self.offset = np.asarray(offset, dtype=float)
        self.skipped: list[str] = []
        self.frames: dict[int, object] = {}
        for g in range(model.ngeom):
            if model.geom_group[g] >= VISIBLE_GROUPS or model.geom_rgba[g, 3] == 0:
                continue
            body = int(model.geom_bodyid[g])
            if body not in self.frames:
                self.frames[body] = scene.add_frame(f"{root}/body{body}", show_axes=False)
            self._add_geom(g, f"{root}/body{body}/geom{g}", opacity)
        self.update(model.qpos0)

    def _add_geom(self, g: int, name: str, opacity: float | None) -> None:
        m, T = self.model, mujoco.mjtGeom
        kind, size = m.geom_type[g], m.geom_size[g]
        color, alpha = _rgb(m, g)
        kw = {"color": color, "position": m.geom_pos[g], "wxyz": m.geom_quat[g],
              "opacity": opacity if opacity is not None else (alpha if alpha < 1 else None)}
        s = self.scene
        if kind == T.mjGEOM_PLANE:
            half = [v if v > 0 else 1.0 for v in size[:2]]  # an infinite plane: drawn 2 m wide
            kw["position"] = m.geom_pos[g] - [0, 0, 1e-3]
            s.add_box(name, dimensions=(2 * half[0], 2 * half[1], 2e-3), receive_shadow=True, **kw)
        elif kind == T.mjGEOM_BOX:
            s.add_box(name, dimensions=tuple(2 * size), **kw)
        elif kind == T.mjGEOM_SPHERE:
            s.add_icosphere(name, radius=float(size[0]), **kw)
        elif kind == T.mjGEOM_ELLIPSOID:
            s.add_icosphere(name, radius=1.0, scale=tuple(size), **kw)
        elif kind == T.mjGEOM_CYLINDER:
            s.add_cylinder(name, radius=float(size[0]), height=float(2 * size[1]), **kw)
        elif kind == T.mjGEOM_CAPSULE:
            s.add_cylinder(name, radius=float(size[0]), height=float(2 * size[1]), **kw)
            for end, z in (("a", -size[1]), ("b", size[1])):  # the caps, in the capsule's own frame
                s.add_icosphere(f"{name}/{end}", radius=float(size[0]), color=color, position=(0.0, 0.0, float(z)),
                                opacity=kw["opacity"])
        elif kind == T.mjGEOM_MESH:
            mid = m.geom_dataid[g]
            v0, nv, f0, nf = m.mesh_vertadr[mid], m.mesh_vertnum[mid], m.mesh_faceadr[mid], m.mesh_facenum[mid]
            s.add_mesh_simple(name, vertices=m.mesh_vert[v0:v0 + nv], faces=m.mesh_face[f0:f0 + nf], **kw)
        else:
            self.skipped.append(m.geom(g).name or f"geom {g}")

    def update(self, qpos) -> None:
        """Move every body to its pose at ``(nq,)`` positions ``qpos``."""
        q = np.asarray(qpos, dtype=float)
        if q.shape != (self.model.nq,):
            raise TwinloopError(f"qpos must have shape ({self.model.nq},), got {q.shape}")
        self.data.qpos[:] = q
        mujoco.mj_kinematics(self.model, self.data)
        for body, frame in self.frames.items():
            frame.position = self.data.xpos[body] + self.offset
            frame.wxyz = self.data.xquat[body]


def light_plainly(server) -> None:
    """Light the page with a hemisphere light and unshadowed default lights instead of viser's
    default environment map.

    With the environment map an open page keeps redrawing while nothing moves: a browser on
    software WebGL then spends about half a core on an idle page. Shadows would double the work
    of every frame the page does draw.
    """
    scene = server.scene
    scene.configure_environment_map(None)
    scene.configure_default_lights(True, cast_shadow=False)
    scene.add_light_hemisphere("/lights/sky", sky_color=(255, 255, 255), ground_color=(120, 120, 130), intensity=1.5)


def look_from_above(server, model: mujoco.MjModel, offset=(0.0, 0.0, 0.0)) -> None:
    """Point the page's initial camera down at the model's centre from above and a little to the
    side (+z up)."""
    c = np.asarray(model.stat.center, dtype=float) + np.asarray(offset, dtype=float)
    extent = float(model.stat.extent)
    server.scene.set_up_direction("+z")
    server.initial_camera.look_at = (float(c[0]), float(c[1]), 0.0)
    server.initial_camera.position = (float(c[0]), float(c[1]) - 0.25 * extent, 2.0 * extent)
