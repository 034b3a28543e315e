"""Control: the refiner, the controllers (synchronous, asynchronous) and timing.

The controller composes small parts (:mod:`twinloop.control.parts`): a state estimator,
candidate sources and tick hooks.
"""

from twinloop.control.asynchronous import AsyncConfig, AsyncController, PlanCycle
from twinloop.control.controller import Controller, TickInfo, check_samples
from twinloop.control.refiner import Refiner, RefinerConfig, RefineResult, qpos_names
from twinloop.control.timing import check_timestep

__all__ = ["AsyncConfig", "AsyncController", "Controller", "PlanCycle", "RefineResult", "Refiner", "RefinerConfig",
           "TickInfo", "check_samples", "check_timestep", "qpos_names"]
