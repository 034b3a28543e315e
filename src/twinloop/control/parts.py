"""The parts a :class:`~twinloop.control.Controller` composes, each a small interface.

One synchronous control tick::

    state   = estimator.estimate(obs)                        (nstate,) twin state
    alarms  = [hook.begin(state) for hook in hooks]          before planning
    prior   = proposer.propose(obs, state)                   (H', nu) base proposal
    offered = [source.offer(obs, state, H, rng) ...]         (M_i, L_i, nu) chunks each
    result  = refiner.refine(state, prior, proposals=offered, ...)
    for hook in hooks: hook.decide(tick, batch)              may change the plan sent
    send tick.action; estimator.sent(action); hook.sent(state, tick)

- A **state estimator** maps observations to twin states: the task's stateless map
  (:class:`~twinloop.tasks.base.ObservationMap`, ``task.state_from_obs``) or a stateful one (a
  grasp task's :class:`~twinloop.tasks.keypoints.KeypointObserver`), supplied by
  :meth:`Task.state_estimator <twinloop.tasks.Task.state_estimator>`.
- A **candidate source** offers per-tick action chunks to the refiner beside its own
  samples: a stochastic proposer's samples (:class:`ProposerSamples`), a task's repair
  primitives (:meth:`Task.candidate_sources <twinloop.tasks.Task.candidate_sources>`). They
  join the first batch of any optimizer, each rehearsed as offered (its per-tick detail kept
  under ``RefinerConfig.exact_prior``), in the order the sources are given. The base proposal
  itself is the proposer's (row 1 of the batch).
- A **tick hook** is called at the stages of each tick (every method optional): the gap
  monitor (:class:`~twinloop.control.hooks.GapWatch`), the trusted acceptance rule
  (:class:`~twinloop.control.hooks.TrustedAcceptance`), a repair's commit margin. A source
  that must see what became of its offer (a repair carried on once sent) has hook methods
  too and is called as both.

A new estimator, source or hook is a class of its own anywhere (nothing here needs editing);
these are :class:`typing.Protocol` s, checked by their methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.plan import Plan

if TYPE_CHECKING:
    from twinloop.control.controller import Controller, TickInfo

#: the methods a tick hook may have (a source with any of them is called as a hook too)
HOOK_METHODS = ("bind", "begin", "decide", "sent", "report")


@runtime_checkable
class StateEstimator(Protocol):
    """Observation -> twin state, kept across an episode's ticks."""

    def reset(self, seed: int | None = None) -> None:
        """Forget the last episode (called at each episode's start)."""

    def estimate(self, obs) -> np.ndarray:
        """``(nstate,)`` twin state from the world's observation ``obs``."""

    def sent(self, action: np.ndarray) -> None:
        """The ``(nu,)`` action sent after the last estimate."""


@runtime_checkable
class CandidateSource(Protocol):
    """Offers action chunks to each tick's first batch (a source may also have ``reset(seed)``
    and any tick-hook method)."""

    def offer(self, obs, state: np.ndarray, ticks: int, rng: np.random.Generator) -> np.ndarray:
        """``(M, L, nu)`` per-tick action chunks (``M >= 0``; held past their end, cut at the
        horizon of ``ticks`` control ticks) from twin ``state``; ``rng`` is the refiner's
        sampling stream."""


class TickHook:
    """A part called at the stages of each synchronous tick; subclass it and override what you
    need (or write the methods without it: each is optional).

    Stages: :meth:`bind` once, :meth:`reset` each episode, then each tick :meth:`begin`
    (after the state is estimated), :meth:`decide` (after refinement, may change the plan
    sent), :meth:`sent` (the action is sent); :meth:`report` at an episode's end.
    """

    def bind(self, controller: Controller) -> None:
        """Check the controller can run this hook and keep what it needs from it."""

    def reset(self, seed: int | None = None) -> None:
        """An episode starts."""

    def begin(self, state: np.ndarray) -> str:
        """A tick starts from ``(nstate,)`` twin ``state``; returns an alarm's reason or ``""``."""
        return ""

    def decide(self, tick: TickInfo, batch: Batch) -> None:
        """Refinement is done (or failed: ``tick.fallback``); the hook may replace what is sent
        (``tick.plan``, ``tick.action``, ``tick.cost``) and say why (``tick.accept``)."""

    def sent(self, state: np.ndarray, tick: TickInfo) -> None:
        """``tick.action`` is sent from ``state``."""

    def report(self) -> dict:
        """What an episode's row says about this hook (JSON-ready)."""
        return {}


