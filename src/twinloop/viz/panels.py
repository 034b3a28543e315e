"""What the live view's page shows beside the scene: the ghost traces, the legend, the tick's
verdict, the plots over time and the planner controls (see :mod:`twinloop.viz.live`)."""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.plan import OPTIMIZERS
from twinloop.viz.tuning import WHEN

#: colours (RGB 0-255) of the traces: the page's legend and the tests' pixel check use them
CANDIDATE = (38, 140, 242)
CHOSEN = (230, 25, 50)
BASE = (20, 170, 70)

LEGEND = (f"**Traces** (the twin's rollouts of this tick's candidates):  \n"
          f"<span style='color:rgb{CHOSEN}'>■</span> the plan sent  \n"
          f"<span style='color:rgb{BASE}'>■</span> the base proposal  \n"
          f"<span style='color:rgb{CANDIDATE}'>■</span> the other candidates")


def scene_top(model: mujoco.MjModel, data: mujoco.MjData) -> float:
    """Height (m) just above every non-plane geom at ``data``'s pose (each geom's bounding box,
    turned with it)."""
    tops = [data.geom_xpos[i, 2] + model.geom_aabb[i, 2] + np.abs(data.geom_xmat[i, 6:9]) @ model.geom_aabb[i, 3:]
            for i in range(model.ngeom) if model.geom_type[i] != mujoco.mjtGeom.mjGEOM_PLANE]
    return float(max(tops, default=0.0)) + 2e-3


def segments(traces: np.ndarray, z: float | None) -> np.ndarray:
    """``(S, 2, 3)`` line segments of ``(G, L, 2|3)`` polylines (at height ``z`` when given),
    non-finite ones dropped."""
    tr = np.asarray(traces, dtype=float)
    if tr.shape[-1] == 2 or z is not None:
        tr = np.concatenate([tr[..., :2], np.full((*tr.shape[:-1], 1), 0.0 if z is None else z)], axis=-1)
    seg = np.stack([tr[:, :-1], tr[:, 1:]], axis=2).reshape(-1, 2, 3)
    return seg[np.isfinite(seg).all(axis=(1, 2))]


