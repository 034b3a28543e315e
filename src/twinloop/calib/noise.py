"""How noisy a world's observations are, estimated from recorded transitions and a calibrated twin.

A twin that should predict a noisy world has to be noisy too (a scripted policy reacts to every
jitter), but calibration fits physics, not the sensors. One control tick replayed from each
recorded state gives the residual ``r = s'_recorded - f(s_recorded, a)``. With observation
noise ``n`` (std ``sigma`` per state component) on both ends and a right model,
``r = n' - J n`` with ``J = df/ds``, so per component::

    E[r_i^2] = sigma_i^2 + sum_k J_ik^2 sigma_k^2

The left side is measured robustly (median absolute deviation: contact mismatch leaves heavy
tails), ``J`` by one-tick finite differences of the twin (median of ``J^2`` over transitions),
and the system is solved for ``sigma^2 >= 0`` by non-negative least squares. A state component
read from one observation entry maps back to it through ``d state / d obs`` the same way.
Model error that survives calibration inflates the estimate; it never shrinks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import mujoco
import numpy as np
from scipy.optimize import nnls

from twinloop.calib.windows import (
    StateError,
    Trajectory,
    as_trajectories,
    make_windows,
    noise_units,
    state_units,
    window_controls,
)
from twinloop.errors import TwinloopError
from twinloop.params import ParamSpace
from twinloop.tasks.base import Task

CHI2_MEDIAN = 0.45494  # median of a chi-square with one degree of freedom
ROBUST_ITERATIONS = 30


def _robust_var(x: np.ndarray) -> np.ndarray:
    """``(B, n)`` -> ``(n,)`` variance from the median absolute deviation (normal-consistent)."""
    mad = np.median(np.abs(x - np.median(x, axis=0)), axis=0)
    return (1.4826 * mad) ** 2


def _wrap(d: np.ndarray, hinge: np.ndarray) -> np.ndarray:
    return np.where(hinge, np.arctan2(np.sin(d), np.cos(d)), d)


def estimate_obs_noise(task: Task, episodes: Sequence, params=None, space: ParamSpace | None = None,
                       delay_steps: int = 0, twin=None, max_transitions: int = 400, seed: int = 0) -> np.ndarray:
    """``(len(task.obs_names),)`` observation noise std estimated from recorded ``episodes``
    (arguments as :func:`estimate_state_noise`)."""
    idx, state_var = _state_var(task, episodes, params, space, delay_steps, twin, max_transitions, seed)
    return _obs_std(task, idx, state_var)


def estimate_state_noise(task: Task, episodes: Sequence, params=None, space: ParamSpace | None = None,
                         delay_steps: int = 0, twin=None, max_transitions: int = 400, seed: int = 0) -> np.ndarray:
    """``(nstate,)`` noise std of each recorded twin-state component (state units), estimated
    from recorded ``episodes``; 0 for the components that never vary in them (not measured).

    Args:
        task: the task the episodes were recorded on.
        episodes: recorded episodes or :class:`~twinloop.calib.windows.Trajectory` objects.
        params: ``(n,)`` calibrated values of ``space`` (default: nominal).
        space: parameter space (default: ``task.param_space()``).
        delay_steps: actuation delay of the replay (physics steps).
        twin: a twin of ``task.model`` over ``space`` (default: a new CPU MuJoCo twin).
        max_transitions: transitions used at most (a seeded subsample).
        seed: seed of the subsample.
    """
    idx, state_var = _state_var(task, episodes, params, space, delay_steps, twin, max_transitions, seed)
    std = np.zeros(task.nstate)
    std[idx] = np.sqrt(state_var)
    return std


def recorded_noise(task: Task, train: Sequence[Trajectory], x0: np.ndarray, twin, cfg) -> np.ndarray | None:
    """``(nstate,)`` std of the noise on recorded states (state units) a calibration with
    :class:`~twinloop.calib.fit.CalibConfig` ``cfg`` assumes: ``cfg.start_noise`` (with
    ``cfg.weigh_by_noise``, a free body's too, see :func:`~twinloop.calib.windows.noise_units`),
    or (``cfg.noise_from_data``) estimated from ``train`` at ``x0``; ``None``: one error unit."""
    if cfg.start_noise is not None:
        if cfg.weigh_by_noise:
            return noise_units(task.model, *cfg.start_noise)
        return state_units(task.model, *cfg.start_noise, cfg.start_noise[2])[0]
    if not cfg.noise_from_data:
        return None
    try:
        return estimate_state_noise(task, train, x0, twin.param_space, cfg.delay_steps or 0, twin, seed=cfg.seed)
    except TwinloopError:  # too few transitions to tell the noise from the motion
        return None


def _state_var(task: Task, episodes: Sequence, params, space: ParamSpace | None, delay_steps: int, twin,
               max_transitions: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(k,)`` compared state components and ``(k,)`` their noise variances."""
    space = space if space is not None else task.param_space()
    if twin is None:
        from twinloop.twin import make_twin

        twin = make_twin("mujoco", task.model, space)
    p = None if params is None else space.check(np.atleast_2d(np.asarray(params, dtype=float)), "params")
    trajs: list[Trajectory] = as_trajectories(task, episodes)
    windows = make_windows(trajs, 1, 1)
    w = windows[0]
    if len(w) < 8:
        raise TwinloopError(f"noise estimation needs at least 8 transitions, got {len(w)}")
    keep = np.sort(np.random.default_rng(seed).permutation(len(w))[:max_transitions])
    starts, targets = w.starts[keep], w.targets[keep, 0]
    err = StateError.for_task(task, trajs)
    idx = np.flatnonzero(err.mask)
    substeps = task.substeps
    sub = replace(w, starts=starts, actions=w.actions[keep], targets=w.targets[keep], episode=w.episode[keep],
                  before=None if w.before is None else w.before[keep])
    ctrl = window_controls(sub, substeps, delay_steps)
    # one batch: the recorded starts, then each observed component nudged by about a noise's size
    eps = 0.5 * err.scale[idx] * np.where(err.hinge[idx], 0.1, 0.5)
    B = len(starts)
    batch = np.concatenate([starts] + [starts + e * np.eye(task.nstate)[k] for k, e in zip(idx, eps, strict=True)])
    r = twin.rollout_many(batch, np.tile(ctrl, (len(idx) + 1, 1, 1)), p, sensors=False)
    end = np.concatenate([r.qpos[0, :, -1], r.qvel[0, :, -1], np.zeros((len(batch), task.model.na))], axis=1)
    ok = r.ok[0].reshape(len(idx) + 1, B).all(axis=0)
    end = end.reshape(len(idx) + 1, B, task.nstate)[:, ok]
    resid = _wrap(targets[ok] - end[0], err.hinge)[:, idx]
    J = (end[1:, :, idx] - end[0][None, :, idx]) / eps[:, None, None]  # (k, B, i)
    J2 = np.transpose(J**2, (1, 2, 0))  # (B, i, k)
    state_var, _ = nnls(np.eye(len(idx)) + np.median(J2, axis=0), _robust_var(resid))
    # refine per transition: r_bi / sqrt(sigma_i^2 + sum_k J_bik^2 sigma_k^2) is standard normal,
    # so the median of its square is 0.455 (chi-square, 1 dof) in every component
    for _ in range(ROBUST_ITERATIONS):
        v = state_var[None] + J2 @ state_var
        state_var = state_var * np.median(resid**2 / np.maximum(v, 1e-300), axis=0) / CHI2_MEDIAN
    return idx, state_var


def _obs_std(task: Task, idx: np.ndarray, state_var: np.ndarray) -> np.ndarray:
    """State-component variances -> observation-entry std through ``d state / d obs``."""
    d = mujoco.MjData(task.model)
    mujoco.mj_forward(task.model, d)
    obs0 = task.obs_from_data(task.model, d)
    s0 = task.state_from_obs(obs0)
    h = 1e-6
    M = np.stack([(task.state_from_obs(obs0 + h * np.eye(len(obs0))[j]) - s0) / h for j in range(len(obs0))], axis=1)
    obs_var, _ = nnls(M[idx] ** 2, state_var)
    return np.sqrt(obs_var)


__all__ = ["estimate_obs_noise", "estimate_state_noise", "recorded_noise"]
