"""Predictive sampling: Gaussian perturbations of the current plan; keep the best.

    U_k ~ N(mu, sigma^2),   mu' = argmin_k J(U_k)   (the current mu is always a candidate)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twinloop.errors import number
from twinloop.plan.base import OptState, gaussian, initial_std, noise_scales


@dataclass(frozen=True)
class PredictiveSampling:
    noise: float = 0.3
    noise_scales: tuple[float, ...] = (1.0, 0.2)
    name: str = "predictive"

    def __post_init__(self):
        number(self.noise, "predictive sampling noise", low=0, low_open=True)
        object.__setattr__(self, "noise_scales", noise_scales(self.noise_scales, "predictive sampling noise_scales"))

    def init(self, warm, prior, low, high) -> OptState:
        return OptState(mean=warm, std=initial_std(self.noise, low, high, len(warm)), low=low, high=high, prior=prior)

    def sample(self, state, rng, n):
        return gaussian(state, rng, n, self.noise_scales)

    def update(self, state, candidates, costs):
        return state.with_(mean=candidates[int(np.argmin(costs))].copy())