class TickPanel:
    """The page's panel and traces, drawn from :class:`~twinloop.viz.live.TickSnapshot` s."""

    def __init__(self, server, task, tuning):
        self.server, self.task, self.tuning = server, task, tuning
        gui = server.gui
        self.status = gui.add_markdown("waiting for the first tick ...")
        gui.add_markdown(LEGEND)
        t = ({"label": "t (s)"},)
        kw = {"scales": {"x": {"time": False}}}
        self.cost_plot = gui.add_uplot(
            (np.zeros(0),) * 3, t + ({"label": "sent plan's cost", "stroke": "rgb(230,25,50)", "width": 2},
                                     {"label": "base proposal's cost", "stroke": "rgb(20,170,70)", "width": 2}),
            title="predicted cost (task cost units) over t (s)", aspect=2.0, **kw)
        self.success_plot = gui.add_uplot(
            (np.zeros(0),) * 2, t + ({"label": "success test met (0/1)", "stroke": "black", "width": 2},),
            title="success test over t (s)", aspect=3.0, **kw)
        self.gap_plot = gui.add_uplot(
            (np.zeros(0),) * 3, t + ({"label": "gap score", "stroke": "rgb(120,60,200)", "width": 2},
                                     {"label": "threshold", "stroke": "gray", "width": 1, "dash": [6, 4]}),
            title="gap monitor score (score units) over t (s)", aspect=2.0, visible=False, **kw)
        self._controls(gui)
        self._episode, self._success = None, []
        self._ghosts: dict = {}  # trace group -> its line segments in the scene

    def _controls(self, gui) -> None:
        with gui.add_folder("planner (refined controller)"):
            gui.add_markdown("Applied at the next tick; the horizon at the next episode. Every change is "
                             "recorded in the episode (summary.json: per_episode ... tuned).")
            self.controls = {
                "num_samples": gui.add_number("K candidates", 32, min=2, max=4096, step=1),
                "iterations": gui.add_number("iterations / tick", 1, min=1, max=50, step=1),
                "optimizer": gui.add_dropdown("optimizer", tuple(OPTIMIZERS), initial_value="mppi"),
                "noise": gui.add_number("noise (x half-range)", 0.3, min=1e-4, max=2.0, step=0.01),
                "temperature": gui.add_number("temperature", 0.1, min=1e-4, max=10.0, step=0.01),
                "horizon": gui.add_number("horizon (s, next episode)", 0.5, min=0.01, max=10.0, step=0.05),
            }
            self.message = gui.add_markdown("")
        self._quiet = False
        for name, handle in self.controls.items():
            handle.on_update(lambda _e, name=name, handle=handle: self._request(name, handle.value))

    def _request(self, name: str, value) -> None:
        if not self._quiet:
            self.tuning.request(name, value)
            self.message.content = f"requested {name} = {value} (applied at the next {WHEN[name]})"

    def show_settings(self, values: dict) -> None:
        """Show the controller's current settings in the controls (a setting its optimizer has
        not is greyed out)."""
        self._quiet = True
        try:
            for name, handle in self.controls.items():
                v = values.get(name)
                handle.disabled = v is None
                if v is not None:
                    handle.value = v
        finally:
            self._quiet = False

    def draw(self, snap, mirror, text: bool = True) -> None:
        """Draw ``snap``'s traces, and with ``text`` its plots and status line too (the page
        redraws those at a lower rate than the scene)."""
        self._traces(snap, mirror)
        if text:
            self.draw_text(snap)

    def draw_text(self, snap) -> None:
        """The plots over time and the status line at ``snap``."""
        h = snap.history
        n = min(len(h.t), len(h.cost), len(h.prior_cost), len(h.gap), len(h.qpos))
        if snap.episode != self._episode:
            self._episode, self._success = snap.episode, []
        self._success += [float(self.task.success(q)) for q in h.qpos[len(self._success):n]]
        t = np.asarray(h.t[:n])
        self.cost_plot.data = (t, np.asarray(h.cost[:n]), np.asarray(h.prior_cost[:n]))
        self.success_plot.data = (t, np.asarray(self._success[:n]))
        if np.isfinite(snap.threshold):
            self.gap_plot.visible = True
            self.gap_plot.data = (t, np.asarray(h.gap[:n]), np.full(n, snap.threshold))
        gap = f" · gap {h.gap[n - 1]:.3g} / threshold {snap.threshold:.3g}" if n and np.isfinite(snap.threshold) else ""
        cost = f"{h.cost[n - 1]:.4g}" if n else "-"
        self.status.content = (f"**{snap.episode}** · tick {snap.tick} ({snap.tick * self.task.control_period:.2f} s)"
                               f" · cost {cost}{gap}  \n**sent:** {snap.verdict}"
                               + (f"  \n**tuning:** {self.tuning.message}" if self.tuning.message else ""))

    def _traces(self, snap, mirror) -> None:
        groups = {"candidates": None, "base": None, "chosen": None}
        if snap.roll_qpos is not None:
            pts = np.asarray(self.task.trace_points(snap.roll_qpos, snap.roll_sensors))  # (K, L, n, d)
            if pts.shape[-2]:
                paths = np.swapaxes(pts, 1, 2)  # (K, n, L, d)
                heights = pts[..., 2][np.isfinite(pts[..., 2])] if pts.shape[-1] == 3 else np.zeros(1)
                flat = heights.size == 0 or float(np.ptp(heights)) < 1e-3  # a planar task: lift above the scene
                z = scene_top(mirror.model, mirror.data) if flat else None
                rows = np.arange(len(paths))
                special = {snap.chosen, snap.base} - {None}
                groups["candidates"] = segments(paths[[r for r in rows if r not in special]].reshape(-1, *paths.shape[2:]), z)
                if snap.base is not None:
                    groups["base"] = segments(paths[snap.base], None if z is None else z + 1e-4)
                if snap.chosen is not None:
                    groups["chosen"] = segments(paths[snap.chosen], None if z is None else z + 2e-4)
        for name, colour, px in (("candidates", CANDIDATE, 1.5), ("base", BASE, 3.0), ("chosen", CHOSEN, 4.0)):
            self._show(name, groups[name], colour, px)

    def _show(self, name: str, seg: np.ndarray | None, colour, px: float) -> None:
        """Show ``(S, 2, 3)`` segments in the trace group ``name``: a group of the same size moves
        its points only (one small message; its colours and width are not sent again)."""
        handle = self._ghosts.get(name)
        if seg is None or not len(seg):
            if handle is not None and handle.visible:
                handle.visible = False
            return
        seg = np.ascontiguousarray(seg, dtype=np.float32)
        if handle is None or handle.points.shape != seg.shape:
            self._ghosts[name] = self.server.scene.add_line_segments(f"/ghosts/{name}", seg, colour, thickness=px,
                                                                     thickness_units="screen")
            return
        handle.points = seg
        if not handle.visible:
            handle.visible = True
