"""Confidence intervals for the numbers twinloop reports.

- :func:`wilson`: the Wilson score interval for a success rate ``k / n``. Unlike the normal
  ("Wald") interval it stays inside [0, 1] and does not collapse to zero width at 0/n or n/n,
  which is exactly where small robot experiments live::

      p = k/n,  c = (p + z^2/2n) / (1 + z^2/n),  h = z/(1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2)
      CI = [c - h, c + h]

- :func:`paired_difference`: the difference of two success rates measured on the same episodes
  (paired: each episode a success or not under both), with Newcombe's square-and-add interval
  (1998, method 10: the two Wilson intervals combined with the pairs' continuity-corrected phi
  correlation), which uses the pairing (only the discordant episodes move the difference).
- :func:`bootstrap_ci`: percentile bootstrap of any statistic of a sample (mean final error,
  gap, ...), seeded so the same data and seed give the same interval.
- How well a twin ranks policies (SIMPLER, Li et al. 2024, ``simpler_env/utils/metrics.py``):
  :func:`pearson` r and :func:`spearman` rho between per-policy success in the twin ``s`` and
  in the world ``r``, :func:`kendall` tau-b between two rankings, and the mean maximum rank
  violation::

      MMRV = 1/N sum_i max_j |r_i - r_j| * 1[(s_i > s_j) != (r_i > r_j)]

  (for each policy, the largest real success gap to a policy the twin orders the other way;
  0 = the twin never misorders a pair that matters).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral

import numpy as np
from scipy import stats as _scipy_stats

from twinloop.errors import TwinloopError, as_array


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval ``(lo, hi)`` for ``successes`` out of ``n`` trials.

    Args:
        successes: number of successes ``k``, ``0 <= k <= n``.
        n: number of trials, ``n >= 1``.
        z: normal quantile; 1.96 gives a 95% interval.
    """
    for name, v in (("successes", successes), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, Integral):
            raise TwinloopError(f"{name} must be an integer, got {v!r}")
    if n <= 0:
        raise TwinloopError(f"n (number of trials) must be >= 1, got {n}")
    if not 0 <= successes <= n:
        raise TwinloopError(f"successes must be in [0, n={n}], got {successes}")
    if not (math.isfinite(z) and z > 0):
        raise TwinloopError(f"z must be a positive finite number, got {z}")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)



def paired_difference(x, y, z: float = 1.96) -> tuple[float, float, float]:
    """``(difference, lo, hi)``: the success rate of ``x`` minus that of ``y`` and Newcombe's
    interval for it (method 10), ``x`` and ``y`` the successes (booleans) of the same episodes.

    With ``a`` episodes won by both, ``b`` by ``x`` only, ``c`` by ``y`` only and ``d`` by
    neither: the difference is ``(b - c) / n``; ``(l1, u1)``, ``(l2, u2)`` the Wilson intervals of
    the two rates ``p1``, ``p2``, ``A = ad - bc`` and ``phi = (A - n/2) / sqrt((a+b)(c+d)(a+c)(b+d))``
    where ``A > n/2``, ``A / sqrt(...)`` where ``A < 0``, else 0 (and 0 where a margin is empty)::

        lo = D - sqrt((p1-l1)^2 - 2 phi (p1-l1)(u2-p2) + (u2-p2)^2)
        hi = D + sqrt((u1-p1)^2 - 2 phi (u1-p1)(p2-l2) + (p2-l2)^2)
    """
    xs, ys = (np.asarray(v) for v in (x, y))
    if xs.ndim != 1 or xs.shape != ys.shape or len(xs) == 0:
        raise TwinloopError(f"paired_difference needs two equally long, non-empty 1-D sequences, got shapes "
                            f"{xs.shape} and {ys.shape}")
    if not all(np.isin(v, (0, 1)).all() for v in (xs, ys)):
        raise TwinloopError("paired_difference: successes must be booleans (or 0/1)")
    xs, ys = xs.astype(bool), ys.astype(bool)
    n = len(xs)
    a, b, c, d = (int(v) for v in ((xs & ys).sum(), (xs & ~ys).sum(), (~xs & ys).sum(), (~xs & ~ys).sum()))
    p1, p2 = (a + b) / n, (a + c) / n
    (l1, u1), (l2, u2) = wilson(a + b, n, z), wilson(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    cross = cross - n / 2 if cross > n / 2 else min(cross, 0)
    phi = cross / math.sqrt(margins) if margins else 0.0
    diff = p1 - p2
    lo = diff - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = diff + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return diff, max(-1.0, lo), min(1.0, hi)


def bootstrap_ci(values, stat: Callable = np.mean, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval ``(lo, hi)`` of ``stat`` over a 1-D sample.

    Args:
        values: ``(n,)`` finite sample.
        stat: statistic of a sample; called as ``stat(x, axis=1)`` on a ``(n_boot, n)`` batch
            of resamples when it accepts ``axis``, else once per resample.
        n_boot: number of resamples.
        seed: seed of the resampling stream.
        level: coverage, in (0, 1).
    """
    x = as_array(values, "values", (None,))
    if isinstance(n_boot, bool) or not isinstance(n_boot, Integral) or n_boot < 1:
        raise TwinloopError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    if not 0 < level < 1:
        raise TwinloopError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    samples = x[rng.integers(0, x.size, size=(n_boot, x.size))]
    try:
        boot = np.asarray(stat(samples, axis=1), dtype=float)
        if boot.shape != (n_boot,):
            raise TypeError
    except TypeError:  # a statistic without an axis argument
        boot = np.array([float(stat(s)) for s in samples])
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return float(lo), float(hi)


def _pair(x, y) -> tuple[np.ndarray, np.ndarray]:
    a = as_array(x, "twin values", (None,))
    b = as_array(y, "world values", (a.size,))
    if a.size < 2:
        raise TwinloopError(f"need at least two policies to compare rankings, got {a.size}")
    return a, b


def pearson(twin, world) -> float:
    """Pearson r of ``(N,)`` twin vs world values. Equal centred values give 1 (SIMPLER's
    convention); otherwise a side without variance gives ``nan`` (undefined, not 0)."""
    a, b = _pair(twin, world)
    a, b = a - a.mean(), b - b.mean()
    if np.allclose(a, b, rtol=0, atol=1e-12):
        return 1.0
    den = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / den) if den > 0 else math.nan


def spearman(twin, world) -> float:
    """Spearman rho (Pearson r of average ranks, ties shared) of ``(N,)`` twin vs world values."""
    a, b = _pair(twin, world)
    return pearson(_scipy_stats.rankdata(a), _scipy_stats.rankdata(b))


def kendall(x, y) -> float:
    """Kendall tau-b of two ``(N,)`` rankings (ties accounted for); ``nan`` if a side is constant."""
    a, b = _pair(x, y)
    return float(_scipy_stats.kendalltau(a, b).statistic)


def mmrv(twin, world) -> float:
    """Mean maximum rank violation of ``(N,)`` twin values against world values (SIMPLER)."""
    s, r = _pair(twin, world)
    flipped = (s[:, None] > s[None, :]) != (r[:, None] > r[None, :])
    return float(np.where(flipped, np.abs(r[:, None] - r[None, :]), 0.0).max(axis=1).mean())


__all__ = ["bootstrap_ci", "kendall", "mmrv", "pearson", "spearman", "wilson"]
