"""Calibration judged by what it is for: does the fitted twin predict what the plan reads?

A calibration fits transitions; a refiner reads the task's cost over its planning horizon.
A fit can predict transitions better on average and still mislead the plan (a block made as
light as its bound and damped 8x to match another engine's contacts on average stalls the
plan a few millimetres from the goal). So a fit is accepted for planning only if it predicts
the task's own cost terms over the planning horizon, on held-out windows, better than the
nominal twin does. For each held-out window ``i`` (``L`` ticks from a recorded state, the
recorded actions replayed, each parameter vector with its own actuation delay)::

    E_i(x) = sum_terms weight * mean_t |r_t(predicted under x) - r_t(recorded)|^2
    w_i    = s / (s + e_i)          e_i: the task's error at the window's start,
                                    s: its ``goal_quantile`` over the windows
    E(x)   = sum_i w_i E_i(x) / sum_i w_i

with ``r_t`` each residual term of :meth:`Task.residuals <twinloop.tasks.Task.residuals>` at
tick ``t`` (a terminal term at the window's end): the cost the plan minimizes, in its own
units and weights. Windows near the goal weigh most (``w -> 1`` there, ``s / e`` far away):
where a plan decides success. The fit is accepted when ``E(fit) < (1 - margin) E(nominal)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mujoco
import numpy as np

from twinloop.calib.windows import (
    Trajectory,
    as_trajectories,
    make_windows,
    twin_substeps,
    window_controls,
)
from twinloop.errors import number
from twinloop.tasks.base import Task, Traj


@dataclass(frozen=True)
class AcceptanceConfig:
    """Knobs of the control check.

    Attributes:
        horizon: window length (s): the planning horizon a refiner reads (``twinloop run``'s
            default 0.5 s).
        stride: ticks between window starts.
        goal_quantile: quantile of the windows' start errors that sets the near-goal scale
            ``s`` (smaller: the check looks closer to the goal).
        margin: the fit must predict at least this fraction better than the nominal twin.
        min_windows: fewer held-out windows than this: no verdict (``accepted=None``).
    """

    horizon: float = 0.5
    stride: int = 1
    goal_quantile: float = 0.25
    margin: float = 0.0
    min_windows: int = 5

    def __post_init__(self):
        object.__setattr__(self, "horizon", number(self.horizon, "acceptance horizon (s)", low=0, low_open=True))
        object.__setattr__(self, "stride", number(self.stride, "acceptance stride", low=1, integer=True))
        object.__setattr__(self, "goal_quantile", number(self.goal_quantile, "goal_quantile", low=0, high=1,
                                                         low_open=True))
        object.__setattr__(self, "margin", number(self.margin, "acceptance margin", low=0, high=1, high_open=True))
        object.__setattr__(self, "min_windows", number(self.min_windows, "min_windows", low=1, integer=True))


@dataclass(frozen=True)
class Acceptance:
    """The control check's verdict (see the module docstring).

    Attributes:
        accepted: the fit predicts the plan's cost terms better than the nominal twin;
            ``None``: not checked (too few held-out windows).
        fit_error, nominal_error: ``E(fit)``, ``E(nominal)``.
        windows: held-out windows compared; horizon_ticks: their length.
        reason: one sentence for the console and the report.
    """

    accepted: bool | None
    fit_error: float
    nominal_error: float
    windows: int
    horizon_ticks: int
    reason: str

    def to_dict(self) -> dict:
        finite = {k: (v if np.isfinite(v) else None) for k, v in (("fit_error", self.fit_error),
                                                                  ("nominal_error", self.nominal_error))}
        return {"accepted": self.accepted, **finite, "windows": self.windows, "horizon_ticks": self.horizon_ticks,
                "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict) -> Acceptance:
        nan = float("nan")
        return cls(d["accepted"], nan if d["fit_error"] is None else float(d["fit_error"]),
                   nan if d["nominal_error"] is None else float(d["nominal_error"]), int(d["windows"]),
                   int(d["horizon_ticks"]), str(d["reason"]))


def _sensordata(model: mujoco.MjModel, states: np.ndarray) -> np.ndarray:
    """``(..., nsensordata)`` sensors at recorded ``(..., nstate)`` states."""
    d = mujoco.MjData(model)
    flat = states.reshape(-1, states.shape[-1])
    out = np.zeros((len(flat), model.nsensordata))
    for k, s in enumerate(flat):
        d.qpos[:], d.qvel[:] = s[: model.nq], s[model.nq : model.nq + model.nv]
        mujoco.mj_forward(model, d)
        out[k] = d.sensordata
    return out.reshape(*states.shape[:-1], model.nsensordata)


def _traj(model: mujoco.MjModel, states: np.ndarray, sensors: np.ndarray, actions: np.ndarray) -> Traj:
    """A residual's view of ``(..., L+1, nstate)`` states at tick boundaries."""
    return Traj(states[..., : model.nq], states[..., model.nq : model.nq + model.nv], sensors, actions)


def term_errors(task: Task, predicted: Traj, recorded: Traj) -> np.ndarray:
    """``(...)`` per window: ``sum_terms weight * mean_t |r_t(predicted) - r_t(recorded)|^2``."""
    total = 0.0
    for r in task.residuals():
        d = np.asarray(r.fn(predicted), float) - np.asarray(r.fn(recorded), float)
        sq = (d**2).sum(axis=-1)
        total = total + r.weight * (sq if r.terminal else sq.mean(axis=-1))
    return np.asarray(total, float)


