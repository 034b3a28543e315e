"""Pruned rollouts: roll every candidate to a point of the horizon, continue only the best.

The refiner's ``prune`` option (:class:`~twinloop.control.RefinerConfig`): the candidates are
scored on the first stretch, the ``n_keep`` cheapest of them (and the first ``keep``, the
incumbent and the prior, always) roll on to the end; the others hold their state from the
prune point and cost ``inf``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from twinloop.rollouts import Rollouts


def pruned_rollout(twin, score: Callable[[Rollouts], np.ndarray], state: np.ndarray, ctrl: np.ndarray, params,
                   split: int, keep: int, n_keep: int) -> tuple[Rollouts, np.ndarray, int]:
    """Roll ``(K, T, nu)`` controls from ``state`` in ``twin`` under ``params``, pruned at step
    ``split``; returns ``(rollouts, (K,) costs by score, physics steps simulated)``."""
    K, T, _ = ctrl.shape
    head = twin.rollout(state, ctrl[:, :split], params)
    partial = score(head)
    kept = np.zeros(K, bool)
    kept[:keep] = True
    for i in np.argsort(partial, kind="stable"):
        if kept.sum() >= n_keep:
            break
        kept[i] = True
    idx = np.flatnonzero(kept & np.isfinite(partial) | (np.arange(K) < keep))
    starts = np.concatenate([head.qpos[0, idx, -1], head.qvel[0, idx, -1]], axis=1)
    tail = twin.rollout_many(starts, ctrl[idx, split:], params)

    def join(a, b):
        out = np.concatenate([a, np.repeat(a[:, :, -1:], T - split, axis=2)], axis=2)
        out[:, idx, split + 1:] = b[:, :, 1:]
        return out

    ok = head.ok.copy()
    ok[:, idx] &= tail.ok
    r = Rollouts(join(head.qpos, tail.qpos), join(head.qvel, tail.qvel),
                 join(head.sensordata, tail.sensordata), ctrl, ok, head.dt)
    c = score(r)
    dropped = np.ones(K, bool)
    dropped[idx] = False
    c[dropped] = np.inf
    return r, c, head.ok.size * split + tail.ok.size * (T - split)
