"""Visualisation: episode videos with ghost rollouts (``viz.video``) and result plots
(``viz.plots``). Rendering needs an offscreen GL backend (EGL or OSMesa)."""

from twinloop.viz.plots import plot_comparison, plot_curves, plot_evaluation, plot_rounds
from twinloop.viz.video import (
    Ghosts,
    RenderingUnavailable,
    ghosts_from_rollouts,
    gl_backend,
    render_episode,
    render_frames,
    save_frame,
)

__all__ = [
    "Ghosts", "RenderingUnavailable", "ghosts_from_rollouts", "gl_backend", "plot_comparison",
    "plot_curves", "plot_evaluation", "plot_rounds", "render_episode", "render_frames", "save_frame",
]
