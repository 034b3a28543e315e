"""What a distilled policy learns from: per-frame features and contexts of observation
histories, chunk labels and the anchors they are predicted relative to, the training arrays of
demonstrations, and the local linear fit of a memory policy."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from twinloop.data.episodes import check_recorded_on
from twinloop.errors import TwinloopError, as_array
from twinloop.policies.distilled.config import PolicyConfig
from twinloop.tasks.base import Task


def _angle_columns(task: Task) -> list[int]:
    # a wrapped angle jumps by 2 pi at +-pi; its sine and cosine do not
    return [i for i, n in enumerate(task.obs_names) if n.endswith("yaw") or n.endswith("theta")]


def features(task: Task, obs: np.ndarray) -> np.ndarray:
    """``(..., n_obs)`` observations -> ``(..., F)`` per-frame inputs (obs, sin/cos of angles)."""
    obs = np.asarray(obs, dtype=float)
    ang = obs[..., _angle_columns(task)]
    return np.concatenate([obs, np.sin(ang), np.cos(ang)], axis=-1)


def context(task: Task, history: np.ndarray, frame: bool = False) -> np.ndarray:
    """``(..., n, n_obs)`` observation histories (oldest first) -> ``(..., n*F + G)`` policy
    context: each frame's features, then the goal; with ``frame`` all of them seen from
    ``task.policy_frame`` of the newest observation (:meth:`~twinloop.tasks.base.Task.obs_in_frame`,
    :meth:`~twinloop.tasks.base.Task.goal_in_frame`)."""
    history = np.asarray(history, dtype=float)
    if frame:
        pose = task.policy_frame(history[..., -1, :])
        history, g = task.obs_in_frame(pose[..., None, :], history), task.goal_in_frame(pose)
    else:
        g = np.broadcast_to(task.goal_features(), (*history.shape[:-2], len(task.goal_features())))
    f = features(task, history)
    f = f.reshape(*f.shape[:-2], -1)
    return np.concatenate([f, g], axis=-1)


def histories(obs: np.ndarray, n: int) -> np.ndarray:
    """``(T, n_obs)`` -> ``(T, n, n_obs)``: at each tick the last ``n`` observations, the
    first one repeated before the episode's start."""
    idx = np.maximum(np.arange(len(obs))[:, None] + np.arange(1 - n, 1)[None, :], 0)
    return np.asarray(obs, dtype=float)[idx]


def chunk_targets(actions: np.ndarray, horizon: int) -> np.ndarray:
    """``(T, nu)`` actions -> ``(T, H, nu)``: at each tick the next H actions, the last one
    held past the episode's end (as the world would hold it)."""
    a = np.asarray(actions, dtype=float)
    pad = np.concatenate([a, np.repeat(a[-1:], horizon - 1, axis=0)])
    idx = np.arange(len(a))[:, None] + np.arange(horizon)[None, :]
    return pad[idx]


def smoothed(actions: np.ndarray, window: int) -> np.ndarray:
    """``(T, nu)`` -> ``(T, nu)``: the centred moving average over ``window`` ticks (the
    first and last actions held beyond the ends); ``window`` 1 returns them unchanged."""
    a = np.asarray(actions, dtype=float)
    before, after = (window - 1) // 2, window // 2
    pad = np.concatenate([np.repeat(a[:1], before, axis=0), a, np.repeat(a[-1:], after, axis=0)])
    c = np.concatenate([np.zeros((1, a.shape[1])), np.cumsum(pad, axis=0)])
    return (c[window:] - c[:-window]) / window


def fit_chunks(plans: np.ndarray, horizon: int) -> np.ndarray:
    """``(T, H', nu)`` plans -> ``(T, H, nu)``: cut to H ticks, or the last action held."""
    p = np.asarray(plans, dtype=float)
    if p.shape[1] >= horizon:
        return p[:, :horizon]
    return np.concatenate([p, np.repeat(p[:, -1:], horizon - p.shape[1], axis=1)], axis=1)


def base_proposer(task: Task, cfg: PolicyConfig):
    """The proposer a residual policy (:attr:`PolicyConfig.residual`) adds to: a fresh
    ``task.default_proposer()``; None for a policy that is not residual."""
    if not cfg.residual:
        return None
    base = task.default_proposer()
    if base is None:
        raise TwinloopError(f"residual=True needs a task with a scripted proposer; task {task.name!r} has none")
    return base


def anchors(task: Task, obs: np.ndarray, cfg: PolicyConfig, horizon: int, base=None) -> np.ndarray:
    """``(T, H, nu)`` what the chunks at observations ``(T, n_obs)`` are predicted relative to:
    the chunk of ``base`` (:func:`base_proposer`, asked once per observation in order: an
    episode replayed) for a residual policy, else ``task.hold_action`` of each state held over
    the chunk (:attr:`PolicyConfig.relative`), else zeros."""
    obs = np.atleast_2d(obs)
    if base is not None:
        return np.stack([fit_chunks(np.asarray(base.propose(o, task.state_from_obs(o)), dtype=float)[None], horizon)[0]
                         for o in obs])
    if not cfg.relative:
        return np.zeros((len(obs), horizon, task.nu))
    hold = np.stack([np.asarray(task.hold_action(task.state_from_obs(o)), dtype=float) for o in obs])
    return np.repeat(hold[:, None], horizon, axis=1)


