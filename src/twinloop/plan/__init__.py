"""Plans (spline knots) and the optimizers that select among them."""

from __future__ import annotations

from dataclasses import fields

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
    known = {f.name for f in fields(OPTIMIZERS[name])} - {"name"}
    unknown = sorted(set(kw) - known)
    if unknown:
        raise TwinloopError(f"optimizer {name!r} has no setting(s) {unknown}; settings: {', '.join(sorted(known))}")
    return OPTIMIZERS[name](**kw)


__all__ = [
    "CEM", "KINDS", "MPPI", "OPTIMIZERS", "RISKS", "BestOfN", "OptState", "Optimizer", "Plan",
    "PlanBasis", "PlanSpec", "PredictiveSampling", "aggregate", "make_optimizer",
]
