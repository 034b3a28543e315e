"""Confidence intervals for the numbers twinloop reports.

- :func:`wilson`: the Wilson score interval for a success rate ``k / n``. Unlike the normal
  ("Wald") interval it stays inside [0, 1] and does not collapse to zero width at 0/n or n/n,
  which is exactly where small robot experiments live::

      p = k/n,  c = (p + z^2/2n) / (1 + z^2/n),  h = z/(1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2)
      CI = [c - h, c + h]

- :func:`bootstrap_ci`: percentile bootstrap of any statistic of a sample (mean final error,
  gap, ...), seeded so the same data and seed give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral

import numpy as np

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


__all__ = ["bootstrap_ci", "wilson"]
