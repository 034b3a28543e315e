"""Cross-entropy method: refit a diagonal Gaussian to the elite candidates.

    E = the ``n_elite`` lowest-cost candidates
    mu' = mean(E),  sigma' = max(std(E), sigma_min)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twinloop.errors import number
from twinloop.plan.base import OptState, gaussian, initial_std


@dataclass(frozen=True)
class CEM:
    noise: float = 0.4
    elite_fraction: float = 0.1
    min_noise: float = 0.05
    prior_weight: float = 0.5
    name: str = "cem"

    def __post_init__(self):
        number(self.noise, "CEM noise", low=0, low_open=True)
        number(self.elite_fraction, "CEM elite_fraction", low=0, high=1, low_open=True)
        number(self.min_noise, "CEM min_noise", low=0)
        number(self.prior_weight, "CEM prior_weight", low=0, high=1)

    def init(self, warm, prior, low, high) -> OptState:
        mean = warm if prior is None else self.prior_weight * prior + (1 - self.prior_weight) * warm
        std = initial_std(self.noise, low, high, len(warm))
        return OptState(mean=mean, std=std, low=low, high=high, prior=prior,
                        extra={"min_std": initial_std(self.min_noise, low, high, len(warm))})

    def sample(self, state, rng, n):
        return gaussian(state, rng, n)

    def update(self, state, candidates, costs):
        n_elite = max(1, int(round(self.elite_fraction * len(costs))))
        elite = candidates[np.argsort(costs)[:n_elite]]
        std = np.maximum(elite.std(axis=0), state.extra["min_std"]) if n_elite > 1 else state.extra["min_std"]
        return state.with_(mean=elite.mean(axis=0), std=std)
