"""Model-predictive path integral control (MPPI), prior-guided.

Sampling mean: ``mu = a * prior + (1 - a) * warm`` when a base proposal is given (``a`` =
``prior_weight``), else the warm start. Candidates ``U_k ~ N(mu, (s_k sigma)^2)``, the batch
split over the noise scales ``s`` (explore and fine-tune in one batch). Update:

    w_k = exp(-(J_k - min J) / (lambda * (max J - min J)))  /  sum_j (...)
    mu' = sum_k w_k U_k

``lambda`` (``temperature``) is relative to the spread of costs, so it needs no retuning
when a task's cost scale changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twinloop.errors import number
from twinloop.plan.base import OptState, gaussian, initial_std, noise_scales


@dataclass(frozen=True)
class MPPI:
    noise: float = 0.3
    noise_scales: tuple[float, ...] = (1.0, 0.2)
    temperature: float = 0.1
    prior_weight: float = 0.5
    name: str = "mppi"

    def __post_init__(self):
        number(self.noise, "MPPI noise", low=0, low_open=True)
        object.__setattr__(self, "noise_scales", noise_scales(self.noise_scales, "MPPI noise_scales"))
        number(self.temperature, "MPPI temperature", low=0, low_open=True)
        number(self.prior_weight, "MPPI prior_weight", low=0, high=1)

    def init(self, warm, prior, low, high) -> OptState:
        mean = warm if prior is None else self.prior_weight * prior + (1 - self.prior_weight) * warm
        return OptState(mean=mean, std=initial_std(self.noise, low, high, len(warm)), low=low, high=high, prior=prior)

    def sample(self, state, rng, n):
        return gaussian(state, rng, n, self.noise_scales)

    def update(self, state, candidates, costs):
        spread = max(float(costs.max() - costs.min()), 1e-12)
        w = np.exp(-(costs - costs.min()) / (self.temperature * spread))
        w /= w.sum()
        return state.with_(mean=np.einsum("k,knu->nu", w, candidates))