def is_hook(part) -> bool:
    """Whether ``part`` has any tick-hook method."""
    return any(callable(getattr(part, m, None)) for m in HOOK_METHODS)


@dataclass
class Batch:
    """What a controller put before the refiner this tick.

    Attributes:
        prior: the base proposal's plan (``None`` without a proposer).
        plans: the offered chunks' plans, in batch order (each with its detail).
        chunks: the offered ``(L, nu)`` chunks as their sources gave them.
        rows: ``id(source) -> slice`` of that source's offers in ``plans`` (and in
            ``RefineResult.offered_costs``).
    """

    prior: Plan | None = None
    plans: list[Plan] = field(default_factory=list)
    chunks: list[np.ndarray] = field(default_factory=list)
    rows: dict[int, slice] = field(default_factory=dict)

    def of(self, source) -> slice:
        """The rows of ``source``'s offers (empty if it offered none)."""
        return self.rows.get(id(source), slice(0, 0))

    def knots(self) -> np.ndarray | None:
        """``(M, N, nu)`` knots of the offers, ``None`` without any."""
        return np.stack([p.knots for p in self.plans]) if self.plans else None

    def detail(self) -> np.ndarray | None:
        """``(M, H, nu)`` per-tick detail of the offers, ``None`` when none has any."""
        if not any(p.detail is not None for p in self.plans):
            return None
        zero = np.zeros((self.plans[0].spec.horizon_ticks, self.plans[0].spec.nu))
        return np.stack([zero if p.detail is None else p.detail for p in self.plans])


def check_samples(proposer, n: int, label: str) -> None:
    """Refuse ``n > 0`` samples from a ``proposer`` (named ``label`` in the error) that cannot
    draw them (no ``sample(obs, state, n, rng)`` method)."""
    if n and not callable(getattr(proposer, "sample", None)):
        raise TwinloopError(f"proposal_samples={n} needs a stochastic proposer with a sample(obs, state, n, rng) "
                            f"method (distilled, the planar scripts); proposer {label!r} draws none")


class ProposerSamples:
    """A candidate source: ``n`` chunks a stochastic proposer draws each tick
    (``proposer.sample(obs, state, n, rng) -> (n, H', nu)``), from the refiner's stream."""

    def __init__(self, proposer, n: int, label: str | None = None):
        self.n = number(n, "proposal_samples", low=0, integer=True)
        check_samples(proposer, self.n, label or type(proposer).__name__)
        self.proposer = proposer

    def offer(self, obs, state, ticks, rng) -> np.ndarray:
        if not self.n:
            return np.empty((0, ticks, 0))
        return np.asarray(self.proposer.sample(obs, state, self.n, rng), dtype=float)


def check_estimator(estimator) -> None:
    if not isinstance(estimator, StateEstimator):
        raise TwinloopError(f"state estimator {type(estimator).__name__} needs estimate(obs), sent(action) and "
                            "reset(seed) methods (see twinloop.control.parts.StateEstimator)")


def check_source(source) -> None:
    if not callable(getattr(source, "offer", None)):
        raise TwinloopError(f"candidate source {type(source).__name__} has no offer(obs, state, ticks, rng) method "
                            "(see twinloop.control.parts.CandidateSource)")


def offered_chunks(source, obs, state, ticks: int, rng, nu: int) -> list[np.ndarray]:
    """``source``'s offer as a list of ``(L, nu)`` chunks, its shape checked."""
    out = np.asarray(source.offer(obs, state, ticks, rng), dtype=float)
    if out.size == 0:
        return []
    out = as_array(out, f"{type(source).__name__} offer")
    if out.ndim != 3 or out.shape[2] != nu or out.shape[1] < 1:
        raise TwinloopError(f"candidate source {type(source).__name__} offered chunks of shape {out.shape}, "
                            f"expected (M, L, {nu})")
    return list(out)
