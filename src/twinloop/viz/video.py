"""Videos of episodes, with the refiner's candidate rollouts drawn as "ghosts".

Each frame sets ``qpos`` on a copy of the model, renders it offscreen with
``mujoco.Renderer`` and, after ``update_scene``, appends thin translucent line geoms to
``renderer.scene`` (``mjv_initGeom`` + ``mjv_connector``) for every segment of every ghost
trace (lines, not capsules: a capsule costs ~20x more to rasterize in software GL): all candidates faint, the few lowest-cost ones highlighted, the chosen plan in a
distinct colour. Only a model and ``qpos`` are needed, so any task renders the same way.

The default camera looks straight down with an orthographic projection, so an XY trace lands
exactly where the thing it traces is, whatever its height.

Offscreen OpenGL: MuJoCo picks its GL backend from ``MUJOCO_GL`` when it is first imported.
:func:`gl_backend` probes ``MUJOCO_GL`` (if set), then EGL, then OSMesa, each in a child
process (a failing GL backend can abort the process that tries it), and points MuJoCo's
renderer at the first that works.
"""

from __future__ import annotations

import copy
import functools
import importlib
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import imageio.v2 as imageio
import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array
from twinloop.io import atomic_write


class RenderingUnavailable(RuntimeError):
    """No offscreen OpenGL backend works on this machine."""


_PROBE = """
import os, sys
os.environ["MUJOCO_GL"] = sys.argv[1]
import mujoco
m = mujoco.MjModel.from_xml_string("<mujoco><worldbody><geom size='0.1'/></worldbody></mujoco>")
d = mujoco.MjData(m)
mujoco.mj_forward(m, d)
with mujoco.Renderer(m, 16, 16) as r:
    r.update_scene(d)
    r.render()
"""
_BACKENDS = {"egl": "mujoco.egl", "osmesa": "mujoco.osmesa", "glfw": "mujoco.glfw"}
_LIBS = {"egl": "libegl1 (EGL; with Mesa or a GPU driver)", "osmesa": "libosmesa6 (software OSMesa)"}


