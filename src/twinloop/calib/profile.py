"""The profile check of a calibration's posterior: where the objective really rises along each
principal direction of the data covariance (see :func:`profile_factors`)."""

from __future__ import annotations

import numpy as np

from twinloop.calib.problem import Objective
from twinloop.params import ParamSpace

FLAT_WIDENING = 1e3  # widening that stands in for "flat as far as the profile check looked"
_PROFILE_STEPS = (1.0, 2.0, 4.0, 8.0)
_NEAR = (0.25, 0.5)  # inner points of each line, in half-widths: the floor and the roughness


def profile_factors(fn: Objective, x: np.ndarray, f0: float, s2: float, scale: np.ndarray, space: ParamSpace,
                    Vc: np.ndarray, lc: np.ndarray) -> np.ndarray:
    """How much wider than the Laplace approximation the 95% interval must be, per principal
    direction of the data covariance.

    The local quadratic fit measures curvature over a small neighbourhood; contact makes the
    objective rough, and a fit that ends in a narrow dip sees a steep bowl where the objective
    is in fact flat (a constant push fixes friction x mass, yet a dip can make the ratio look
    determined). So walk out along each principal direction ``v_i`` to ``t`` times its
    Laplace 95% half-width, ``t`` in 1, 2, 4, 8, both sides, and find where the objective has
    risen by the 95% profile threshold ``chi2_1(0.95) / 2 * s^2 = 1.92 s^2`` plus twice the
    objective's small-scale roughness, for good (at that step and every later one). The
    roughness (per line) is the RMS departure from a parabola through its points at 0, 1/4,
    1/2 and 1 half-width: a rise within it tells nothing, and ``x`` itself may sit in a dip
    of it (rises count from the floor the nearby points stand on). The
    direction's std is widened by that ``t`` (interpolated; never narrowed); ``inf`` when the
    rise never comes, within the steps or before a bound.
    """
    n = len(x)
    steps, near = np.asarray(_PROFILE_STEPS), np.asarray(_NEAR)
    half = 1.96 * np.sqrt(lc)  # scaled units
    pts, ends = [], []
    for i in range(n):
        for sign in (1.0, -1.0):
            for t in (*steps, *near):
                p = x + scale * (sign * t * half[i] * Vc[:, i])
                pts.append(np.clip(p, space.low, space.high))
                ends.append(not np.allclose(pts[-1], p))
    R = fn(np.stack(pts))
    k = len(steps) + len(near)
    rise = (0.5 * (R**2).sum(axis=1) - f0).reshape(n, 2, k)
    clipped = np.array(ends).reshape(n, 2, k)[..., : len(steps)]
    # x may sit in a narrow dip below a flat floor: measure rises from the floor the nearby
    # points stand on (their median departure from the Laplace quadratic), never from below x
    rise -= max(0.0, float(np.median(rise[..., len(steps) :] - 1.92 * s2 * near**2)))
    thr = _thresholds(rise, s2)
    return _widening(rise[..., : len(steps)], clipped, thr)


def _thresholds(rise: np.ndarray, s2: float) -> np.ndarray:
    """``(n,)`` rise that counts along each line: ``1.92 s^2`` plus twice the line's small-scale
    roughness, the residual of a parabola through its inner points (``(n, 2, k)`` rises: the
    steps, then the near points, on each side)."""
    steps, near = np.asarray(_PROFILE_STEPS), np.asarray(_NEAR)
    t_in = np.concatenate([[0.0], near, steps[:1], -near, -steps[:1]])
    A = np.stack([np.ones_like(t_in), t_in, t_in**2], axis=1)
    thr = np.zeros(len(rise))
    for i in range(len(rise)):
        y = np.concatenate([[0.0], rise[i, 0, len(steps) :], rise[i, 0, :1], rise[i, 1, len(steps) :], rise[i, 1, :1]])
        c, *_ = np.linalg.lstsq(A, y, rcond=None)
        thr[i] = 1.92 * s2 + 2.0 * np.sqrt(np.sum((y - A @ c) ** 2) / (len(t_in) - 3))
    return thr


def _widening(rise: np.ndarray, clipped: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """``(n,)`` factors from the ``(n, 2, steps)`` rises: the step (interpolated) from which the
    rise stays above ``thr`` on both sides, ``inf`` where it never does before a bound."""
    steps = np.asarray(_PROFILE_STEPS)
    out = np.ones(len(rise))
    for i in range(len(rise)):
        for side in range(2):
            above = rise[i, side] > thr[i]
            # the first step from which the rise holds (a single spike up does not count)
            held = np.flatnonzero(np.logical_and.accumulate(above[::-1])[::-1])
            if not len(held) or clipped[i, side, : held[0]].any():
                out[i] = np.inf
                continue
            j = int(held[0])
            if j == 0:
                continue
            a, b = np.sqrt(max(rise[i, side, j - 1], 0.0)), np.sqrt(rise[i, side, j])
            t = steps[j - 1] + (steps[j] - steps[j - 1]) * (np.sqrt(thr[i]) - a) / max(b - a, 1e-300)
            out[i] = max(out[i], float(t))
    return out
