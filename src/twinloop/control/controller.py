"""The receding-horizon controller around a refiner: ``act(obs) -> action``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from twinloop.control.parts import (
    Batch,
    check_estimator,
    check_source,
    is_hook,
    offered_chunks,
)
from twinloop.control.refiner import Refiner, RefineResult
from twinloop.errors import TwinloopError, as_array
from twinloop.plan import Plan


@dataclass
class TickInfo:
    """What happened at one control tick (``iterations``, ``samples`` and ``seconds``: what its
    refine spent; ``samples``: candidates evaluated over all iterations)."""

    action: np.ndarray
    fallback: bool = False
    reason: str = ""
    cost: float = float("nan")
    prior_cost: float = float("nan")
    iterations: int = 0
    samples: int = 0
    n_unstable: int = 0
    seconds: float = 0.0
    optimizer_info: dict = field(default_factory=dict)
    result: RefineResult | None = field(default=None, repr=False)
    gap: float = float("nan")
    alarm: str = ""
    plan: Plan | None = field(default=None, repr=False)  # what the tick sends: the refined plan, or a fallback's
    accept: str = ""  # which plan was sent and why, where an acceptance rule decided (see TrustedAcceptance)


class Controller:
    """Receding-horizon control around a refiner: ``act(obs) -> action``.

    Each tick: state from the observation (the ``estimator``), base proposal from the proposer
    (if any), chunks offered by the candidate ``sources``, warm start from the last plan shifted
    one tick, refine, send the first action; the tick ``hooks`` are called at each stage (see
    :mod:`twinloop.control.parts`). If refinement fails (every rollout unstable, or an
    exception) the base proposal's first action is sent instead (or the warm plan's, without a
    proposer) and ``last.fallback`` says why.

    With ``refine=False`` the controller runs the proposer alone (the baseline; the sources
    and the refined path's hooks are not asked).

    With ``warm_start=False`` every tick starts from the base proposal (or holding still)
    instead of the last plan shifted, and carries no candidates: its plan is a function of
    the state and that tick's samples only, not of plans never executed (a teacher whose
    labels a learner is to predict from the state).

    With an actuation delay (``RefinerConfig.actuation_delay``) the controller keeps the
    delay line, the controls it sent that have not reached the actuators yet, and each tick's
    candidates are rolled out behind it (see :meth:`Refiner.refine`).

    Args:
        refiner: the refiner.
        proposer: the base proposer (``propose(obs, state) -> (H', nu)``), or ``None``.
        refine: refine around the proposer (``False``: the proposer alone).
        estimator: a :class:`~twinloop.control.parts.StateEstimator`; ``None``: the task's
            stateless map (:meth:`Task.state_estimator <twinloop.tasks.Task.state_estimator>`).
            It is reset with each episode and told every action sent.
        sources: :class:`~twinloop.control.parts.CandidateSource` s, offered in this order
            (a source with tick-hook methods is also called as a hook, before ``hooks``).
        hooks: :class:`~twinloop.control.parts.TickHook` s, called in this order.
        warm_start: warm-start each tick from the last plan shifted.
    """

    #: the controller plans each tick between receiving an observation and sending an action
    #: (hooks that carry a decision from one tick to the next need it)
    ticks_in_step = True

    def __init__(self, refiner: Refiner, proposer=None, refine: bool = True, *, estimator=None, sources=(),
                 hooks=(), warm_start: bool = True):
        if not refine and proposer is None:
            raise TwinloopError("a controller without refinement needs a proposer")
        if not isinstance(refiner, Refiner):
            raise TwinloopError(f"refiner must be a Refiner, got {type(refiner).__name__}")
        if proposer is not None and not callable(getattr(proposer, "propose", None)):
            raise TwinloopError(f"proposer {type(proposer).__name__} has no propose(obs, state) method")
        self.refiner, self.proposer, self.refine_enabled = refiner, proposer, refine
        self.task = refiner.task
        self.warm_start = bool(warm_start)
        self.estimator = self.task.state_estimator() if estimator is None else estimator
        check_estimator(self.estimator)
        self.sources = tuple(sources)
        for s in self.sources:
            check_source(s)
        self.hooks = tuple(s for s in self.sources if is_hook(s)) + tuple(hooks)
        for h in self.hooks:
            self._call(h, "bind", self)
        self._warm: Plan | None = None
        self._carry: np.ndarray | None = None
        self._line: np.ndarray | None = None  # (D, nu) delay line; None: the hold action
        self.last: TickInfo | None = None
        self.last_state: np.ndarray | None = None  # the state the last tick estimated
        self.n_fallbacks = 0
        self._gave_up = ""

    @staticmethod
    def _call(part, method: str, *args):
        f = getattr(part, method, None)
        return f(*args) if callable(f) else None

    @property
    def delay_line(self) -> np.ndarray | None:
        """``(D, nu)`` controls sent that have not reached the actuators (``None``: the hold
        action; always ``None`` without an actuation delay)."""
        return self._line

    def fall_back(self, reason: str) -> None:
        """Send the proposer's own actions for the rest of the episode (a hook's alarm)."""
        self._gave_up = reason

    def reset(self, seed: int | None = None) -> None:
        self._warm = None
        self._carry = None
        self.estimator.reset(seed)
        self._line = None
        self.last = None
        self.n_fallbacks = 0
        for part in (*self.sources, *(h for h in self.hooks if h not in self.sources)):
            self._call(part, "reset", seed)
        self._gave_up = ""
        if seed is not None:
            self.refiner.reseed(seed)
        if self.proposer is not None and callable(getattr(self.proposer, "reset", None)):
            self.proposer.reset(seed)

    def stop(self) -> None:
        """End of an episode: release what runs between ticks (nothing, for this controller)."""

    def report(self) -> dict:
        """What the hooks say about the episode (merged; see :meth:`TickHook.report`)."""
        out: dict = {}
        for h in self.hooks:
            out.update(self._call(h, "report") or {})
        return out

    def act(self, obs, info: dict | None = None) -> np.ndarray:
        """The action for observation ``obs``; the world's ``info``, where it has the
        observation's ``time``, sets a timed proposer's clock (its ``set_time``)."""
        state = self.last_state = self.estimator.estimate(obs)
        if info is not None and "time" in info:
            self._call(self.proposer, "set_time", float(info["time"]))
        alarm = ""
        for h in self.hooks:
            alarm = alarm or (self._call(h, "begin", state) or "")
        if self.proposer is not None and (not self.refine_enabled or self._gave_up):
            # the baseline (or a monitor's fallback) sends the proposer's own first action
            chunk = self._proposal(obs, state)
            self.last = TickInfo(action=self.refiner.spec.bound(chunk[0]), alarm=self._gave_up)
        else:
            plan, self.last = self.plan(obs, state, self._warm, self._carry, self._line)
            if self.warm_start:
                self._warm, self._carry = self.carried(plan, self.last)
        if self.refiner.delay_steps:
            self._line = self.refiner.sent(state, self._line, self.last.action)
        self.last.alarm = alarm or self.last.alarm
        for h in self.hooks:
            self._call(h, "sent", state, self.last)
        self.estimator.sent(self.last.action)
        return self.last.action

    def carried(self, plan: Plan, tick: TickInfo, ticks: float = 1.0) -> tuple[Plan, np.ndarray | None]:
        """The warm start and the carried candidates for a plan starting ``ticks`` later."""
        elites = None if tick.result is None else tick.result.elites
        if elites is not None and len(elites):
            S = self.refiner.spec.shift_matrix(self.task.control_period * ticks)
            elites = np.clip(np.einsum("mn,knu->kmu", S, elites), self.refiner.spec.low, self.refiner.spec.high)
        return plan.shifted(ticks), elites

    def _proposal(self, obs, state) -> np.ndarray:
        chunk = as_array(self.proposer.propose(obs, state), "proposer action chunk")
        if chunk.ndim != 2 or chunk.shape[1] != self.task.nu:
            raise TwinloopError(f"proposer returned an action chunk of shape {chunk.shape}, expected (H, {self.task.nu})")
        return chunk

    def offers(self, obs, state: np.ndarray, prior: Plan | None = None) -> Batch:
        """This tick's :class:`~twinloop.control.parts.Batch`: ``prior`` and the chunks each
        source offers from ``state``, as plans (cut at the horizon, detail kept)."""
        batch = Batch(prior=prior)
        H, rng = self.refiner.spec.horizon_ticks, self.refiner.rng
        for source in self.sources:
            chunks = offered_chunks(source, obs, state, H, rng, self.task.nu)
            batch.rows[id(source)] = slice(len(batch.chunks), len(batch.chunks) + len(chunks))
            batch.chunks += chunks
        batch.plans = [self.refiner.plan_from_actions(c) for c in batch.chunks]
        return batch

    def plan(self, obs, state: np.ndarray, warm: Plan | None, carry: np.ndarray | None = None,
             in_flight: np.ndarray | None = None, deadline: float | None = None) -> tuple[Plan, TickInfo]:
        """Refine from twin ``state`` (estimated from ``obs``, or predicted ahead of it) with
        the proposer's prior, the sources' offers, the ``warm`` start, ``carry``, the delay
        line ``in_flight`` and the ``deadline`` (s; ``None``: the refiner's own; see
        :meth:`Refiner.refine`); the hooks then decide what is sent.
        Returns the plan and what happened. If refinement fails the base proposal (or the
        warm plan) is returned and counted."""
        prior = None
        if self.proposer is not None:
            prior = self.refiner.plan_from_actions(self._proposal(obs, state))
        batch = self.offers(obs, state, prior)
        if warm is None:
            # start still: hold the pusher where it is if the task can say where that is
            warm = prior if prior is not None else self.refiner.hold_plan(self.task.hold_action(state))
        try:
            res = self.refiner.refine(state, prior=prior, warm=warm, proposals=batch.knots(), carry=carry,
                                      in_flight=in_flight, proposal_detail=batch.detail(), deadline=deadline)
        except Exception as exc:  # fall back, never crash the robot loop
            self.n_fallbacks += 1
            backup = prior if prior is not None else warm
            tick = TickInfo(action=backup.first_action(), fallback=True, reason=f"{type(exc).__name__}: {exc}",
                            plan=backup)
        else:
            tick = TickInfo(action=res.plan.first_action(), cost=res.cost, prior_cost=res.prior_cost,
                            iterations=res.iterations, samples=res.n_samples, n_unstable=res.n_unstable, seconds=res.seconds,
                            optimizer_info=res.optimizer_info, result=res, plan=res.plan)
        for h in self.hooks:
            self._call(h, "decide", tick, batch)
        return tick.plan, tick
