"""Risk aggregation of costs over parameter particles.

For costs ``J[p, k]`` of candidate k under particle p:

- ``mean``:  (1/P) sum_p J[p, k]
- ``worst``: max_p J[p, k]
- ``cvar``:  mean of the worst ceil(alpha * P) particles (alpha=1 is the mean, alpha->0 the max)

A candidate unstable under any particle gets cost +inf.
"""

from __future__ import annotations

import numpy as np

from twinloop.errors import TwinloopError, choose

RISKS = ("mean", "worst", "cvar")


def aggregate(costs: np.ndarray, ok: np.ndarray, risk: str = "mean", alpha: float = 0.25) -> np.ndarray:
    """``(P, K)`` costs and stability flags -> ``(K,)`` risk-adjusted costs."""
    choose("risk", risk, RISKS)
    if costs.ndim != 2 or costs.shape != ok.shape:
        raise TwinloopError(f"costs and ok must both be (P, K), got {costs.shape} and {ok.shape}")
    c = np.where(ok & np.isfinite(costs), costs, np.inf)
    if risk == "mean":
        out = c.mean(axis=0)
    elif risk == "worst":
        out = c.max(axis=0)
    else:
        if not 0 < alpha <= 1:
            raise TwinloopError(f"cvar alpha must be in (0, 1], got {alpha}")
        n = max(1, int(np.ceil(alpha * c.shape[0])))
        out = np.sort(c, axis=0)[-n:].mean(axis=0)
    return np.where(np.isnan(out), np.inf, out)