def policy_targets(task: Task, obs: np.ndarray, chunks: np.ndarray, anchor: np.ndarray, cfg: PolicyConfig) -> np.ndarray:
    """World chunks ``(T, H, nu)`` taken at observations ``(T, n_obs)`` -> what the policy
    predicts: the chunk less its ``anchor`` (:func:`anchors`), in the policy frame
    (:attr:`PolicyConfig.frame`). The inverse is :func:`world_chunks`."""
    obs = np.atleast_2d(obs)
    if not cfg.frame:
        return np.asarray(chunks, dtype=float) - anchor
    pose = task.policy_frame(obs)[:, None]
    return task.actions_in_frame(pose, chunks) - task.actions_in_frame(pose, anchor)


def world_chunks(task: Task, obs: np.ndarray, targets: np.ndarray, anchor: np.ndarray, cfg: PolicyConfig) -> np.ndarray:
    """The inverse of :func:`policy_targets`: ``(T, H, nu)`` predictions at ``(T, n_obs)``
    observations -> world chunks (not clipped)."""
    obs = np.atleast_2d(obs)
    if not cfg.frame:
        return np.asarray(targets, dtype=float) + anchor
    pose = task.policy_frame(obs)[:, None]
    return task.actions_in_frame(pose, targets + task.actions_in_frame(pose, anchor), inverse=True)


def training_arrays(task: Task, demos: Sequence, cfg: PolicyConfig, horizon: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(N, C)`` contexts and ``(N, H*nu)`` relative chunks of ``demos``, duplicates dropped
    (a state and label seen twice, e.g. a pusher at rest, would weigh twice); returns them
    and the number of duplicates."""
    xs, ys = [], []
    n_obs = len(task.obs_names)
    check_recorded_on(task, demos, "demonstrations")
    for i, d in enumerate(demos):
        obs = as_array(getattr(d, "obs", None), f"demo {i} obs", (None, n_obs))
        act = as_array(getattr(d, "actions", None), f"demo {i} actions", (len(obs), task.nu))
        plans = getattr(d, "plans", None)
        if plans is not None:
            plans = as_array(plans, f"demo {i} plans", (len(obs), None, task.nu))
        if plans is not None and cfg.labels == "plan":
            chunks = fit_chunks(plans, horizon)
        else:
            chunks = chunk_targets(smoothed(act if plans is None else plans[:, 0], cfg.smooth), horizon)
        xs.append(context(task, histories(obs, cfg.n_obs_steps), cfg.frame))
        base = base_proposer(task, cfg)
        if base is not None:
            base.reset(None)
        ys.append(policy_targets(task, obs, chunks, anchors(task, obs, cfg, horizon, base), cfg).reshape(len(obs), -1))
    if not xs:
        raise TwinloopError("no demonstrations to train on: need at least one episode")
    x, y = np.concatenate(xs), np.concatenate(ys)
    # rounded to 1e-9 so that float noise does not hide a repeat
    _, keep = np.unique(np.round(np.concatenate([x, y], axis=1), 9), axis=0, return_index=True)
    keep.sort()
    return x[keep], y[keep], len(x) - len(keep)


def local_linear(dx: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    """The value at the query of a linear fit to ``(k, C)`` context offsets ``dx`` (sample
    minus query) and their ``(k, D)`` targets ``y``: ``(D,)``.

    Ridge regression with an unpenalized intercept (``ridge`` on the slopes), solved on the
    centred samples: ``W = argmin |(dx - mean) W - (y - mean)|^2 + ridge |W|^2`` and the
    answer ``mean(y) - mean(dx) W``. One sample, or slopes that ``ridge`` forces to zero, give
    the mean of ``y``; with ``ridge`` 0 and too few samples to fix every slope, the least-norm
    slopes (no direction the samples do not span is extrapolated along)."""
    dx, y = np.asarray(dx, dtype=float), np.asarray(y, dtype=float)
    dm, ym = dx.mean(axis=0), y.mean(axis=0)
    a = np.concatenate([dx - dm, math.sqrt(ridge) * np.eye(dx.shape[1])])
    b = np.concatenate([y - ym, np.zeros((dx.shape[1], y.shape[1]))])
    w = np.linalg.lstsq(a, b, rcond=None)[0]
    return ym - dm @ w


def split_episodes(demos: Sequence, fraction: float, seed: int) -> tuple[list, list]:
    """``demos`` -> (training, held-out) episodes: ``round(fraction * n)`` held out (at least
    one when ``fraction > 0`` and ``n >= 2``), chosen by ``seed``. Whole episodes, so that the
    held-out loss measures states the policy has not seen the neighbours of."""
    demos = list(demos)
    n_val = max(1, round(fraction * len(demos))) if fraction > 0 and len(demos) >= 2 else 0
    held = set(np.random.default_rng([seed, 29]).permutation(len(demos))[:n_val].tolist())
    return [d for i, d in enumerate(demos) if i not in held], [d for i, d in enumerate(demos) if i in held]


def train_steps(cfg: PolicyConfig, samples: int) -> int:
    """Gradient steps of training on ``samples`` samples: ``cfg.steps``, or ``cfg.epochs``
    passes over them (at most ``cfg.steps``)."""
    if cfg.epochs is None:
        return cfg.steps
    return int(min(cfg.steps, max(1, math.ceil(cfg.epochs * samples / cfg.batch_size))))


def _std(x: np.ndarray) -> np.ndarray:
    s = x.std(axis=0)
    # constant inputs (e.g. a fixed goal) would divide by zero; leave them unscaled
    return np.where(s > 1e-8, s, 1.0)
