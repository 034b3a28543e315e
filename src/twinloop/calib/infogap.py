"""InfoGap: a controller cost term that steers data collection to where the twin is unsure.

The refiner rolls every candidate out under P parameter particles drawn from the calibration
posterior. Where those rollouts disagree, observing the world would tell the particles apart.
For a Gaussian observation ``y_t = x_t(theta) + noise`` (noise std ``sigma``) and a linearized
posterior, the information a candidate's observations carry about ``theta`` is::

    EIG_k = 1/2 sum_t log det(I + Cov_p[x_t^k] / sigma^2)

(``Cov_p`` over the particles, at observation times ``t``). The cost term is ``-beta * EIG_k``,
added to the task cost by the refiner (``Refiner(..., extra_costs=[infogap_cost(beta)])``):
``beta = 0`` is pure task control, larger ``beta`` trades task progress for information.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from twinloop.errors import TwinloopError
from twinloop.twin.base import Rollouts


def information_gain(rollouts: Rollouts, noise_std: float | Sequence[float] = 1e-3,
                     index: Sequence[int] | None = None, stride: int = 1) -> np.ndarray:
    """``(K,)`` expected information gain (nats) of each candidate about the parameters.

    Args:
        rollouts: ``qpos (P, K, T+1, nq)`` under ``P`` parameter particles.
        noise_std: observation noise std (per compared coordinate, or one for all).
        index: ``qpos`` coordinates observed (default: all).
        stride: physics steps between observation times (e.g. ``task.substeps``: once a tick).

    Candidates with an unstable rollout under any particle get ``nan`` (the refiner then adds
    nothing for them); a single particle gives 0.
    """
    if stride < 1:
        raise TwinloopError(f"stride must be >= 1 physics step, got {stride}")
    q = rollouts.qpos
    idx = np.arange(q.shape[-1]) if index is None else np.asarray(index, dtype=int)
    sigma = np.broadcast_to(np.asarray(noise_std, dtype=float), (len(idx),))
    if not np.all(sigma > 0):
        raise TwinloopError(f"noise_std must be > 0, got {noise_std}")
    y = q[:, :, stride::stride][..., idx]  # (P, K, T', d)
    P = y.shape[0]
    if P < 2:
        return np.zeros(q.shape[1])
    z = y / sigma
    dz = z - z.mean(axis=0, keepdims=True)
    cov = np.einsum("pktd,pkte->ktde", dz, dz) / (P - 1)  # (K, T', d, d)
    d = len(idx)
    _, logdet = np.linalg.slogdet(np.eye(d) + cov)
    eig = 0.5 * logdet.sum(axis=1)
    bad = ~rollouts.ok.all(axis=0) | ~np.isfinite(eig)
    return np.where(bad, np.nan, eig)


def infogap_cost(beta: float, noise_std: float | Sequence[float] = 1e-3, index: Sequence[int] | None = None,
                 stride: int = 1) -> Callable[[Rollouts], np.ndarray]:
    """An ``extra_costs`` term ``f(rollouts) -> (K,) = -beta * EIG`` (see the module docstring).

    Args:
        beta: weight of information against task cost (``>= 0``).
        noise_std, index, stride: as in :func:`information_gain`.
    """
    if not (np.isfinite(beta) and beta >= 0):
        raise TwinloopError(f"beta must be a finite number >= 0, got {beta}")
    if stride < 1:
        raise TwinloopError(f"stride must be >= 1 physics step, got {stride}")

    def cost(rollouts: Rollouts) -> np.ndarray:
        if beta == 0:
            return np.zeros(rollouts.qpos.shape[1])
        return -beta * information_gain(rollouts, noise_std, index, stride)

    cost.__name__ = f"infogap(beta={beta:g})"
    return cost


def observed_qpos(task, pos_noise: float = 1e-3, angle_noise: float = 1e-2) -> tuple[np.ndarray, np.ndarray]:
    """The ``qpos`` coordinates a task's observations measure, and their noise std.

    A coordinate is observed when ``task.state_from_obs`` moves it as the observation moves
    (an unmeasured height stays put); hinge coordinates get ``angle_noise`` (rad), the rest
    ``pos_noise`` (m). Disagreement on an unmeasured coordinate tells the world nothing, and
    an angle measured to a centiradian must not count like a position measured to a millimetre.

    Returns:
        ``(index, noise_std)`` for :func:`information_gain` / :func:`infogap_cost`.
    """
    import mujoco

    if not (pos_noise > 0 and angle_noise > 0):
        raise TwinloopError(f"noise stds must be > 0, got pos_noise={pos_noise}, angle_noise={angle_noise}")
    m = task.model
    rng = np.random.default_rng(0)
    n_obs = len(task.obs_names)
    a, b = (task.state_from_obs(rng.uniform(-0.1, 0.1, n_obs)) for _ in range(2))
    index = np.flatnonzero(np.abs(a[: m.nq] - b[: m.nq]) > 0)
    hinge = np.zeros(m.nq, bool)
    for j in range(m.njnt):
        if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE:
            hinge[m.jnt_qposadr[j]] = True
    return index, np.where(hinge[index], angle_noise, pos_noise)


__all__ = ["information_gain", "infogap_cost", "observed_qpos"]
