"""What every optimizer shares: its state and its two-method protocol.

An optimizer says only how to *sample* candidate knots around its state and how to *update*
the state from their costs. Clipping, always keeping the current mean and the base proposal
among the candidates, dropping non-finite rollouts, risk aggregation over parameter
particles and best-so-far tracking live once, in :class:`twinloop.control.Refiner`.

An optimizer that reasons over rollouts (the language-model one) reads the refiner's
:class:`Feedback` on the state given to ``update`` and may return ``suggested`` knots; the
refiner puts those in the next batch. Others ignore both fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from twinloop.errors import TwinloopError, number
from twinloop.plan.spline import PlanSpec


@dataclass(frozen=True)
class Feedback:
    """The refiner's account of the batch it just evaluated (no twin, no task object).

    Attached to the state given to ``update`` only when another iteration follows, so that
    knots an optimizer suggests from it can still be evaluated.

    Attributes:
        description: what the task is, in words (``Task.description()``).
        spec: the plan layout: knot times, spline kind, action bounds, control period.
        candidates: ``(K, N, nu)`` knots evaluated.
        costs: ``(K,)`` aggregated costs, ``inf`` where a rollout failed.
        unstable: ``(K,)`` True where a rollout went non-finite or unstable (any particle).
        times: ``(S,)`` seconds from now of the state samples (one per control tick).
        states: ``(K, S, nq)`` positions at those times (first parameter particle).
        state_names: ``(nq,)`` names of the position coordinates.
        cost_terms: returns ``{term: (K,)}`` weighted cost terms (mean over particles);
            computed on call, so optimizers that do not read them pay nothing.
        failure: the task's failure test on ``(nq,)`` positions: why they failed beyond
            recovery (e.g. ``"toppled"``), or ``""``.
    """

    description: str
    spec: PlanSpec
    candidates: np.ndarray
    costs: np.ndarray
    unstable: np.ndarray
    times: np.ndarray
    states: np.ndarray
    state_names: tuple[str, ...]
    cost_terms: Callable[[], dict[str, np.ndarray]]
    failure: Callable[[np.ndarray], str]


@dataclass(frozen=True)
class OptState:
    """An optimizer's state within one ``refine`` call: its sampling distribution over plans.

    Attributes:
        mean: ``(N, nu)`` knots at the centre of the sampling distribution.
        std: ``(N, nu)`` per-knot standard deviation (action units).
        prior: ``(N, nu)`` knots of the base proposal, or ``None``.
        proposals: ``(M, N, nu)`` knots sampled from a stochastic proposer, or ``None``.
        low, high: ``(nu,)`` action bounds.
        feedback: the last batch, set by the refiner on the state given to ``update``.
        suggested: ``(M, N, nu)`` knots the optimizer wants in the next batch besides its
            samples; the refiner evaluates them once.
        info: what the optimizer reports about this call (JSON-able numbers and strings:
            calls, tokens, seconds, why it fell back); recorded per control tick.
    """

    mean: np.ndarray
    std: np.ndarray
    low: np.ndarray
    high: np.ndarray
    prior: np.ndarray | None = None
    proposals: np.ndarray | None = None
    extra: dict = field(default_factory=dict)
    feedback: Feedback | None = None
    suggested: np.ndarray | None = None
    info: dict = field(default_factory=dict)

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
