"""Control: the refiner, the controllers (synchronous, asynchronous) and timing.

The controller composes small parts (:mod:`twinloop.control.parts`): a state estimator,
candidate sources and tick hooks (:mod:`twinloop.control.hooks`). Under a deadline the refiner
is anytime in samples and iterations (:mod:`twinloop.control.anytime`).
"""

from twinloop.control.anytime import cycle_deadline, evaluate_in_chunks
from twinloop.control.asynchronous import AsyncConfig, AsyncController, PlanCycle
from twinloop.control.controller import Controller, TickInfo
from twinloop.control.feedback import qpos_names
from twinloop.control.hooks import ACCEPT_RULES, GapWatch, TrustedAcceptance
from twinloop.control.parts import (
    Batch,
    CandidateSource,
    ProposerSamples,
    StateEstimator,
    TickHook,
    check_samples,
)
from twinloop.control.refiner import Refiner, RefinerConfig, RefineResult
from twinloop.control.timing import check_timestep

__all__ = ["ACCEPT_RULES", "AsyncConfig", "AsyncController", "Batch", "CandidateSource", "Controller", "GapWatch",
           "PlanCycle", "ProposerSamples", "RefineResult", "Refiner", "RefinerConfig", "StateEstimator", "TickHook",
           "TickInfo", "TrustedAcceptance", "check_samples", "check_timestep", "cycle_deadline", "evaluate_in_chunks",
           "qpos_names"]
