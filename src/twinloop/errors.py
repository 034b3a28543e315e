"""Errors and input checks shared by every module.

Every check raises :class:`TwinloopError` (a ``ValueError``) with a message that names the
argument and what was wrong with it, so bad input never travels far.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class TwinloopError(ValueError):
    """Bad input or configuration, with a message that names the problem."""


class RefinementFailed(RuntimeError):
    """Refinement produced no usable plan (e.g. every rollout was non-finite)."""


def as_array(x, name: str, shape: Sequence[int | None] | None = None, finite: bool = True) -> np.ndarray:
    """Return ``x`` as a float64 array, checking its shape (``None`` = any size) and finiteness."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TwinloopError(f"{name} must be numeric, got {type(x).__name__}") from exc
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
