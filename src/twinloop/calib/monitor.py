"""A live gap monitor: does the world still behave like the twin, tick by tick?

Each control tick the twin predicts, from the last state and the action sent, the state one
tick later (one batched rollout over the refiner's parameter particles, their mean); the world
then reports what happened. The per-tick gap is the mean squared weighted error of the
compared state components (the units of :class:`~twinloop.calib.windows.StateError`)::

    e_t   = mean_k ((predicted_k - observed_k) / scale_k)^2
    score = mean of e_t over the last ``window`` ticks

The threshold is calibrated on nominal data (:meth:`GapMonitor.from_nominal`: the
``quantile`` of the running score over nominal episodes, times ``margin``), so observation
noise and ordinary contact events stay below it. When the score exceeds it the monitor raises
an :class:`Alarm` that says why, and the controller acts as configured:

- ``widen``: spread the parameter particles ``widen`` times wider around their mean (from the
  prior when there were none): plan robustly while the twin is in doubt;
- ``refit``: calibrate the parameters on the last ``buffer`` ticks in a background thread; the
  new particles replace the old ``refit_ticks`` ticks after the alarm (a fixed tick, so the
  same seed gives the same episode);
- ``fallback``: stop refining and send the base proposer's actions;
- ``flag``: only record the alarm;
- ``adapt``: as ``refit``, and also, at tick ``adapt_at`` whatever the score, refit the
  parameters of the robot's own actuators alone (those whose targets are all ``actuator:``
  addresses: servo gains) on the ticks so far. A robot's tracking of its own commands shows
  its actuators' gains before it touches anything, when the objects' parameters are not
  seen yet (a fit of those would only follow the noise); waiting for an alarm can be too
  late (a softer arm tracks its commands with a lag that stays under the threshold).

After an alarm the running score restarts (the twin has changed, or was told to doubt).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from twinloop.calib.acceptance import planning_verdict
from twinloop.calib.fit import CalibConfig, calibrate
from twinloop.calib.windows import StateError, Trajectory, as_trajectories, twin_substeps
from twinloop.errors import TwinloopError, choose, number
from twinloop.params import ParamSpace
from twinloop.tasks.base import Task
from twinloop.twin import make_twin

ACTIONS = ("flag", "widen", "refit", "fallback", "adapt")


@dataclass(frozen=True)
class MonitorConfig:
    """Knobs of the gap monitor.

    Attributes:
        action: what an alarm does: ``flag`` | ``widen`` | ``refit`` | ``fallback``.
        window: ticks in the running score.
        quantile: quantile of the nominal running score the threshold starts from.
        margin: the threshold is ``margin`` times that quantile.
        widen: particle spread factor of ``widen`` (and particles drawn from the prior when
            the refiner has none: ``particles`` of them).
        particles: particles drawn for ``widen`` without any.
        buffer: ticks of recent data a refit uses.
        refit_ticks: ticks after the alarm at which the refit's particles take over.
        refit: the refit's :class:`CalibConfig` (default: CMA-ES, 120 evaluations, no errors
            in variables, one particle (the estimate): small and quick, and planning costs
            what it did).
        adapt_at: ``adapt``: the tick whose buffered ticks the actuator refit starts from (it
            takes over ``refit_ticks`` later).
        adapt: ``adapt``: the actuator refit's :class:`CalibConfig` (default: least squares
            (CMA-ES needs two parameters or more), 60 evaluations, windows starting anywhere:
            before contact nothing unobserved needs to settle).
        holdout: share of a refit's buffered ticks kept out of its fit for the control check
            (:mod:`~twinloop.calib.acceptance`, the refit's ``acceptance``): a refit it rejects,
            or whose every parameter is NOT IDENTIFIABLE, leaves the twin as it was and is
            listed in :attr:`GapMonitor.rejected`; 0: fit all, no check.
        unidentified_refits: take a refit whose every parameter is NOT IDENTIFIABLE (a short
            buffer rarely identifies anything; its control check, when the buffer affords
            one, still decides). Default: such a refit leaves the twin as it was.
        pos_scale, angle_scale, vel_scale: error units, as in calibration.
        seed: seed of the prior draws.
    """

    action: str = "flag"
    window: int = 10
    quantile: float = 0.99
    margin: float = 2.0
    widen: float = 2.0
    particles: int = 4
    buffer: int = 30
    refit_ticks: int = 5
    refit: CalibConfig = CalibConfig(method="cma", max_evals=120, errors_in_variables=False, particles=1)
    adapt_at: int = 10
    adapt: CalibConfig = CalibConfig(method="least_squares", max_evals=60, errors_in_variables=False, particles=1,
                                     start_clearance=None)
    holdout: float = 1 / 3
    unidentified_refits: bool = False
    pos_scale: float = 1e-3
    angle_scale: float = 5e-2
    vel_scale: float = 2e-2
    seed: int = 0

    def __post_init__(self):
        choose("monitor action", self.action, ACTIONS)
        for k, low in (("window", 1), ("particles", 1), ("buffer", 2), ("refit_ticks", 0), ("seed", 0),
                       ("adapt_at", 2)):
            object.__setattr__(self, k, number(getattr(self, k), k, low=low, integer=True))
        object.__setattr__(self, "quantile", number(self.quantile, "quantile", low=0, high=1, low_open=True))
        object.__setattr__(self, "holdout", number(self.holdout, "holdout", low=0, high=1, high_open=True))
        for k in ("margin", "widen", "pos_scale", "angle_scale", "vel_scale"):
            object.__setattr__(self, k, number(getattr(self, k), k, low=0, low_open=True))
        for k in ("refit", "adapt"):
            if not isinstance(getattr(self, k), CalibConfig):
                raise TwinloopError(f"{k} must be a CalibConfig, got {type(getattr(self, k)).__name__}")


@dataclass(frozen=True)
class Alarm:
    """An exceeded threshold: when, by how much, and what was done about it."""

    tick: int
    score: float
    threshold: float
    action: str

    @property
    def reason(self) -> str:
        done = {"flag": "recorded only", "widen": "widened the parameter particles",
                "refit": "refitting the parameters from recent ticks", "fallback": "fell back to the base proposer",
                "adapt": "refitting the parameters from recent ticks"}
        return (f"gap score {self.score:.3g} > threshold {self.threshold:.3g} at tick {self.tick} "
                f"(the world no longer behaves like the twin): {done[self.action]}")


class GapMonitor:
    """Compares each tick's one-tick twin prediction with what the world then reported.

    Args:
        task: the task (control period, obs -> state).
        twin: a twin of ``task.model`` with ``rollout_many`` (the refiner's).
        error: the compared components and their units.
        threshold: alarm level of the running score (see :meth:`from_nominal`).
        config: :class:`MonitorConfig`.
    """

    def __init__(self, task: Task, twin, error: StateError, threshold: float, config: MonitorConfig | None = None):
        self.task, self.twin, self.error = task, twin, error
        self.threshold = number(threshold, "threshold", low=0, low_open=True)
        self.config = config or MonitorConfig()
        self.substeps = twin_substeps(task, twin)
        self._pool: ThreadPoolExecutor | None = None
        self.reset()

    @classmethod
    def from_nominal(cls, task: Task, twin, episodes: Sequence, config: MonitorConfig | None = None,
                     params: np.ndarray | None = None) -> GapMonitor:
        """A monitor whose threshold is calibrated on nominal ``episodes`` (recorded where the
        twin is right): ``margin`` times the ``quantile`` of the running score over them."""
        cfg = config or MonitorConfig()
        trajs = as_trajectories(task, episodes)
        error = StateError.for_task(task, trajs, cfg.pos_scale, cfg.angle_scale, cfg.vel_scale)
        probe = cls(task, twin, error, 1.0, cfg)
        scores = []
        for tr in trajs:
            e = probe.tick_errors(tr.states[:-1], tr.actions, tr.states[1:], params)
            run = np.convolve(e, np.ones(cfg.window) / cfg.window, mode="valid") if len(e) >= cfg.window else e[-1:]
            scores.append(run)
        return cls(task, twin, error, cfg.margin * float(np.quantile(np.concatenate(scores), cfg.quantile)), cfg)

    def reset(self) -> None:
        """Forget the last episode (scores, buffer, a pending refit, the alarms and refits)."""
        self._scores: deque[float] = deque(maxlen=self.config.window)
        self._states: deque[np.ndarray] = deque(maxlen=self.config.buffer + 1)
        self._actions: deque[np.ndarray] = deque(maxlen=self.config.buffer)
        self._last: tuple[np.ndarray, np.ndarray] | None = None
        self._refit: tuple[int, Future, np.ndarray, list[int] | None] | None = None
        self.tick = 0
        self.alarms: list[Alarm] = []
        self.refits: list[tuple[int, np.ndarray]] = []  # (tick it took over, the estimate)
        self.rejected: list[tuple[int, str]] = []  # (tick, why): refits the control check turned down
        self.score = float("nan")

    def tick_errors(self, before: np.ndarray, actions: np.ndarray, after: np.ndarray, params=None) -> np.ndarray:
        """``(B,)`` per-tick gap ``e_t`` of transitions ``before (B, nstate)`` -> ``after`` under
        ``actions (B, nu)`` held one control tick (:attr:`substeps` of the twin's own timestep),
        the mean prediction over the particles ``params``."""
        ctrl = np.repeat(np.asarray(actions, float)[:, None], self.substeps, axis=1)
        r = self.twin.rollout_many(np.asarray(before, float), ctrl, params, sensors=False)
        m = self.twin.model
        pred = np.concatenate([r.qpos[:, :, -1], r.qvel[:, :, -1], np.zeros((*r.qpos.shape[:2], m.na))], axis=-1)
        pred = np.where(r.ok[..., None], pred, np.nan)
        d = self.error(np.nanmean(pred, axis=0), np.asarray(after, float))
        return np.mean(d**2, axis=-1)

    def observe(self, state: np.ndarray, params=None) -> Alarm | None:
        """The world's state now: score the prediction made from the last tick and return an
        :class:`Alarm` when the running score exceeds the threshold."""
        self.tick += 1
        alarm = None
        if self._last is not None:
            before, action = self._last
            e = float(self.tick_errors(before[None], action[None], state[None], params)[0])
            self._scores.append(e if np.isfinite(e) else 1e6)
            self.score = float(np.mean(self._scores))
            if len(self._scores) == self.config.window and self.score > self.threshold:
                alarm = Alarm(self.tick, self.score, self.threshold, self.config.action)
                self.alarms.append(alarm)
                self._scores.clear()
        self._states.append(np.asarray(state, float).copy())
        return alarm

    def sent(self, state: np.ndarray, action: np.ndarray) -> None:
        """The action sent from ``state`` this tick (what the next prediction replays)."""
        self._last = (np.asarray(state, float).copy(), np.asarray(action, float).copy())
        self._actions.append(self._last[1])

    def widened(self, params: np.ndarray | None, space) -> np.ndarray:
        """Particles ``widen`` times wider around their mean (prior draws without any)."""
        cfg = self.config
        if params is None or len(np.atleast_2d(params)) < 2:
            rng = np.random.default_rng([cfg.seed, self.tick])
            center = space.nominal if params is None else np.atleast_2d(params)[0]
            x = center + rng.standard_normal((cfg.particles, len(space))) * space.prior_std * cfg.widen / 2
            x[0] = center
            return np.clip(x, space.low, space.high)
        p = np.atleast_2d(params)
        mean = p.mean(axis=0)
        return np.clip(mean + cfg.widen * (p - mean), space.low, space.high)

    def start_refit(self, space: ParamSpace, x0: np.ndarray | None = None, names: Sequence[str] | None = None,
                    config: CalibConfig | None = None) -> None:
        """Calibrate ``space`` (or only its parameters ``names``, the others held at ``x0``) on
        the buffered ticks in a background thread, with ``config`` (default: ``refit``)."""
        states, actions = np.array(self._states), np.array(self._actions)
        n = min(len(actions), len(states) - 1)
        if n < 2:
            return
        traj = Trajectory(states[-n - 1 :], actions[-n:], index=self.tick)
        fit_on, held = self._split(traj)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="twinloop-refit")
        x0 = space.nominal if x0 is None else np.asarray(x0, float)
        cfg = config or self.config.refit
        if names is None:
            fut = self._pool.submit(calibrate, self.task, fit_on, space, config=cfg, x0=x0, holdout=held)
            self._refit = (self.tick + self.config.refit_ticks, fut, x0, None)
            return
        idx = [space.names.index(k) for k in names]
        sub = space.subset(names)
        # the twin holds the other parameters where they are now
        twin = make_twin("mujoco", space.apply(self.task.model, x0), sub)
        fut = self._pool.submit(calibrate, self.task, fit_on, sub, config=cfg, x0=x0[idx], twin=twin, holdout=held)
        self._refit = (self.tick + self.config.refit_ticks, fut, x0, idx)

    def _split(self, traj: Trajectory) -> tuple[list[Trajectory], list[Trajectory]]:
        """``(fit on, held out)``: the buffer's last ``holdout`` share (at least the check's
        ``min_windows`` windows of one planning horizon) is kept from the fit for its control
        check; a buffer too short to keep as much for the fit is fit whole, unchecked."""
        cfg = self.config.refit.acceptance
        n = traj.ticks
        if cfg is None or self.config.holdout == 0:
            return [traj], []
        horizon = max(1, int(round(cfg.horizon / self.task.control_period)))
        k = max(int(round(self.config.holdout * n)), horizon + cfg.min_windows - 1)
        if n - k < k:
            return [traj], []
        cut = n - k
        return ([Trajectory(traj.states[: cut + 1], traj.actions[:cut], index=traj.index)],
                [Trajectory(traj.states[cut:], traj.actions[cut:], index=traj.index + 1)])

    def adapt_due(self) -> bool:
        """``adapt``: whether the actuator refit starts now (tick ``adapt_at``)."""
        return self.config.action == "adapt" and self.tick == self.config.adapt_at

    def refit_ready(self) -> np.ndarray | None:
        """The refit's particles once its tick has come (waiting for it then), else ``None``.
        A failed refit is recorded as a flag-only alarm and changes nothing."""
        if self._refit is None or self.tick < self._refit[0]:
            return None
        _, fut, x0, idx = self._refit
        self._refit = None
        try:
            post = fut.result()
        except Exception:  # a refit must never stop the robot; keep the twin as it is
            self.alarms.append(Alarm(self.tick, self.score, self.threshold, "flag"))
            return None
        usable, why = planning_verdict(post)
        if not usable and self.config.unidentified_refits and (post.acceptance is None
                                                              or post.acceptance.accepted is not False):
            usable = True  # only unidentified, and taken as configured
        if not usable:  # the twin stays as it is: a fit that would plan worse is no refit
            self.rejected.append((self.tick, why))
            return None
        fitted = post.particles
        if idx is None:
            particles = fitted
        else:  # a refit of some parameters: the others as they were
            particles = np.repeat(x0[None], len(fitted), axis=0)
            particles[:, idx] = fitted
        self.refits.append((self.tick, particles[0].copy()))
        return particles

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


__all__ = ["ACTIONS", "Alarm", "GapMonitor", "MonitorConfig"]
