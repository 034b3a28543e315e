"""Best-of-N (a ranked planner): propose, score, keep the best.

Candidates are the stochastic proposer's own samples (``state.proposals``, if the proposer
has ``sample``; the refiner puts them in the first batch) and Gaussian perturbations of them,
or of the base proposal (the warm start when there is none) without samples;
``mu' = argmin_k J(U_k)``.
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
        # perturb around the proposer's samples when there are some: they are what we rank
        centre = state.prior if state.prior is not None else state.mean
        if state.proposals is not None and len(state.proposals):
            centres = state.proposals[rng.integers(len(state.proposals), size=n)]
        else:
            centres = np.broadcast_to(centre, (n, *centre.shape))
        return centres + state.std * rng.standard_normal((n, *state.mean.shape))

    def update(self, state, candidates, costs):
        return state.with_(mean=candidates[int(np.argmin(costs))].copy())
