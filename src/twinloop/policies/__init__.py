"""Base proposers: scripted heuristics and policies distilled from refined actions.

A task's own scripted proposer comes from ``task.default_proposer()``; the point-pushing
machinery the planar tasks share is :class:`PointPusher`. ``make_proposer(task, name,
**options)`` builds a proposer by registry name (the CLI's ``--proposer`` choices come from
:data:`PROPOSERS`); ``noise=`` wraps any of them in :class:`NoisyProposer`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from twinloop.errors import TwinloopError, as_array, choose
from twinloop.policies.scripted import PointPusher, ScriptedConfig, pusher_excitation


def _scripted(task):
    proposer = task.default_proposer()
    if proposer is None:
        raise TwinloopError(f"task {task.name!r} has no scripted proposer; use proposer 'none'")
    return proposer


def _distilled(task, checkpoint: str | None = None):
    if not checkpoint:
        raise TwinloopError("proposer 'distilled' needs checkpoint=PATH (a policy saved by twinloop distill)")
    from twinloop.policies.distilled import DistilledPolicy  # needs the [learn] extra (torch)

    return DistilledPolicy.load(checkpoint, task)


PROPOSERS: dict[str, Callable] = {
    "scripted": _scripted,
    "distilled": _distilled,
    "none": lambda task: None,
}


class NoisyProposer:
    """A proposer whose action chunks carry seeded Gaussian noise: a family of worse policies.

    Each target of each chunk gets independent noise of std ``noise`` x the action range's
    half-width, then is clipped to the bounds; ``reset(seed)`` seeds the noise, so the same
    episode seed gives the same noisy episode.
    """

    def __init__(self, task, proposer, noise: float):
        if proposer is None:
            raise TwinloopError("noise needs a proposer to perturb; proposer 'none' has none")
        if not (np.isfinite(noise) and noise >= 0):
            raise TwinloopError(f"noise must be >= 0 (a fraction of the action half-range), got {noise}")
        self.task, self.proposer, self.noise = task, proposer, float(noise)
        self.scale = self.noise * (task.action_high - task.action_low) / 2
        self.rng = np.random.default_rng(0)

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng([0 if seed is None else seed, 11])
        if callable(getattr(self.proposer, "reset", None)):
            self.proposer.reset(seed)

    def propose(self, obs, state) -> np.ndarray:
        chunk = as_array(self.proposer.propose(obs, state), "proposer action chunk")
        noisy = chunk + self.rng.normal(0.0, 1.0, chunk.shape) * self.scale
        return np.clip(noisy, self.task.action_low, self.task.action_high)


def make_proposer(task, name: str, noise: float = 0.0, **options):
    """The base proposer ``name`` for ``task`` (``None`` for ``none``); ``options`` go to its
    factory (``checkpoint=`` for ``distilled``); ``noise > 0`` wraps it in :class:`NoisyProposer`."""
    choose("proposer", name, tuple(PROPOSERS))
    factory = PROPOSERS[name]
    try:
        inspect.signature(factory).bind(task, **options)
    except TypeError as exc:
        raise TwinloopError(f"proposer {name!r} does not take option(s) {sorted(options)}") from exc
    proposer = factory(task, **options)
    return NoisyProposer(task, proposer, noise) if noise else proposer


__all__ = ["PROPOSERS", "NoisyProposer", "PointPusher", "ScriptedConfig", "make_proposer", "pusher_excitation"]
