"""Best-of-N (a ranked planner): propose, score, keep the best.

Candidates are the stochastic proposer's own samples (``state.proposals``, if the proposer
has ``sample``) plus Gaussian perturbations of the base proposal (or the warm start when
there is none); ``mu' = argmin_k J(U_k)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twinloop.errors import number
from twinloop.plan.base import OptState, initial_std


@dataclass(frozen=True)
class BestOfN:
    noise: float = 0.2
    name: str = "best_of_n"

    def __post_init__(self):
        number(self.noise, "best-of-N noise", low=0)

    def init(self, warm, prior, low, high) -> OptState:
        return OptState(mean=warm, std=initial_std(self.noise, low, high, len(warm)), low=low, high=high, prior=prior)

    def sample(self, state, rng, n):
        props = state.proposals if state.proposals is not None else np.empty((0, *state.mean.shape))
        props = props[:n]
        m = n - len(props)
        # perturb around the proposal when there is one: its samples are what we rank
        centre = state.prior if state.prior is not None else state.mean
        if len(props):
            centres = props[rng.integers(len(props), size=m)]
        else:
            centres = np.broadcast_to(centre, (m, *centre.shape))
        pert = centres + state.std * rng.standard_normal((m, *state.mean.shape))
        return np.concatenate([props, pert])

    def update(self, state, candidates, costs):
        return state.with_(mean=candidates[int(np.argmin(costs))].copy())