def predict_windows(task: Task, twin, windows, params: np.ndarray | None, delay: float) -> tuple[Traj, np.ndarray]:
    """The twin's ``(P, B, L+1)`` tick-boundary trajectories of ``windows`` under ``params``
    (actions ``delay`` of the twin's physics steps late) and ``(P, B)`` ok flags."""
    sub = twin_substeps(task, twin)
    r = twin.rollout_many(windows.starts, window_controls(windows, sub, delay), params, sensors=True)
    m = twin.model
    ticks = slice(0, None, sub)
    states = np.concatenate([r.qpos[:, :, ticks], r.qvel[:, :, ticks],
                             np.zeros((*r.qpos[:, :, ticks].shape[:3], m.na))], axis=-1)
    sensors = r.sensordata[:, :, ticks] if r.sensordata is not None and r.sensordata.size else \
        np.zeros((*states.shape[:3], m.nsensordata))
    acts = np.broadcast_to(windows.actions, (states.shape[0], *windows.actions.shape))
    return _traj(m, states, sensors, acts), r.ok


def horizon_errors(task: Task, episodes: Sequence, candidates: Sequence[tuple], config: AcceptanceConfig | None = None
                   ) -> tuple[np.ndarray | None, int, int]:
    """``E(x)`` of the module docstring for each candidate ``(twin, x, delay)`` (``x``: ``(n,)``
    of that twin's ``param_space`` or ``None`` for its own model; ``delay`` in its physics
    steps) on the same held-out windows with the same near-goal weights, so twins of different
    structure compare on one scale. Returns ``(errors (C,), windows, horizon ticks)``;
    ``errors`` is ``None`` when there are fewer than ``config.min_windows`` windows."""
    cfg = config or AcceptanceConfig()
    trajs: list[Trajectory] = as_trajectories(task, episodes) if len(episodes) else []
    L = max(1, int(round(cfg.horizon / task.control_period)))
    groups = [w for w in make_windows(trajs, L, cfg.stride) if w.length == L] if trajs else []
    n = sum(len(w) for w in groups)
    if n < cfg.min_windows:
        return None, n, L
    errs: list[list[np.ndarray]] = [[] for _ in candidates]
    start_err = []
    for w in groups:
        rec_states = np.concatenate([w.starts[:, None], w.targets], axis=1)
        recorded = _traj(task.model, rec_states, _sensordata(task.model, rec_states), w.actions)
        e0 = np.asarray(task.error(rec_states[:, 0, : task.model.nq]), float)
        start_err.append(e0.reshape(len(w), -1).mean(axis=1))
        for c, (twin, x, delay) in enumerate(candidates):
            pred, ok = predict_windows(task, twin, w, None if x is None else np.asarray(x, float)[None], delay)
            e = term_errors(task, pred, recorded)[0]
            errs[c].append(np.where(ok[0] & np.isfinite(e), e, np.inf))  # an unstable replay never wins
    e0 = np.concatenate(start_err)
    s = max(float(np.quantile(e0, cfg.goal_quantile)), 1e-12)
    weight = s / (s + np.maximum(e0, 0))
    return np.array([float(np.sum(weight * np.concatenate(e)) / weight.sum()) for e in errs]), n, L


def control_check(task: Task, episodes: Sequence, twin, fit: np.ndarray, nominal: np.ndarray,
                  fit_delay: float = 0.0, nominal_delay: float = 0.0,
                  config: AcceptanceConfig | None = None) -> Acceptance:
    """Judge ``fit`` against ``nominal`` (both ``(n,)`` of ``twin.param_space``) on held-out
    ``episodes``: the prediction error of the task's cost terms over the planning horizon,
    weighted near the goal (module docstring). Delays are in the twin's physics steps."""
    cfg = config or AcceptanceConfig()
    errors, n, L = horizon_errors(task, episodes, [(twin, fit, fit_delay), (twin, nominal, nominal_delay)], cfg)
    if errors is None:
        return Acceptance(None, float("nan"), float("nan"), n, L,
                          f"not checked: {n} held-out windows of {L} ticks (at least {cfg.min_windows} needed); "
                          "hold out episodes (holdout) to check the fit against the nominal twin")
    fit_e, nom_e = float(errors[0]), float(errors[1])
    accepted = bool(fit_e < (1 - cfg.margin) * nom_e)
    verdict = "accepted" if accepted else "REJECTED"
    reason = (f"{verdict}: over {L}-tick horizons on {n} held-out windows (weighted near the goal) the fit predicts "
              f"the task's cost terms with error {fit_e:.3g} against the nominal twin's {nom_e:.3g}")
    return Acceptance(accepted, fit_e, nom_e, n, L, reason)


def planning_verdict(post) -> tuple[bool, str]:
    """``(usable, why)``: whether a posterior may replace the nominal twin for planning: not
    when its control check rejected it, nor when no parameter is identifiable."""
    acc = getattr(post, "acceptance", None)
    if acc is not None and acc.accepted is False:
        return False, f"the control check rejected the fit ({acc.reason})"
    if len(post.identifiable) and not np.any(post.identifiable):
        return False, "every parameter of the fit is NOT IDENTIFIABLE from its data"
    if acc is None or acc.accepted is None:
        return True, "the fit was not checked against the nominal twin on held-out data" + (
            f" ({acc.reason})" if acc is not None else "")
    return True, acc.reason


def planning_delay(post, scene_timestep: float) -> float:
    """A posterior's fitted actuation delay (s): ``delay_steps`` of its twin's step (of
    ``scene_timestep`` for a posterior that does not say)."""
    return post.delay_steps * (getattr(post, "timestep", 0.0) or scene_timestep)


__all__ = ["Acceptance", "AcceptanceConfig", "control_check", "horizon_errors", "planning_delay", "planning_verdict", "predict_windows",
           "term_errors"]

