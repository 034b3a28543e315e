"""What every optimizer shares: its state and its two-method protocol.

An optimizer says only how to *sample* candidate knots around its state and how to *update*
the state from their costs. Clipping, always keeping the current mean and the base proposal
among the candidates, dropping non-finite rollouts, risk aggregation over parameter
particles and best-so-far tracking live once, in :class:`twinloop.control.Refiner`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from twinloop.errors import TwinloopError, number


@dataclass(frozen=True)
class OptState:
    """Sampling distribution over plans.

    Attributes:
        mean: ``(N, nu)`` knots at the centre of the sampling distribution.
        std: ``(N, nu)`` per-knot standard deviation (action units).
        prior: ``(N, nu)`` knots of the base proposal, or ``None``.
        proposals: ``(M, N, nu)`` knots sampled from a stochastic proposer, or ``None``.
        low, high: ``(nu,)`` action bounds.
    """

    mean: np.ndarray
    std: np.ndarray
    low: np.ndarray
    high: np.ndarray
    prior: np.ndarray | None = None
    proposals: np.ndarray | None = None
    extra: dict = field(default_factory=dict)

    def with_(self, **kw) -> OptState:
        return replace(self, **kw)


class Optimizer(Protocol):
    """Selection mechanism over candidate plans; knows nothing of twins or tasks."""

    name: str

    def init(self, warm: np.ndarray, prior: np.ndarray | None, low: np.ndarray, high: np.ndarray) -> OptState:
        """Initial state from the warm start ``(N, nu)`` and optional base proposal."""
        ...

    def sample(self, state: OptState, rng: np.random.Generator, n: int) -> np.ndarray:
        """``(n, N, nu)`` candidate knots (the refiner clips them to bounds)."""
        ...

    def update(self, state: OptState, candidates: np.ndarray, costs: np.ndarray) -> OptState:
        """New state from ``(K, N, nu)`` finite-cost candidates and their ``(K,)`` costs."""
        ...


def noise_scales(scales, name: str) -> tuple[float, ...]:
    """``scales`` checked as a non-empty tuple of positive finite multipliers of the noise."""
    if isinstance(scales, (int, float)) or not hasattr(scales, "__len__") or len(scales) == 0:
        raise TwinloopError(f"{name} must be a non-empty tuple of positive numbers, got {scales!r}")
    return tuple(number(s, f"{name}[{i}]", low=0, low_open=True) for i, s in enumerate(scales))


def initial_std(scale: float, low: np.ndarray, high: np.ndarray, n_knots: int) -> np.ndarray:
    """``(N, nu)`` std as a fraction ``scale`` of each action's half-range."""
    return np.tile(scale * (high - low) / 2.0, (n_knots, 1))


def gaussian(state: OptState, rng: np.random.Generator, n: int, scales: tuple[float, ...] = (1.0,)) -> np.ndarray:
    """``(n, N, nu)`` draws from ``N(mean, (s * std)^2)``, the n split evenly over the scales ``s``.

    Several scales let one batch both explore (large s) and fine-tune (small s): a single std
    big enough to find a new contact is far too big to place the last millimetre.
    """
    s = np.asarray(scales, dtype=float)[np.arange(n) % len(scales)]
    return state.mean + s[:, None, None] * state.std * rng.standard_normal((n, *state.mean.shape))
