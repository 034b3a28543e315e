"""Plans (spline knots) and the optimizers that select among them."""

from __future__ import annotations

from dataclasses import fields

from twinloop.errors import TwinloopError, choose
from twinloop.plan.base import Feedback, Optimizer, OptState
from twinloop.plan.best_of_n import BestOfN
from twinloop.plan.cem import CEM
from twinloop.plan.llm import LLMConfig, LLMGuided
from twinloop.plan.mppi import MPPI
from twinloop.plan.predictive import PredictiveSampling
from twinloop.plan.risk import RISKS, aggregate
from twinloop.plan.spline import KINDS, Plan, PlanBasis, PlanSpec

OPTIMIZERS = {"mppi": MPPI, "cem": CEM, "predictive": PredictiveSampling, "best_of_n": BestOfN}
#: every name ``make_optimizer`` takes: the sampling optimizers, and each guided by a language model
OPTIMIZER_NAMES = (*OPTIMIZERS, "llm", *(f"llm+{k}" for k in OPTIMIZERS))


def make_optimizer(name: str, llm: LLMConfig | None = None, **kw) -> Optimizer:
    """An optimizer by name: ``mppi`` | ``cem`` | ``predictive`` | ``best_of_n``, or
    ``llm+<one of them>`` (``llm`` alone is ``llm+mppi``): that optimizer, its batches joined by
    a language model's plans (:mod:`twinloop.plan.llm`), configured by ``llm``.

    ``kw`` configures the sampling optimizer (``noise=None``: its own default); ``llm`` is
    ignored by the others.
    """
    choose("optimizer", name, OPTIMIZER_NAMES)
    if kw.get("noise", 0) is None:
        del kw["noise"]
    head, _, tail = name.partition("+")
    base = (tail or "mppi") if head == "llm" else name
    known = {f.name for f in fields(OPTIMIZERS[base])} - {"name"}
    unknown = sorted(set(kw) - known)
    if unknown:
        raise TwinloopError(f"optimizer {base!r} has no setting(s) {unknown}; settings: {', '.join(sorted(known))}")
    if head == "llm":
        return LLMGuided(OPTIMIZERS[base](**kw), llm)
    return OPTIMIZERS[name](**kw)


__all__ = [
    "CEM", "KINDS", "MPPI", "OPTIMIZERS", "OPTIMIZER_NAMES", "RISKS", "BestOfN", "Feedback", "LLMConfig",
    "LLMGuided", "OptState", "Optimizer", "Plan", "PlanBasis", "PlanSpec", "PredictiveSampling",
    "aggregate", "make_optimizer",
]