def gl_backend() -> str:
    """The offscreen GL backend in use (``egl`` | ``osmesa`` | ``glfw``), probed once per process.

    Raises:
        RenderingUnavailable: naming the system libraries to install.
    """
    backend, why = _probe()
    if backend is None:
        raise RenderingUnavailable(why)
    return backend


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[str | None, str]:
    requested = os.environ.get("MUJOCO_GL", "").strip().lower()
    errors = {}
    for backend in dict.fromkeys([requested, "egl", "osmesa"]):
        if backend not in _BACKENDS:
            continue
        try:
            p = subprocess.run([sys.executable, "-c", _PROBE, backend], capture_output=True,
                               text=True, timeout=120)
            ok, why = p.returncode == 0, (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, why = False, str(exc)
        if ok:
            _use(backend)
            return backend, ""
        errors[backend] = why if len(why) <= 160 else why[:157] + "..."
    tried = "; ".join(f"{b}: {e}" for b, e in errors.items())
    return None, (f"no offscreen OpenGL backend works ({tried}). Install {_LIBS['egl']} or "
                  f"{_LIBS['osmesa']}, e.g. `apt-get install libegl1 libosmesa6`, or set MUJOCO_GL "
                  "to a backend that works.")


def _use(backend: str) -> None:
    os.environ["MUJOCO_GL"] = backend  # for processes we start, and for a later first import
    module = sys.modules.get(mujoco.Renderer.__module__)
    gl = getattr(module, "gl_context", None)
    if gl is None:
        return
    try:
        want = importlib.import_module(_BACKENDS[backend]).GLContext
    except (ImportError, AttributeError, OSError) as exc:
        raise RenderingUnavailable(f"MuJoCo's {backend} backend does not load in this process: {exc}") from exc
    if getattr(gl, "GLContext", None) is not want:
        # mujoco chose its backend from MUJOCO_GL when imported (before we could set it)
        gl.GLContext = want


# -- ghosts ------------------------------------------------------------------------------------


def _traces(x, name: str) -> np.ndarray:
    """``(G, L, 2|3)`` float array; may be empty (nothing to draw), may hold NaN (skipped)."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TwinloopError(f"{name} must be numeric, got {type(x).__name__}") from exc
    if arr.ndim != 3 or arr.shape[2] not in (2, 3):
        raise TwinloopError(f"{name} must have shape (G, L, 2) (XY polylines) or (G, L, 3) (XYZ), got {arr.shape}")
    return arr


@dataclass(frozen=True)
class Ghosts:
    """Candidate traces to draw over one frame.

    Attributes:
        traces: ``(G, L, 2)`` XY or ``(G, L, 3)`` XYZ polylines (m) of candidate rollouts. The
            top-down view draws every trace just above the scene; a perspective camera draws
            XYZ traces where they are.
        costs: ``(G,)`` cost of each trace's rollout, or ``None``; the traces of the ``n_best``
            lowest costs are highlighted (non-finite costs never are).
        chosen: ``(C, L', 2|3)`` traces of the chosen plan (the plan sent), drawn red, or ``None``.
        n_best: how many lowest costs to highlight (yellow).
        base: ``(B, L', 2|3)`` traces of the base proposal, drawn green, or ``None``.
    """

    traces: np.ndarray
    costs: np.ndarray | None = None
    chosen: np.ndarray | None = None
    n_best: int = 3
    base: np.ndarray | None = None

    def __post_init__(self):
        tr = _traces(self.traces, "ghost traces")
        object.__setattr__(self, "traces", tr)
        if self.costs is not None:
            c = np.asarray(self.costs, dtype=float)
            if c.shape != (tr.shape[0],):
                raise TwinloopError(f"ghost costs must have shape ({tr.shape[0]},), got {c.shape}")
            object.__setattr__(self, "costs", c)
        if self.chosen is not None:
            object.__setattr__(self, "chosen", _traces(self.chosen, "chosen traces"))
        if self.base is not None:
            object.__setattr__(self, "base", _traces(self.base, "base proposal traces"))

    def best_mask(self) -> np.ndarray:
        """``(G,)`` which traces are highlighted."""
        if self.costs is None or self.n_best <= 0:
            return np.zeros(len(self.traces), bool)
        finite = np.isfinite(self.costs)
        levels = np.unique(self.costs[finite])[: self.n_best]
        return finite & np.isin(self.costs, levels)


def ghosts_from_rollouts(points, costs=None, *, chosen=None, max_candidates: int = 32,
                         max_points: int = 21, n_best: int = 3, base: int | None = None) -> Ghosts:
    """Ghost traces from the paths of traced points in a batch of rollouts.

    Args:
        points: ``(K, L, n, d)`` positions of ``n`` traced points (``d`` = 2 or 3, m) along
            each candidate's rollout, or ``(P, K, L, n, d)`` (the first parameter particle is
            drawn); e.g. ``task.trace_points(rollouts.qpos, rollouts.sensordata)``.
        costs: ``(K,)`` candidate costs (e.g. ``RefineResult.costs``); the lowest are kept
            when there are more than ``max_candidates`` and the best ``n_best`` highlighted.
        chosen: the chosen plan: an index into K, an ``(L', n, d)`` path, or ``None`` (the
            lowest-cost candidate when ``costs`` is given).
        max_candidates: most candidates drawn.
        max_points: points kept per trace (evenly spaced, first and last kept): a rollout
            has one point per physics step, far more than a video needs.
        base: the base proposal's index into K (the refiner's row 1), or ``None``.
    """
    x = as_array(points, "points", finite=False)
    if x.ndim == 5:
        x = x[0]
    if x.ndim != 4 or x.shape[-1] not in (2, 3):
        raise TwinloopError(f"points must have shape (K, L, n, 2|3) or (P, K, L, n, 2|3), got {np.shape(points)}")
    K, L, n, dim = x.shape
    if max_points < 2:
        raise TwinloopError(f"max_points must be >= 2, got {max_points}")
    c = None
    order = np.arange(K)
    if costs is not None:
        c = np.asarray(costs, dtype=float)
        if c.shape != (K,):
            raise TwinloopError(f"costs must have shape ({K},), got {c.shape}")
        order = np.argsort(np.where(np.isfinite(c), c, np.inf), kind="stable")
    keep = order[:max_candidates]

    def sub(m: int) -> np.ndarray:
        return np.unique(np.linspace(0, m - 1, min(m, max_points)).round().astype(int))

    def trace(path):  # (..., L', n, d) -> (..., n, L', d)
        return np.swapaxes(path, -3, -2)

    traces = trace(x[keep][:, sub(L)]).reshape(-1, len(sub(L)), dim)
    if chosen is None and c is not None and np.isfinite(c).any():
        chosen = int(order[0])
    if chosen is None:
        ch = None
    elif np.ndim(chosen) == 0:
        if not 0 <= int(chosen) < K:
            raise TwinloopError(f"chosen index {chosen} is outside [0, {K})")
        ch = trace(x[int(chosen)][sub(L)])
    else:
        cp = as_array(chosen, "chosen", (None, n, dim), finite=False)
        ch = trace(cp[sub(len(cp))])
    if base is not None and not 0 <= int(base) < K:
        raise TwinloopError(f"base index {base} is outside [0, {K})")
    bs = None if base is None else trace(x[int(base)][sub(L)])
    return Ghosts(traces, None if c is None else np.repeat(c[keep], n), ch, n_best, bs)


# -- rendering ---------------------------------------------------------------------------------

_FAINT = np.array([0.15, 0.55, 0.95, 0.30], np.float32)
_BEST = np.array([1.00, 0.85, 0.10, 0.85], np.float32)
_CHOSEN = np.array([0.90, 0.10, 0.20, 1.00], np.float32)
_BASE = np.array([0.08, 0.67, 0.27, 1.00], np.float32)

#: what each colour of a video's traces means (the legend drawn in its corner)
LEGEND = (("plan sent", _CHOSEN), ("base proposal", _BASE), ("best candidates", _BEST), ("other candidates", _FAINT))


def draw_legend(frame: np.ndarray, entries=LEGEND) -> np.ndarray:
    """``frame`` (``(H, W, 3)`` uint8) with a legend of the trace colours in its top-left corner."""
    from PIL import Image, ImageDraw

    img = Image.fromarray(frame)
    d = ImageDraw.Draw(img, "RGBA")
    scale = max(frame.shape[:2]) / 480
    line, pad = int(round(14 * scale)), int(round(6 * scale))
    d.rectangle([0, 0, int(130 * scale), pad * 2 + line * len(entries)], fill=(255, 255, 255, 200))
    for i, (label, rgba) in enumerate(entries):
        y = pad + i * line
        colour = tuple(int(255 * c) for c in rgba[:3]) + (255,)
        d.rectangle([pad, y + line // 4, pad + line, y + 3 * line // 4], fill=colour)
        d.text((2 * pad + line, y), label, fill=(0, 0, 0, 255))
    return np.asarray(img)


def top_down_camera(model: mujoco.MjModel, view_size: float) -> mujoco.MjvCamera:
    """An orthographic free camera straight above the model's centre (+x right, +y up in the
    image). Its visible height is ``model.vis.global_.fovy`` (m); set that to ``view_size``."""
    cam = mujoco.MjvCamera()
    cam.type = mujoco.mjtCamera.mjCAMERA_FREE
    cam.lookat[:] = [model.stat.center[0], model.stat.center[1], 0.0]
    cam.distance = max(1.0, 2 * view_size)
    cam.elevation = -90.0
    cam.azimuth = 90.0
    cam.orthographic = 1
    return cam


def _check_frame_size(width: int, height: int) -> None:
    for name, v in (("width", width), ("height", height)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 16 or v % 2:
            raise TwinloopError(f"{name} must be an even integer >= 16 (H.264 needs even sizes), got {v!r}")


def _as_ghosts(g, frame: int) -> Ghosts | None:
    """A frame's ghosts from ``None``, a :class:`Ghosts`, a ``(G, L, 2)`` array, or a dict of
    named ``(G, L, 2)`` trace groups (equal ``L``) with optional ``chosen`` (``(L, 2)`` or
    ``(C, L, 2)``) and ``costs`` (one per trace, groups in order)."""
    if g is None or isinstance(g, Ghosts):
        return g
    try:
        if not isinstance(g, Mapping):
            return Ghosts(g)
        groups = [_traces(v, f"group {k!r}") for k, v in g.items() if k not in ("chosen", "costs") and v is not None]
        if len({t.shape[1] for t in groups}) > 1:
            raise TwinloopError(f"trace groups have different lengths {[t.shape for t in groups]}")
        traces = np.concatenate(groups) if groups else np.empty((0, 2, 2))
        chosen = g.get("chosen")
        if chosen is not None and np.ndim(chosen) == 2:
            chosen = np.asarray(chosen)[None]
        return Ghosts(traces, g.get("costs"), chosen)
    except TwinloopError as exc:
        raise TwinloopError(f"ghosts[{frame}]: {exc}") from exc


def _n_segments(g: Ghosts | None) -> int:
    if g is None:
        return 0
    n = g.traces.shape[0] * max(g.traces.shape[1] - 1, 0)
    for extra in (g.chosen, g.base):
        if extra is not None:
            n += extra.shape[0] * max(extra.shape[1] - 1, 0)
    return n


def _draw(scene: mujoco.MjvScene, traces: np.ndarray, z: float | None, px: float, rgba: np.ndarray) -> None:
    """Append each ``(L, 2|3)`` trace as ``L-1`` line segments ``px`` pixels wide, at height
    ``z`` (or, for ``z=None`` and XYZ traces, where the points are)."""
    eye = np.eye(3).ravel()
    if z is not None or traces.shape[-1] == 2:
        traces = np.concatenate([traces[..., :2], np.full((*traces.shape[:-1], 1), z or 0.0)], axis=-1)
    for tr in traces:
        for a, b in zip(tr[:-1], tr[1:], strict=True):
            if scene.ngeom >= scene.maxgeom:
                return
            if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or np.allclose(a, b, atol=1e-9):
                continue  # unstable rollouts and zero-length segments have nothing to draw
            g = scene.geoms[scene.ngeom]
            mujoco.mjv_initGeom(g, mujoco.mjtGeom.mjGEOM_LINE, np.zeros(3), np.zeros(3), eye, rgba)
            mujoco.mjv_connector(g, mujoco.mjtGeom.mjGEOM_LINE, px, a, b)
            scene.ngeom += 1


def _scene_top(model: mujoco.MjModel, data: mujoco.MjData) -> float:
    """Height just above every non-plane geom (ghosts drawn there are never hidden)."""
    tops = [data.geom_xpos[i, 2] + model.geom_rbound[i] for i in range(model.ngeom)
            if model.geom_type[i] != mujoco.mjtGeom.mjGEOM_PLANE]
    return float(max(tops, default=0.0)) + 1e-3


def render_frames(task, model: mujoco.MjModel | None, qpos_seq, *, ghosts=None, width: int = 480,
                  height: int = 480, camera=None, view_size: float | None = None,
                  ghost_z: float | None = None, legend: bool = False) -> Iterator[np.ndarray]:
    """Yield ``(height, width, 3)`` uint8 frames of ``qpos_seq`` (see :func:`render_episode`);
    ``legend``: where ghosts are drawn, a legend of their colours in the top-left corner."""
    model = model if model is not None else getattr(task, "model", None)
    if not isinstance(model, mujoco.MjModel):
        raise TwinloopError("render needs a mujoco.MjModel (pass model=, or a task with .model)")
    _check_frame_size(width, height)
    q = as_array(qpos_seq, "qpos_seq", (None, model.nq))
    if ghosts is not None and len(ghosts) not in (len(q), len(q) - 1):
        raise TwinloopError(f"ghosts has {len(ghosts)} frames but qpos_seq has {len(q)} "
                            "(give one per frame, or one per action: the final state gets none)")
    gs = [None] * len(q) if ghosts is None else [_as_ghosts(g, i) for i, g in enumerate(ghosts)]
    gs += [None] * (len(q) - len(gs))
    view = float(view_size) if view_size is not None else 4.0 * float(model.stat.extent)
    if not (math.isfinite(view) and view > 0):
        raise TwinloopError(f"view_size must be a positive length (m), got {view_size}")
    gl_backend()
    m = copy.deepcopy(model)  # the caller's model keeps its visual settings
    m.vis.global_.offwidth = max(m.vis.global_.offwidth, width)
    m.vis.global_.offheight = max(m.vis.global_.offheight, height)
    top_down = camera is None
    if top_down:
        m.vis.global_.orthographic = 1
        m.vis.global_.fovy = view  # for an orthographic free camera: visible height (m)
        # the headlight shines straight down with the camera: soften it so the table does
        # not saturate to white under a scene light from above
        m.vis.headlight.ambient[:] = 0.3
        m.vis.headlight.diffuse[:] = 0.2
        m.vis.headlight.specular[:] = 0.0
        m.light_specular[:] = np.minimum(m.light_specular, 0.1)
        camera = top_down_camera(m, view)
    d = mujoco.MjData(m)
    extra = max((_n_segments(g) for g in gs), default=0)
    with mujoco.Renderer(m, height, width, max_geom=m.ngeom + 200 + extra) as r:
        if top_down:  # seen from straight above, shadows only add dark copies of the ghosts
            r.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        z = ghost_z
        for qk, g in zip(q, gs, strict=True):
            d.qpos[:] = qk
            mujoco.mj_forward(m, d)
            r.update_scene(d, camera)
            if g is not None:
                if z is None and (top_down or g.traces.shape[-1] == 2):
                    z = _scene_top(m, d)
                best = g.best_mask()
                px = max(width, height) / 480  # line widths scale with the image
                for traces, dz, w, rgba in ((g.traces[~best], 0.0, 1.5, _FAINT), (g.traces[best], 1e-4, 2.5, _BEST),
                                            (g.base, 1.5e-4, 3.0, _BASE), (g.chosen, 2e-4, 4.0, _CHOSEN)):
                    if traces is not None:
                        _draw(r.scene, traces, None if z is None else z + dz, w * px, rgba)
            frame = r.render().copy()
            yield draw_legend(frame) if legend and any(x is not None for x in gs) else frame


def render_episode(task, model: mujoco.MjModel | None, qpos_seq, path: str | os.PathLike, *,
                   ghosts=None, fps: float = 10, width: int = 480, height: int = 480, camera=None,
                   view_size: float | None = None, ghost_z: float | None = None, legend: bool = True) -> Path:
    """Write an MP4 (H.264) of an episode; returns ``path``.

    Args:
        task: optional; its ``model`` is used when ``model`` is ``None``.
        model: the scene to render.
        qpos_seq: ``(T, nq)`` positions, one per frame.
        path: output file (written to a temp file beside it, then renamed).
        ghosts: ``None`` or ``T`` items (or ``T - 1``, one per action: the last frame, the
            final state, then has none), each ``None``, a ``(G, L, 2|3)`` array of traces
            (m), a :class:`Ghosts` (costs to highlight the best, the chosen plan), or a dict
            of named ``(G, L, 2)`` trace groups with optional ``chosen`` and ``costs``.
        fps: frames per second.
        width, height: pixels (even).
        camera: ``None`` (top-down orthographic), a model camera name or id, or an
            ``mujoco.MjvCamera``.
        view_size: metres of the scene shown by the default camera (default 4x the model's
            extent).
        ghost_z: height (m) ghosts are drawn at (default: just above every geom in the top-down
            view; where the points are, for XYZ traces seen through a camera).
        legend: draw a legend of the trace colours (:data:`LEGEND`: the plan sent red, the
            base proposal green, the lowest-cost candidates yellow, the others faint blue) in
            the top-left corner of a video with ghosts.

    Raises:
        RenderingUnavailable: no offscreen GL backend works (names what to install).
    """
    if not (isinstance(fps, (int, float)) and math.isfinite(fps) and fps > 0):
        raise TwinloopError(f"fps must be a positive number, got {fps!r}")
    frames = render_frames(task, model, qpos_seq, ghosts=ghosts, width=width, height=height,
                           camera=camera, view_size=view_size, ghost_z=ghost_z, legend=legend)
    return write_frames(frames, path, fps)


def write_frames(frames: Iterator[np.ndarray], path: str | os.PathLike, fps: float) -> Path:
    """Write ``(H, W, 3)`` uint8 ``frames`` as an MP4 (H.264); returns ``path``. The first
    frame is made before any file is created (what checks the input and GL)."""
    first = next(frames)
    path = Path(path)
    with atomic_write(path) as tmp:
        with imageio.get_writer(tmp, format="FFMPEG", mode="I", fps=fps, codec="libx264",
                                pixelformat="yuv420p", macro_block_size=1, quality=8,
                                ffmpeg_log_level="error") as w:
            w.append_data(first)
            for f in frames:
                w.append_data(f)
    return path


def camera_beside(views, camera_images, twin_qpos, task, *, size: int = 480) -> Iterator[np.ndarray]:
    """Frames of an episode seen through a camera: what the camera saw (each ``(S, S, 3)``
    image, scaled up), the twin at the state estimated from it (``twin_qpos (T, nq)``, rendered
    top-down) and ``views`` (the usual ``size`` x ``size`` frames, with ghosts), side by side. The lists may be one
    shorter than ``views`` (no image after the last action): their last item is repeated."""
    twin = render_frames(task, None, np.asarray(twin_qpos), width=size, height=size)
    last_cam = last_twin = None
    for k, view in enumerate(views):
        if k < len(camera_images):
            img = np.asarray(camera_images[k])
            rep = max(1, size // img.shape[0])
            last_cam = np.kron(img, np.ones((rep, rep, 1), np.uint8))
            pad = size - last_cam.shape[0]
            last_cam = np.pad(last_cam, ((pad // 2, pad - pad // 2), (pad // 2, pad - pad // 2), (0, 0)))
            last_twin = next(twin)
        yield np.concatenate([last_cam, last_twin, view], axis=1)


def save_frame(task, model: mujoco.MjModel | None, qpos, path: str | os.PathLike, *, ghosts=None,
               width: int = 480, height: int = 480, camera=None, view_size: float | None = None,
               ghost_z: float | None = None) -> Path:
    """Write one frame (``qpos (nq,)``, ``ghosts`` for that frame) as a PNG; returns ``path``."""
    q = np.asarray(qpos, dtype=float)
    if q.ndim != 1:
        raise TwinloopError(f"qpos must be one (nq,) vector, got shape {q.shape}")
    (img,) = render_frames(task, model, q[None], ghosts=None if ghosts is None else [ghosts],
                           width=width, height=height, camera=camera, view_size=view_size,
                           ghost_z=ghost_z)
    path = Path(path)
    with atomic_write(path) as tmp:
        imageio.imwrite(tmp, img, format="PNG")
    return path
