"""Plans (spline knots) and the optimizers that select among them."""

from __future__ import annotations

from twinloop.errors import TwinloopError, choose
from twinloop.plan.base import Optimizer, OptState
from twinloop.plan.best_of_n import BestOfN
from twinloop.plan.cem import CEM
from twinloop.plan.mppi import MPPI
from twinloop.plan.predictive import PredictiveSampling
from twinloop.plan.risk import RISKS, aggregate
from twinloop.plan.spline import KINDS, Plan, PlanBasis, PlanSpec

OPTIMIZERS = {"mppi": MPPI, "cem": CEM, "predictive": PredictiveSampling, "best_of_n": BestOfN}


def make_optimizer(name: str, **kw) -> Optimizer:
    """An optimizer by name (``mppi`` | ``cem`` | ``predictive`` | ``best_of_n``)."""
    choose("optimizer", name, tuple(OPTIMIZERS))
    try:
        return OPTIMIZERS[name](**kw)
    except TypeError as exc:  # an option this optimizer does not have
        raise TwinloopError(f"optimizer {name!r} takes no option(s) {sorted(kw)} ({exc})") from exc


__all__ = [
    "CEM", "KINDS", "MPPI", "OPTIMIZERS", "RISKS", "BestOfN", "OptState", "Optimizer", "Plan",
    "PlanBasis", "PlanSpec", "PredictiveSampling", "aggregate", "make_optimizer",
]
