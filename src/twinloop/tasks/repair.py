"""A grasp task's repair as a controller part: a candidate source, carried on under a commit
margin once sent (then also a tick hook; see :mod:`twinloop.control.parts`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from twinloop.errors import TwinloopError, number


class RepairSource:
    """Offers a task's repair chunks (``repair.candidates(state, ticks) -> (n, ticks, nu)``, e.g.
    :class:`~twinloop.tasks.deformable.PlaceRepair`) each refined tick, the way a stochastic
    proposer's samples are offered: they join the first batch of any optimizer, rehearsed
    with their own per-tick detail under ``exact_prior``. The baseline never sees them.

    Args:
        repair: an object with ``candidates(state, ticks)``.
    """

    def __init__(self, repair):
        if not callable(getattr(repair, "candidates", None)):
            raise TwinloopError(f"repair {type(repair).__name__} has no candidates(state, ticks) method")
        self.repair = repair

    def offer(self, obs, state, ticks: int, rng=None) -> np.ndarray:
        """``(n, ticks, nu)`` repair chunks from twin ``state``."""
        return np.asarray(self.repair.candidates(state, ticks))


class CommittedRepair(RepairSource):
    """A repair carried through once sent, under a ``commit`` margin (e.g.
    ``RepairConfig.commit``): a candidate source and a tick hook.

    Its chunks are made as long as an episode and, after a tick that sent one, the rest of it
    (shifted a tick) is offered first among the next tick's repairs; while a repair is under
    way the cheapest repair offered is sent unless the refined plan costs less by more than
    ``commit`` times the refined plan's cost (a repair is longer than the horizon: rated over
    its first second it loses to plans that make no progress). The commit ends when the
    repair's chunk is spent (it no longer moves) or a plan beats it by the margin. It needs a
    controller that plans between an observation and its action (the synchronous one).

    Args:
        repair: an object with ``candidates(state, ticks)``.
        commit: the commit margin (a cost fraction >= 0).
    """

    def __init__(self, repair, commit: float):
        super().__init__(repair)
        self.commit = number(commit, "repair commit margin", low=0.0)
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        self._committed: np.ndarray | None = None  # (L, nu) the rest of the repair under way
        self._whole: list = []
        self._under_way = False

    def bind(self, controller) -> None:
        if not getattr(controller, "ticks_in_step", False):
            raise TwinloopError(f"a repair's commit margin ({self.commit}) carries a repair on tick by tick; the "
                                "asynchronous controller plans between ticks: use the synchronous Controller")
        self._max_ticks = controller.task.max_ticks
        self._spec = controller.refiner.spec

    def offer(self, obs, state, ticks: int, rng=None) -> np.ndarray:
        """This tick's repair chunks, as long as an episode: the rest of the repair under way
        first."""
        self._under_way = self._committed is not None
        whole = list(self.repair.candidates(state, max(ticks, self._max_ticks)))
        self._whole = whole if self._committed is None else [self._committed, *whole]
        return np.stack(self._whole) if self._whole else np.empty((0, ticks, 0))

    def decide(self, tick, batch) -> None:
        """The plan sent and its cost under the commit margin, and the rest of the repair sent,
        if one was, kept for the next tick."""
        self._committed = None
        if tick.fallback or tick.result is None:
            return
        rows = batch.of(self)
        offered = tick.result.offered_costs
        costs = np.array([]) if offered is None else offered[rows]
        if not np.isfinite(costs).any():
            return
        res, plans = tick.result, batch.plans[rows]
        j = int(np.nanargmin(np.where(np.isfinite(costs), costs, np.nan)))
        if costs[j] <= res.cost or (self._under_way and costs[j] - res.cost <= self.commit * abs(res.cost)):
            if costs[j] > res.cost:  # kept against a cheaper plan: send the repair's own chunk
                p = plans[j]
                tick.plan = replace(p, knots=np.clip(p.knots, self._spec.low, self._spec.high))
                tick.action, tick.cost = tick.plan.first_action(), float(costs[j])
            rest = np.concatenate([self._whole[j][1:], self._whole[j][-1:]])
            self._committed = rest if np.abs(rest - rest[-1]).max() > 0 else None


def repair_source(repair, commit: float | None = None) -> RepairSource:
    """The candidate source of ``repair``: committing (:class:`CommittedRepair`) with a
    ``commit`` margin (default: the repair's own ``commit`` attribute, if any)."""
    commit = getattr(repair, "commit", None) if commit is None else commit
    return RepairSource(repair) if commit is None else CommittedRepair(repair, commit)
