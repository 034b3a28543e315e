"""Calibration: fit the twin, measure the gap, find where it is unsure (the Real-Sim-Real loop
that composes these lives in :mod:`twinloop.run.rsr`).

- :func:`calibrate` (``fit.py``): fit a ParamSpace to recorded episodes by multiple shooting
  (``windows.py``); least squares (``mujoco.minimize``), CMA-ES (``cma``) or MJX gradients;
  returns a :class:`Posterior` with intervals and NOT IDENTIFIABLE flags.
- :func:`gap` (``gap.py``): Gaussian KL, MMD, sliced Wasserstein between world and twin
  transitions, with bootstrap intervals.
- :func:`infogap_cost` (``infogap.py``): a refiner cost term rewarding informative actions.
"""

from twinloop.calib.fit import METHODS, CalibConfig, Posterior, calibrate, recovery_error
from twinloop.calib.gap import METRICS, Gap, GapConfig, divergence, gap, gaps, transitions
from twinloop.calib.infogap import infogap_cost, information_gain, observed_qpos
from twinloop.calib.windows import (
    StateError,
    Trajectory,
    Windows,
    as_trajectories,
    free_starts,
    make_windows,
    record_trajectory,
)

__all__ = [
    "METHODS", "METRICS", "CalibConfig", "Gap", "GapConfig", "Posterior",
    "StateError", "Trajectory", "Windows", "as_trajectories", "calibrate", "divergence", "free_starts", "gap",
    "gaps", "infogap_cost", "information_gain", "make_windows", "observed_qpos", "record_trajectory",
    "recovery_error", "transitions",
]
