"""Calibration: fit the twin, measure the gap, find where it is unsure (the Real-Sim-Real loop
that composes these lives in :mod:`twinloop.run.rsr`).

- :func:`calibrate` (``fit.py``): fit a ParamSpace to recorded episodes by multiple shooting.
  The problem (``windows.py``, ``problem.py``), the methods (``methods.py``: least squares
  with ``mujoco.minimize``, CMA-ES with ``cma``, MJX gradients), the posterior
  (``posterior.py``: covariance, intervals, identifiability, profile check) and the report
  (``report.py``) are separate modules; it returns a :class:`Posterior`. Opt-in, the
  parametric bootstrap bias correction (``bootstrap.py``, ``CalibConfig.bootstrap``).
- :func:`gap` (``gap.py``): Gaussian KL, MMD, sliced Wasserstein between world and twin
  transitions, with bootstrap intervals.
- :class:`GapMonitor` (``monitor.py``): the live gap monitor a controller consults every tick.
- :func:`infogap_cost` (``infogap.py``): a refiner cost term rewarding informative actions.
"""

from twinloop.calib.fit import METHODS, CalibConfig, Posterior, calibrate
from twinloop.calib.gap import METRICS, Gap, GapConfig, divergence, gap, gaps, transitions
from twinloop.calib.infogap import infogap_cost, information_gain, observed_qpos
from twinloop.calib.monitor import Alarm, GapMonitor, MonitorConfig
from twinloop.calib.windows import (
    StateError,
    Trajectory,
    Windows,
    as_trajectories,
    free_starts,
    make_windows,
    quiet_starts,
    record_trajectory,
)

__all__ = [
    "METHODS", "METRICS", "Alarm", "CalibConfig", "Gap", "GapConfig", "GapMonitor", "MonitorConfig", "Posterior",
    "StateError", "Trajectory", "Windows", "as_trajectories", "calibrate", "divergence", "free_starts", "gap",
    "gaps", "infogap_cost", "information_gain", "make_windows", "observed_qpos", "quiet_starts", "record_trajectory",
    "transitions",
]
