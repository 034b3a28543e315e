"""Errors and input checks shared by every module.

Every check raises :class:`TwinloopError` (a ``ValueError``) with a message that names the
argument and what was wrong with it, so bad input never travels far.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

import numpy as np


class TwinloopError(ValueError):
    """Bad input or configuration, with a message that names the problem."""


class RefinementFailed(RuntimeError):
    """Refinement produced no usable plan (e.g. every rollout was non-finite)."""


def as_array(x, name: str, shape: Sequence[int | None] | None = None, finite: bool = True) -> np.ndarray:
    """Return ``x`` as a float64 array, checking its shape (``None`` = any size) and finiteness."""
    try:
        complex_ = np.iscomplexobj(x)  # reads a ragged list too: its error must name the argument
        arr = None if complex_ else np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        if "inhomogeneous" in str(exc) or "sequence" in str(exc):
            raise TwinloopError(f"{name} must be a rectangular array, got rows of different lengths") from exc
        raise TwinloopError(f"{name} must be numeric, got {type(x).__name__}") from exc
    if complex_:  # a cast would drop the imaginary part without a word
        raise TwinloopError(f"{name} must be real, got complex values")
    if shape is not None:
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            want = "(" + ", ".join("?" if s is None else str(s) for s in shape) + ")"
            raise TwinloopError(f"{name} must have shape {want}, got {arr.shape}")
    if arr.size == 0:
        raise TwinloopError(f"{name} is empty (shape {arr.shape})")
    if finite and not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise TwinloopError(f"{name} contains NaN or inf (first at index {tuple(int(i) for i in bad)})")
    return arr


def choose(name: str, value: str, options: Sequence[str]) -> str:
    """Check that ``value`` is one of ``options``; the error lists what is available."""
    if value not in options:
        raise TwinloopError(f"unknown {name} {value!r}; choose one of: {', '.join(options)}")
    return value


def number(x, name: str, *, low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = False, integer: bool = False, finite: bool = True):
    """``x`` as a finite ``float`` (or ``int`` with ``integer=True``) within the given range.

    Booleans, strings, NaN and (unless ``finite=False``) infinities are refused; an integer-valued float is accepted
    where an integer is asked for (``64.0`` -> ``64``). The error names ``name``, the value and
    the range, e.g. ``num_samples must be an integer >= 2, got nan``.
    """
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    want = ("an integer" if integer else "a finite number" if finite else "a number") + (" " + " and ".join(parts) if parts else "")
    bad = TwinloopError(f"{name} must be {want}, got {x!r}")
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, Real):
        raise bad
    if integer:
        if not isinstance(x, Integral):
            if not (math.isfinite(x) and float(x).is_integer()):
                raise bad
        v = int(x)
    else:
        v = float(x)
        if math.isnan(v) or (finite and math.isinf(v)):
            raise bad
    if low is not None and (v < low or (low_open and v == low)):
        raise bad
    if high is not None and (v > high or (high_open and v == high)):
        raise bad
    return v
