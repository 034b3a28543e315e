"""The sim-real gap: a divergence between world transitions and twin-predicted transitions.

For every recorded transition ``(s_t, a_t, s_t+1)`` the twin predicts ``s^_t+1`` from the
recorded ``s_t`` and ``a_t`` (one control tick, batched in one ``rollout_many`` call). The two
samples compared are the one-step changes of the observed state components::

    X_i = s_t+1 - s_t        (world)        Y_i = s^_t+1 - s_t        (twin)

standardized by the world sample's per-component std. Three divergences ``D(X, Y)``:

- ``kl``: Gaussian KL ``KL(N(mu_x, S_x) || N(mu_y, S_y))`` (closed form, small ridge);
- ``mmd``: squared maximum mean discrepancy, RBF kernel, bandwidth by the median heuristic on
  the world sample, unbiased estimator (``0`` in expectation when the samples agree, so it
  can dip slightly below 0);
- ``swd``: sliced 2-Wasserstein distance over seeded random projections.

Each comes with a bias-corrected percentile bootstrap interval over transitions (resampled
in pairs). When
the twin is the world and observations are exact, ``X == Y`` and every metric is exactly 0;
observation noise leaves a small floor (the world's change carries the noise of two
observations, the twin's only the propagated noise of one), far below the spread between two
independent samples of the world itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from twinloop.calib.windows import (
    StateError,
    as_trajectories,
    make_windows,
    twin_substeps,
    window_rollout_states,
)
from twinloop.errors import TwinloopError, choose, number
from twinloop.tasks.base import Task
from twinloop.twin.base import check_twin_scene

METRICS = ("kl", "mmd", "swd")


@dataclass(frozen=True)
class GapConfig:
    """Knobs of the gap metrics.

    Attributes:
        metric: ``kl`` | ``mmd`` | ``swd``.
        n_boot: bootstrap resamples.
        level: interval coverage.
        max_samples: transitions used at most (a seeded subsample keeps MMD's N^2 cost bounded).
        n_projections: random directions of the sliced Wasserstein distance.
        ridge: added to covariances in standardized units (Gaussian KL).
        use_velocity: compare velocity changes too.
        seed: seed of subsampling, projections and the bootstrap.
    """

    metric: str = "mmd"
    n_boot: int = 200
    level: float = 0.95
    max_samples: int = 1000
    n_projections: int = 64
    ridge: float = 1e-2
    use_velocity: bool = True
    seed: int = 0

    def __post_init__(self):
        choose("gap metric", self.metric, METRICS)
        for k, low in (("n_boot", 1), ("max_samples", 4), ("n_projections", 1), ("seed", 0)):
            object.__setattr__(self, k, number(getattr(self, k), k, low=low, integer=True))
        object.__setattr__(self, "level", number(self.level, "level", low=0, high=1, low_open=True, high_open=True))
        # the ridge keeps the Gaussian KL's covariances invertible (0: only where the data do)
        object.__setattr__(self, "ridge", number(self.ridge, "ridge", low=0))
        if not isinstance(self.use_velocity, (bool, np.bool_)):
            raise TwinloopError(f"use_velocity must be True or False, got {self.use_velocity!r}")


@dataclass(frozen=True)
class Gap:
    """A divergence with its bootstrap interval.

    Attributes:
        metric: ``kl`` | ``mmd`` | ``swd``.
        value: the divergence on all (subsampled) transitions.
        ci: ``(lo, hi)`` bootstrap interval.
        n: transitions compared.
    """

    metric: str
    value: float
    ci: tuple[float, float]
    n: int

    def to_dict(self) -> dict:
        return {"metric": self.metric, "value": self.value, "ci": list(self.ci), "n": self.n}


# -- divergences on samples (rows) --------------------------------------------------------------


def gaussian_kl(X: np.ndarray, Y: np.ndarray, ridge: float = 1e-2) -> float:
    """``KL(N(mean X, cov X) || N(mean Y, cov Y))`` of ``(N, d)`` samples (nats)."""
    d = X.shape[1]
    mx, my = X.mean(0), Y.mean(0)
    Sx = np.atleast_2d(np.cov(X, rowvar=False)) + ridge * np.eye(d)
    Sy = np.atleast_2d(np.cov(Y, rowvar=False)) + ridge * np.eye(d)
    sign, logdet_x = np.linalg.slogdet(Sx)
    try:
        Ly = np.linalg.cholesky(Sy)
    except np.linalg.LinAlgError:
        sign = 0.0
    if sign <= 0:
        raise TwinloopError(f"a transition covariance is singular at ridge={ridge:g} (a component that does not "
                            "vary); use ridge > 0")
    a = np.linalg.solve(Ly, Sx)
    tr = np.trace(np.linalg.solve(Ly.T, a))
    dm = np.linalg.solve(Ly, my - mx)
    logdet = 2 * np.log(np.diag(Ly)).sum() - logdet_x
    return float(0.5 * (tr + dm @ dm - d + logdet))


def median_bandwidth(X: np.ndarray, max_points: int = 500) -> float:
    """Median pairwise distance of (up to ``max_points`` of) the rows of ``X``."""
    Z = X[:max_points]
    d = np.sqrt(np.maximum(_sqdist(Z, Z), 0.0))
    iu = np.triu_indices(len(Z), 1)
    med = float(np.median(d[iu])) if len(iu[0]) else 1.0
    return med if med > 0 else 1.0


def _sqdist(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return (A**2).sum(1)[:, None] + (B**2).sum(1)[None] - 2 * A @ B.T


def _mmd_from_kernels(Kxx, Kyy, Kxy, idx=None) -> float:
    if idx is not None:
        Kxx, Kyy, Kxy = Kxx[np.ix_(idx, idx)], Kyy[np.ix_(idx, idx)], Kxy[np.ix_(idx, idx)]
    n = len(Kxx)
    off = ~np.eye(n, dtype=bool)
    return float(Kxx[off].mean() + Kyy[off].mean() - 2 * Kxy[off].mean())


def mmd2(X: np.ndarray, Y: np.ndarray, bandwidth: float | None = None) -> float:
    """Unbiased squared MMD of ``(N, d)`` samples with an RBF kernel ``exp(-|x-y|^2 / 2 bw^2)``."""
    bw = median_bandwidth(X) if bandwidth is None else bandwidth
    g = 1.0 / (2 * bw**2)
    return _mmd_from_kernels(np.exp(-g * _sqdist(X, X)), np.exp(-g * _sqdist(Y, Y)), np.exp(-g * _sqdist(X, Y)))


def projections(d: int, n: int, seed: int) -> np.ndarray:
    """``(n, d)`` unit directions, uniform on the sphere."""
    th = np.random.default_rng(seed).standard_normal((n, d))
    return th / np.linalg.norm(th, axis=1, keepdims=True)


def sliced_wasserstein(X: np.ndarray, Y: np.ndarray, dirs: np.ndarray) -> float:
    """Sliced 2-Wasserstein distance of equal-size samples along ``dirs`` ``(L, d)``."""
    px = np.sort(X @ dirs.T, axis=0)
    py = np.sort(Y @ dirs.T, axis=0)
    return float(np.sqrt(np.mean((px - py) ** 2)))


def divergence(X: np.ndarray, Y: np.ndarray, config: GapConfig | None = None) -> Gap:
    """The configured divergence of paired samples ``X``, ``Y`` ``(N, d)`` with its interval.

    ``X`` (the world) sets the standardization and the kernel bandwidth, so that values for
    different twins on the same world data are comparable.
    """
    cfg = config or GapConfig()
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    if X.ndim != 2 or X.shape != Y.shape:
        raise TwinloopError(f"world and twin samples must have the same shape (N, d), got {X.shape} and {Y.shape}")
    if len(X) < 4:
        raise TwinloopError(f"need at least 4 transitions to measure a gap, got {len(X)}")
    if not (np.isfinite(X).all() and np.isfinite(Y).all()):
        raise TwinloopError("world or twin transitions contain NaN or inf")
    rng = np.random.default_rng(cfg.seed)
    if len(X) > cfg.max_samples:
        keep = np.sort(rng.choice(len(X), cfg.max_samples, replace=False))
        X, Y = X[keep], Y[keep]
    mu, sd = X.mean(0), X.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    X, Y = (X - mu) / sd, (Y - mu) / sd
    n = len(X)
    boot_idx = rng.integers(0, n, size=(cfg.n_boot, n))
    if cfg.metric == "kl":
        value = gaussian_kl(X, Y, cfg.ridge)
        boot = [gaussian_kl(X[i], Y[i], cfg.ridge) for i in boot_idx]
    elif cfg.metric == "mmd":
        g = 1.0 / (2 * median_bandwidth(X) ** 2)
        Kxx, Kyy, Kxy = (np.exp(-g * _sqdist(A, B)) for A, B in ((X, X), (Y, Y), (X, Y)))
        value = _mmd_from_kernels(Kxx, Kyy, Kxy)
        boot = [_mmd_from_kernels(Kxx, Kyy, Kxy, i) for i in boot_idx]
    else:
        dirs = projections(X.shape[1], cfg.n_projections, cfg.seed)
        value = sliced_wasserstein(X, Y, dirs)
        boot = [sliced_wasserstein(X[i], Y[i], dirs) for i in boot_idx]
    # a divergence computed on a resample with repeated pairs is biased upward; shift the
    # percentile interval by the bootstrap's estimate of that bias (it then always holds value)
    a = (1 - cfg.level) / 2
    q_lo, q_hi = np.quantile(boot, [a, 1 - a])
    bias = float(np.mean(boot)) - value
    lo, hi = q_lo - bias, q_hi - bias
    if cfg.metric != "mmd":  # KL and distances are non-negative; unbiased MMD^2 need not be
        lo, hi = max(lo, 0.0), max(hi, 0.0)
    return Gap(cfg.metric, float(value), (float(lo), float(hi)), n)


# -- transitions from episodes -------------------------------------------------------------------


def transitions(task: Task, episodes: Sequence, params=None, *, twin=None, space=None,
                use_velocity: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """World and twin one-step changes of the observed state components.

    Args:
        task: the task the episodes were recorded on.
        episodes: recorded episodes (see :func:`~twinloop.calib.windows.as_trajectories`).
        params: ``None`` (the twin's nominal model) or ``(n,)`` values of ``space``.
        twin: a twin with ``rollout_many`` (default: a CPU MuJoCo twin over ``space``).
        space: the parameter space ``params`` refers to (default ``task.param_space()``).

    Returns:
        ``X, Y`` of shape ``(N, k)``: recorded and predicted changes over one tick, in the
        error units of :class:`~twinloop.calib.windows.StateError` (m, rad, m/s), unstable
        predictions dropped from both.
    """
    trajs = as_trajectories(task, episodes)
    space = space if space is not None else task.param_space()
    if twin is None:
        from twinloop.twin import make_twin

        twin = make_twin("mujoco", task.model, space)
    check_twin_scene(twin, task.model, task.name)
    err = StateError.for_task(task, trajs, use_velocity=use_velocity)
    X, Y = [], []
    p = None if params is None else np.atleast_2d(space.check(np.asarray(params, dtype=float)))
    for w in make_windows(trajs, 1):
        pred, ok = window_rollout_states(twin, w, twin_substeps(task, twin), p)
        start = w.starts[:, None]
        X.append(err(w.targets, start)[ok[0], 0])
        Y.append(err(pred[0], start)[ok[0], 0])
    return np.concatenate(X), np.concatenate(Y)


def gap(task: Task, episodes: Sequence, params=None, config: GapConfig | None = None, *, metric: str | None = None,
        twin=None, space=None) -> Gap:
    """The sim-real gap of the twin at ``params`` on recorded ``episodes``; see the module."""
    cfg = config or GapConfig()
    if metric is not None:
        cfg = GapConfig(**{**cfg.__dict__, "metric": metric})
    X, Y = transitions(task, episodes, params, twin=twin, space=space, use_velocity=cfg.use_velocity)
    return divergence(X, Y, cfg)


def gaps(task: Task, episodes: Sequence, params=None, config: GapConfig | None = None, *, twin=None,
         space=None) -> dict[str, Gap]:
    """All three metrics on the same transitions (one twin rollout)."""
    cfg = config or GapConfig()
    X, Y = transitions(task, episodes, params, twin=twin, space=space, use_velocity=cfg.use_velocity)
    return {m: divergence(X, Y, GapConfig(**{**cfg.__dict__, "metric": m})) for m in METRICS}


__all__ = ["METRICS", "Gap", "GapConfig", "divergence", "gap", "gaps", "gaussian_kl", "median_bandwidth",
           "mmd2", "sliced_wasserstein", "transitions"]
