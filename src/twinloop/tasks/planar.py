"""Plane geometry shared by the planar pushing tasks and their scripted proposers."""

from __future__ import annotations

import numpy as np


def wrap(a):
    """Angle(s) wrapped to (-pi, pi]."""
    return np.arctan2(np.sin(a), np.cos(a))


def rotate(v, yaw) -> np.ndarray:
    """Rotate ``(..., 2)`` vectors counter-clockwise by ``yaw`` (rad, broadcast)."""
    v = np.asarray(v, dtype=float)
    c, s = np.cos(yaw), np.sin(yaw)
    return np.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], axis=-1)


def cross(a, b) -> np.ndarray:
    """z of the cross product of ``(..., 2)`` vectors."""
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def on_floor(xy) -> np.ndarray:
    """``(..., n, 2)`` floor points -> ``(..., n, 3)`` at height 0."""
    xy = np.asarray(xy, dtype=float)
    return np.concatenate([xy, np.zeros((*xy.shape[:-1], 1))], axis=-1)
