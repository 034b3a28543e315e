"""Worlds that see: camera images of a simulated world, with an appearance the twin does not know.

:class:`CameraWorld` wraps a simulated world (nominal or shifted) and replaces the entries of its
observation a camera must supply (the task's :attr:`~twinloop.tasks.Task.seen_obs` and their
rates) by NaN; what it returns instead is a :class:`CameraObs`: the robot's own entries plus one
RGB image per fixed camera, rendered with MuJoCo's renderer in the world's own process.

The images carry an **appearance shift** (:class:`Appearance`), drawn per severity and seeded
like the physics shift: object, pusher, goal marker and table colours, the table's texture
scale, lighting (intensity, direction, ambient), camera pose error (aim point, distance,
azimuth, tilt), pixel noise and blur. Rendering uses its own copy of the world's model with its
own data (positions copied, kinematics only), so the appearance never touches the physics.

Levels (the draw is ``nominal + U(-1, 1) * level``, per quantity, seeded by the world seed)::

    severity                0     1      2      3
    colour (rgb, 0..1)      0     0.06   0.12   0.2
    light (log factor)      0     0.1    0.2    0.35    (light tilt: half of it)
    texture scale (log)     0     0.09   0.17   0.3
    camera aim (m)          0     0.002  0.004  0.008
    camera angle (deg)      0     0.3    0.7    1.5
    noise (std, 0..255)     0     2      4      8       (noise, blur: U(0.5, 1) x level)
    blur (sigma, px)        0     0.2    0.4    0.8
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

import mujoco
import numpy as np
from scipy.ndimage import gaussian_filter

from twinloop.errors import TwinloopError, number
from twinloop.worlds.base import World

COLOUR = (0.0, 0.06, 0.12, 0.2)
LIGHT = (0.0, 0.1, 0.2, 0.35)
AIM = (0.0, 0.002, 0.004, 0.008)
ANGLE = (0.0, 0.3, 0.7, 1.5)
NOISE = (0.0, 2.0, 4.0, 8.0)
BLUR = (0.0, 0.2, 0.4, 0.8)
#: what the twin's renders are randomised over (perception training): beyond severity 3
TRAIN_SCALE = 1.5


@dataclass(frozen=True)
class CameraSpec:
    """A fixed camera looking down at the task's workspace.

    Attributes:
        name: the camera's name (the key of its image in :attr:`CameraObs.images`).
        lookat: ``(3,)`` the point it aims at (m).
        distance: from that point (m).
        azimuth, elevation: its direction (degrees; -90 looks straight down).
        size: image width and height (px).
    """

    name: str = "top"
    lookat: tuple[float, float, float] = (0.0, 0.0, 0.0)
    distance: float = 0.68
    azimuth: float = 90.0
    elevation: float = -90.0
    size: int = 96


@dataclass(frozen=True)
class Appearance:
    """How a rendered scene looks, as offsets from the twin's own look (all zero: the twin's).

    Attributes:
        colour: ``{geom or material name: (3,) rgb offset}`` added to its colour (clipped to 0..1).
        texrepeat: factor on the table texture's repetition.
        light: log factor on every light's diffuse intensity and the headlight's.
        light_dir: ``(2,)`` tilt of the lights' direction (x, y, in units of its length).
        aim: ``(3,)`` camera aim point error (m).
        distance: camera distance factor - 1.
        azimuth, elevation: camera angle errors (degrees).
        noise: Gaussian pixel noise (std, 0..255).
        blur: Gaussian blur (sigma, px).
    """

    colour: dict = field(default_factory=dict)
    texrepeat: float = 1.0
    light: float = 0.0
    light_dir: tuple[float, float] = (0.0, 0.0)
    aim: tuple[float, float, float] = (0.0, 0.0, 0.0)
    distance: float = 0.0
    azimuth: float = 0.0
    elevation: float = 0.0
    noise: float = 0.0
    blur: float = 0.0


def coloured(model: mujoco.MjModel) -> list[str]:
    """Names of what an appearance recolours: every named geom with a colour of its own (no
    material), every named material, every named site (a marker such as a goal), every named
    flex with a colour of its own (a towel; last, so a scene without one draws as before)."""
    out = [model.geom(i).name for i in range(model.ngeom) if model.geom(i).name and model.geom_matid[i] < 0]
    out += [model.mat(i).name for i in range(model.nmat) if model.mat(i).name]
    out += [model.site(i).name for i in range(model.nsite) if model.site(i).name]
    flexes = (mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_FLEX, i) for i in range(model.nflex) if model.flex_matid[i] < 0)
    return out + [n for n in flexes if n]


def draw_appearance(model: mujoco.MjModel, rng: np.random.Generator, level: float) -> Appearance:
    """An appearance shifted by ``level`` (a severity 0..3, or beyond for training: fractions
    interpolate the table of levels), each quantity uniform in ``[-1, 1]`` times its level."""
    level = number(level, "appearance level", low=0)

    def at(table):
        i = min(int(level), 2)
        return table[i] + (level - i) * (table[i + 1] - table[i])

    names = coloured(model)
    u = lambda *shape: rng.uniform(-1.0, 1.0, shape or 1)  # noqa: E731
    return Appearance(
        colour={n: tuple(at(COLOUR) * u(3)) for n in names}, texrepeat=float(np.exp(0.3 * at(LIGHT) / LIGHT[3] * u()[0])),
        light=float(at(LIGHT) * u()[0]), light_dir=tuple(0.5 * at(LIGHT) * u(2)),
        aim=(*(at(AIM) * u(2)), 0.0), distance=float(at(AIM) * u()[0]), azimuth=float(at(ANGLE) * u()[0]),
        elevation=float(at(ANGLE) * u()[0]), noise=float(at(NOISE) * (3 + u()[0]) / 4), blur=float(at(BLUR) * (3 + u()[0]) / 4))


class SceneCamera:
    """Renders a scene from :class:`CameraSpec` cameras under an :class:`Appearance`.

    Holds its own copy of ``model`` (whose colours and lights the appearance edits) and its
    own data: ``render(qpos)`` poses the scene by kinematics only, never stepping physics.
    """

    def __init__(self, model: mujoco.MjModel, cameras: tuple[CameraSpec, ...] = (CameraSpec(),)):
        if not cameras:
            raise TwinloopError("a scene camera needs at least one camera")
        self.base = model
        self.model = copy.deepcopy(model)
        self.data = mujoco.MjData(self.model)
        self.cameras = tuple(cameras)
        sizes = {c.size for c in self.cameras}
        self.model.vis.global_.offwidth = max(self.model.vis.global_.offwidth, *sizes)
        self.model.vis.global_.offheight = max(self.model.vis.global_.offheight, *sizes)
        self._renderers = {s: mujoco.Renderer(self.model, s, s) for s in sizes}
        self._nominal = (model.geom_rgba.copy(), model.mat_rgba.copy(), model.site_rgba.copy(), model.flex_rgba.copy(),
                         model.mat_texrepeat.copy(), model.light_diffuse.copy(), model.light_dir.copy())
        self.appearance = Appearance()
        self.set_appearance(Appearance())

    def set_appearance(self, look: Appearance) -> None:
        """Apply ``look`` (offsets from the model's own look, on its copy)."""
        m = self.model
        geom, mat, site, flex, rep, diffuse, direction = self._nominal
        m.geom_rgba[:], m.mat_rgba[:], m.site_rgba[:], m.flex_rgba[:] = geom, mat, site, flex
        for name, rgb in look.colour.items():
            for kind, rgba in ((mujoco.mjtObj.mjOBJ_GEOM, m.geom_rgba), (mujoco.mjtObj.mjOBJ_MATERIAL, m.mat_rgba),
                               (mujoco.mjtObj.mjOBJ_SITE, m.site_rgba), (mujoco.mjtObj.mjOBJ_FLEX, m.flex_rgba)):
                i = mujoco.mj_name2id(m, kind, name)
                if i >= 0:
                    rgba[i, :3] = np.clip(rgba[i, :3] + rgb, 0.0, 1.0)
        m.mat_texrepeat[:] = rep * look.texrepeat
        # the twin's own look: lights dimmed so a light object on a light table keeps its contrast
        m.light_diffuse[:] = diffuse * 0.75 * np.exp(look.light)
        d = direction + np.array([*look.light_dir, 0.0])
        m.light_dir[:] = d / np.linalg.norm(d, axis=-1, keepdims=True)
        m.vis.headlight.diffuse[:] = 0.25 * np.exp(look.light)
        m.vis.headlight.ambient[:] = 0.25
        m.vis.headlight.specular[:] = 0.0
        self.appearance = look

    def render(self, qpos, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """``{camera name: (size, size, 3) uint8}`` of the scene at ``qpos``; the appearance's
        noise is drawn from ``rng`` (none without one)."""
        m, d, look = self.model, self.data, self.appearance
        d.qpos[:] = qpos
        mujoco.mj_kinematics(m, d)
        if m.nflex:  # a flex (a towel) is drawn from its vertices' positions, which kinematics leaves stale
            mujoco.mj_flex(m, d)
        out = {}
        for spec in self.cameras:
            r = self._renderers[spec.size]
            cam = mujoco.MjvCamera()
            cam.type = mujoco.mjtCamera.mjCAMERA_FREE
            cam.lookat[:] = np.asarray(spec.lookat) + look.aim
            cam.distance = spec.distance * (1.0 + look.distance)
            cam.azimuth, cam.elevation = spec.azimuth + look.azimuth, spec.elevation + look.elevation
            r.update_scene(d, cam)
            for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION, mujoco.mjtRndFlag.mjRND_SKYBOX):
                r.scene.flags[flag] = 0
            img = r.render().astype(np.float32)
            if look.blur > 0:
                img = gaussian_filter(img, (look.blur, look.blur, 0))
            if look.noise > 0 and rng is not None:
                img = img + rng.normal(0.0, look.noise, img.shape)
            out[spec.name] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
        return out

    def pixel(self, point, camera: int = 0) -> np.ndarray:
        """``(2,)`` (row, column) of the world ``point`` (m) in camera ``camera``'s image, as the
        current appearance places that camera (fractional px; the image's top-left pixel's
        centre is (0, 0))."""
        spec = self.cameras[camera]
        r = self._renderers[spec.size]
        look = self.appearance
        cam = mujoco.MjvCamera()
        cam.type = mujoco.mjtCamera.mjCAMERA_FREE
        cam.lookat[:] = np.asarray(spec.lookat) + look.aim
        cam.distance = spec.distance * (1.0 + look.distance)
        cam.azimuth, cam.elevation = spec.azimuth + look.azimuth, spec.elevation + look.elevation
        mujoco.mj_kinematics(self.model, self.data)
        r.update_scene(self.data, cam)
        gl = r.scene.camera[0]  # a mono image is rendered from the mean of the two eyes' cameras
        fwd, up = np.array(gl.forward), np.array(gl.up)
        right = np.cross(fwd, up)
        v = np.asarray(point, dtype=float) - (np.array(gl.pos) + np.array(r.scene.camera[1].pos)) / 2
        depth = v @ fwd
        x, y = (v @ right) / depth * gl.frustum_near, (v @ up) / depth * gl.frustum_near
        half = gl.frustum_width if gl.frustum_width > 0 else (gl.frustum_top - gl.frustum_bottom) / 2
        col = (x - (gl.frustum_center - half)) / (2 * half) * spec.size - 0.5
        row = (gl.frustum_top - y) / (gl.frustum_top - gl.frustum_bottom) * spec.size - 0.5
        return np.array([row, col])

    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers = {}


class CameraObs(np.ndarray):
    """An observation a camera world returns: the task's ``(n_obs,)`` observation vector with the
    entries a camera must supply set to NaN (what is left is the robot's own state), and
    :attr:`images`, ``{camera name: (H, W, 3) uint8}``."""

    images: dict

    def __new__(cls, robot, images: dict):
        obj = np.asarray(robot, dtype=float).view(cls)
        obj.images = images
        return obj

    def __array_finalize__(self, obj):
        self.images = getattr(obj, "images", None)

    def __reduce__(self):  # pickles (to a worker) with its images
        return (CameraObs, (np.asarray(self), self.images))


def unseen_entries(task) -> np.ndarray:
    """``(n_obs,)`` mask of the observation entries a camera supplies: the keypoints of the
    task's :attr:`~twinloop.tasks.Task.seen` and their rates; a task that declares none cannot
    be observed by a camera."""
    names = tuple(task.obs_names)
    if task.seen is None or not task.seen.keypoints:
        raise TwinloopError(f"task {task.name!r} declares nothing a camera sees (Task.seen): it cannot run with "
                            "observe='rgb'")
    seen = (*task.seen.keypoints, *task.seen.rates, *task.seen.rates.values())
    unknown = sorted(set(seen) - set(names))
    if unknown:
        raise TwinloopError(f"task {task.name!r}: Task.seen names {unknown}, not among its obs_names")
    return np.array([n in seen for n in names])


class CameraWorld(World):
    """A simulated world seen through cameras: ``step`` returns :class:`CameraObs`.

    Args:
        world: a simulated world (``simulated``: it has ``model`` and ``data``).
        severity: the appearance shift's level (0: the twin's own look, no noise).
        seed: draws the appearance (as a shifted world's seed draws its physics).
        cameras: the fixed cameras (default: one 96 px camera straight above the workspace).
    """

    name = "camera"

    def __init__(self, world: World, severity: int = 2, seed: int = 0, cameras: tuple[CameraSpec, ...] | None = None):
        if not getattr(world, "simulated", False) or not hasattr(world, "data"):
            raise TwinloopError(f"observe='rgb' renders a simulated world's scene; world {world.name!r} is not one")
        self.world, self.task = world, world.task
        self.severity = number(severity, "severity", low=0, high=3, integer=True)
        self.seed = number(seed, "world seed", low=0, integer=True)
        self.mask = unseen_entries(self.task)
        self.camera = SceneCamera(world.model, cameras or task_cameras(self.task))
        self.camera.set_appearance(draw_appearance(world.model, np.random.default_rng([self.seed, 7]), self.severity))
        self.rng = np.random.default_rng(0)
        self.last_obs: CameraObs | None = None
        for cap in ("simulated", "has_hidden_params", "records_twin_state", "counterpart"):
            setattr(self, cap, getattr(world, cap))

    @property
    def period(self) -> float:
        return self.world.period

    @property
    def model(self) -> mujoco.MjModel:
        """The simulated world's model (its physics; the appearance lives in the camera's copy)."""
        return self.world.model

    def _seen(self, obs) -> CameraObs:
        robot = np.where(self.mask, np.nan, np.asarray(obs, dtype=float))
        self.last_obs = CameraObs(robot, self.camera.render(self.world.data.qpos, self.rng))
        return self.last_obs

    def reset(self, seed: int) -> CameraObs:
        obs = self.world.reset(seed)
        self.rng = np.random.default_rng([number(seed, "seed", low=0, integer=True), 7])
        return self._seen(obs)

    def step(self, action) -> tuple[CameraObs, dict]:
        obs, info = self.world.step(action)
        return self._seen(obs), info

    def info(self) -> dict:
        return self.world.info()

    def true_state(self) -> np.ndarray:
        return self.world.true_state()

    def describe(self) -> dict:
        look = self.camera.appearance
        return {**self.world.describe(), "observe": "rgb", "appearance_severity": self.severity,
                "appearance_seed": self.seed, "cameras": [c.name for c in self.camera.cameras],
                "appearance": {"light": look.light, "aim": list(look.aim), "azimuth": look.azimuth,
                               "elevation": look.elevation, "noise": look.noise, "blur": look.blur}}

    def close(self) -> None:
        self.camera.close()
        self.world.close()


def with_size(cameras: tuple[CameraSpec, ...], size: int) -> tuple[CameraSpec, ...]:
    """``cameras`` rendering ``size`` px images."""
    return tuple(replace(c, size=number(size, "image size (px)", low=8, integer=True)) for c in cameras)


def task_cameras(task) -> tuple[CameraSpec, ...]:
    """The task's cameras (``task.seen.cameras``: :class:`CameraSpec` fields each) as specs."""
    unseen_entries(task)
    try:
        return tuple(CameraSpec(**c) for c in task.seen.cameras)
    except TypeError as exc:
        raise TwinloopError(f"task {task.name!r}: cameras must give CameraSpec fields: {exc}") from None
