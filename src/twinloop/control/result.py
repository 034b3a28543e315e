"""The outcome of one ``refine`` call, and what a call has found while it runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from twinloop.plan import Plan
from twinloop.rollouts import Rollouts


@dataclass
class RefineResult:
    """Outcome of one ``refine`` call.

    Attributes:
        plan: the best plan found (lowest aggregated cost seen in any iteration).
        cost: its cost.
        prior_cost: cost of the base proposal (``nan`` without one).
        iterations: iterations begun before the deadline (the last may be cut short: ``cut``).
        n_rollouts: trajectories simulated (P x K per iteration).
        n_unstable: of those, how many went non-finite or unstable.
        seconds: wall time.
        rollouts: the last iteration's rollouts (for plotting ghost traces), if kept.
        costs: the last iteration's ``(K,)`` aggregated costs.
        n_steps: physics steps simulated (all particles, candidates and iterations).
        elites: ``(M, N, nu)`` knots of the last iteration's ``config.carry`` best candidates.
        optimizer_info: what the optimizer reported (``OptState.info``).
        offered_costs: ``(M,)`` costs of the ``proposals`` as rehearsed in the first batch
            (``nan`` for those that did not fit in it); ``None`` without proposals.
        n_samples: candidates evaluated, over all iterations (each under every particle).
        deadline: the call's deadline (s; ``None``: none).
        cut: the deadline stopped the call before all its iterations and samples.
    """

    plan: Plan
    cost: float
    prior_cost: float
    iterations: int
    n_rollouts: int
    n_unstable: int
    seconds: float
    rollouts: object = None
    costs: np.ndarray | None = None
    n_steps: int = 0
    elites: np.ndarray | None = None
    optimizer_info: dict = field(default_factory=dict)
    offered_costs: np.ndarray | None = None
    n_samples: int = 0
    deadline: float | None = None
    cut: bool = False


@dataclass
class RefineSearch:
    """What one ``refine`` call has found so far: the best candidate, the prior as rehearsed
    (row 1 of the first batch), the offered proposals' costs, the last batch, the counts."""

    offered_c: np.ndarray | None = None
    best_k: np.ndarray | None = None
    best_c: float = np.inf
    best_d: np.ndarray | None = None
    prior_c: float = np.nan
    prior_k: np.ndarray | None = None
    prior_d: np.ndarray | None = None
    n_roll: int = 0
    n_bad: int = 0
    n_steps: int = 0
    n_samples: int = 0
    last_r: Rollouts | None = None
    last_c: np.ndarray | None = None
    last_cand: np.ndarray | None = None

    def record(self, r: Rollouts, c: np.ndarray, steps: int, cand: np.ndarray, detail) -> None:
        """Count a batch's ``(K,)`` costs ``c`` of ``cand``; keep its best if it beats the best."""
        self.n_steps += steps
        self.n_roll += r.ok.size
        self.n_samples += len(c)
        self.n_bad += r.n_unstable
        finite = np.isfinite(c)
        if finite.any():
            j = int(np.argmin(np.where(finite, c, np.inf)))
            if c[j] < self.best_c:
                self.best_c, self.best_k = float(c[j]), cand[j].copy()
                self.best_d = None if detail is None else detail[j]
        self.last_r, self.last_c, self.last_cand = r, c, cand

    def first_batch(self, c: np.ndarray, cand: np.ndarray, detail, n_incumbent: int, n_extra: int,
                    has_prior: bool) -> None:
        """From the first batch: the offered proposals' costs (the ``n_extra`` rows after the
        ``n_incumbent``, those evaluated before a deadline), and the prior as rehearsed (row 1)
        with ``has_prior``."""
        if n_extra:
            n_off = max(min(len(self.offered_c), n_extra, len(c) - n_incumbent), 0)
            self.offered_c[:n_off] = c[n_incumbent : n_incumbent + n_off]
        if has_prior:
            self.prior_c, self.prior_k = float(c[1]), cand[1].copy()
            self.prior_d = None if detail is None else detail[1]
