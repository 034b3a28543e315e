"""The receding-horizon controller around a refiner: ``act(obs) -> action``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from twinloop.control.refiner import Refiner, RefineResult
from twinloop.errors import TwinloopError, as_array, number
from twinloop.plan import Plan


def check_samples(proposer, n: int, label: str) -> None:
    """Refuse ``n > 0`` samples from a ``proposer`` (named ``label`` in the error) that cannot
    draw them (no ``sample(obs, state, n, rng)`` method)."""
    if n and not callable(getattr(proposer, "sample", None)):
        raise TwinloopError(f"proposal_samples={n} needs a stochastic proposer with a sample(obs, state, n, rng) "
                            f"method (distilled, the planar scripts); proposer {label!r} draws none")


@dataclass
class TickInfo:
    """What happened at one control tick."""

    action: np.ndarray
    fallback: bool = False
    reason: str = ""
    cost: float = float("nan")
    prior_cost: float = float("nan")
    iterations: int = 0
    n_unstable: int = 0
    seconds: float = 0.0
    optimizer_info: dict = field(default_factory=dict)
    result: RefineResult | None = field(default=None, repr=False)
    gap: float = float("nan")
    alarm: str = ""
    plan: Plan | None = field(default=None, repr=False)  # what the tick sends: the refined plan, or a fallback's


class Controller:
    """Receding-horizon control around a refiner: ``act(obs) -> action``.

    Each tick: state from the observation, base proposal from the proposer (if any), warm start
    from the last plan shifted one tick, refine, send the first action. If refinement fails
    (every rollout unstable, or an exception) the base proposal's first action is sent
    instead (or the warm plan's, without a proposer) and ``last.fallback`` says why.

    With ``refine=False`` the controller runs the proposer alone (the baseline).

    With ``warm_start=False`` every tick starts from the base proposal (or holding still)
    instead of the last plan shifted, and carries no candidates: its plan is a function of
    the state and that tick's samples only, not of plans never executed (a teacher whose
    labels a learner is to predict from the state).

    With a ``monitor`` (:class:`~twinloop.calib.monitor.GapMonitor`) each tick first scores
    the twin's one-tick prediction against the new observation (``last.gap``); an alarm widens
    the parameter particles, starts a background refit, or falls back to the proposer for the
    rest of the episode, as the monitor is configured, and ``last.alarm`` says why. Particles
    a monitor changed are restored at ``reset``.

    With a ``repair`` (a task's :meth:`~twinloop.tasks.Task.repair_primitive`) each refined
    tick also offers its candidate chunks for the current state, the way a stochastic
    proposer's samples are offered (``proposal_samples``): they join the first batch of any
    optimizer, rehearsed with their own per-tick detail under ``exact_prior``. The baseline
    (``refine=False``) never sees them. A repair with a ``commit`` margin (a float, e.g.
    ``RepairConfig.commit``; ``None``: none) is carried through once sent: its chunks are made
    as long as an episode and, after a tick that sent one, the rest of it (shifted a tick) is
    offered first among the next tick's repairs; while a repair is under way the cheapest
    repair offered is sent unless the refined plan costs less by more than ``commit`` times
    the refined plan's cost (a repair is longer than the horizon: rated over its first second
    it loses to plans that make no progress). The commit ends when the repair's chunk is spent
    (it no longer moves) or a plan beats it by the margin.

    With an actuation delay (``RefinerConfig.actuation_delay``) the controller keeps the
    delay line, the controls it sent that have not reached the actuators yet, and each tick's
    candidates are rolled out behind it (see :meth:`Refiner.refine`).

    With an ``observer`` (a stateful estimate, e.g. a grasp task's
    :class:`~twinloop.tasks.keypoints.KeypointObserver`: ``observer(obs) -> state``,
    ``sent(action)``, ``reset()``) the state comes from it instead of ``task.state_from_obs``;
    it is reset with each episode and told every action sent.
    """

    def __init__(self, refiner: Refiner, proposer=None, refine: bool = True, proposal_samples: int = 0,
                 monitor=None, warm_start: bool = True, repair=None, observer=None):
        if not refine and proposer is None:
            raise TwinloopError("a controller without refinement needs a proposer")
        if not isinstance(refiner, Refiner):
            raise TwinloopError(f"refiner must be a Refiner, got {type(refiner).__name__}")
        if proposer is not None and not callable(getattr(proposer, "propose", None)):
            raise TwinloopError(f"proposer {type(proposer).__name__} has no propose(obs, state) method")
        self.refiner, self.proposer, self.refine_enabled = refiner, proposer, refine
        self.warm_start = bool(warm_start)
        self.proposal_samples = number(proposal_samples, "proposal_samples", low=0, integer=True)
        check_samples(proposer, self.proposal_samples, type(proposer).__name__)
        if repair is not None and not callable(getattr(repair, "candidates", None)):
            raise TwinloopError(f"repair {type(repair).__name__} has no candidates(state, ticks) method")
        self.repair = repair
        if observer is not None and not all(callable(getattr(observer, a, None)) for a in ("__call__", "sent", "reset")):
            raise TwinloopError(f"observer {type(observer).__name__} needs __call__(obs), sent(action) and reset()")
        self.observer = observer
        self.commit = None if repair is None else getattr(repair, "commit", None)
        if self.commit is not None:
            self.commit = number(self.commit, "repair commit margin", low=0.0)
        self._committed: np.ndarray | None = None  # (L, nu) the rest of the repair under way
        self.task = refiner.task
        self.monitor = monitor
        if monitor is not None and monitor.config.action in ("widen", "refit", "adapt") and not len(refiner.twin.param_space):
            raise TwinloopError(f"monitor action {monitor.config.action!r} changes parameter particles, but the "
                                "refiner's twin has no parameter space")
        if monitor is not None and monitor.config.action == "adapt" and not refiner.twin.param_space.on("actuator"):
            raise TwinloopError("monitor action 'adapt' refits the actuators' parameters, but the refiner's twin "
                                f"has none among {refiner.twin.param_space.names}")
        if monitor is not None and monitor.config.action == "fallback" and proposer is None:
            raise TwinloopError("monitor action 'fallback' needs a proposer to fall back to")
        self._warm: Plan | None = None
        self._carry: np.ndarray | None = None
        self._line: np.ndarray | None = None  # (D, nu) delay line; None: the hold action
        self.last: TickInfo | None = None
        self.n_fallbacks = 0
        self._episode_params = refiner.params
        self._gave_up = ""

    def reset(self, seed: int | None = None) -> None:
        self._warm = None
        self._carry = None
        self._committed = None
        if self.observer is not None:
            self.observer.reset()
        self._line = None
        self.last = None
        self.n_fallbacks = 0
        if self.monitor is not None:
            if self.monitor.alarms or self.monitor.refits:  # the particles it changed belong to that episode
                self.refiner.set_params(self._episode_params)
            self.monitor.reset()
        self._episode_params = self.refiner.params
        self._gave_up = ""
        if seed is not None:
            self.refiner.reseed(seed)
        if self.proposer is not None and callable(getattr(self.proposer, "reset", None)):
            self.proposer.reset(seed)

    def stop(self) -> None:
        """End of an episode: release what runs between ticks (nothing, for this controller)."""

    def act(self, obs, info: dict | None = None) -> np.ndarray:
        """The action for observation ``obs`` (``info``, the world's, is not needed here)."""
        state = self.task.state_from_obs(obs) if self.observer is None else self.observer(obs)
        alarm = self._watch(state) if self.monitor is not None else ""
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
        if self.monitor is not None:
            self.last.gap = self.monitor.score
            self.monitor.sent(state, self.last.action)
        if self.observer is not None:
            self.observer.sent(self.last.action)
        return self.last.action

    def _watch(self, state: np.ndarray) -> str:
        """Score the twin's last prediction; act on an alarm. Returns the alarm's reason."""
        m, space = self.monitor, self.refiner.twin.param_space
        fresh = m.refit_ready()
        if fresh is not None:
            self.refiner.set_params(fresh)
        alarm = m.observe(state, self.refiner.params)
        params = self.refiner.params
        x0 = None if params is None else np.atleast_2d(params).mean(axis=0)
        if alarm is None:
            if m.adapt_due():
                m.start_refit(space, x0, space.on("actuator"), m.config.adapt)
            return ""
        if alarm.action == "widen":
            self.refiner.set_params(m.widened(params, space))
        elif alarm.action in ("refit", "adapt"):
            m.start_refit(space, x0)
        elif alarm.action == "fallback":
            self._gave_up = alarm.reason
        return alarm.reason

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

    def plan(self, obs, state: np.ndarray, warm: Plan | None, carry: np.ndarray | None = None,
             in_flight: np.ndarray | None = None) -> tuple[Plan, TickInfo]:
        """Refine from twin ``state`` (estimated from ``obs``, or predicted ahead of it) with
        the proposer's prior, the ``warm`` start, ``carry`` and the delay line ``in_flight``
        (see :meth:`Refiner.refine`);
        returns the plan and what happened. If refinement fails the base proposal (or the
        warm plan) is returned and counted."""
        prior = proposals = detail = None
        # chunks offered beside the prior: the task's repairs first, then the proposer's samples
        under_way = self._committed is not None
        whole = self._repairs(state)
        H = self.refiner.spec.horizon_ticks
        chunks = [w[:H] for w in whole]
        plans = []
        if self.proposer is not None:
            prior = self.refiner.plan_from_actions(self._proposal(obs, state))
            if self.proposal_samples > 0:
                chunks += list(self.proposer.sample(obs, state, self.proposal_samples, self.refiner.rng))
        if chunks:
            plans = [self.refiner.plan_from_actions(c) for c in chunks]
            proposals = np.stack([p.knots for p in plans])
            if any(p.detail is not None for p in plans):
                zero = np.zeros((H, self.task.nu))
                detail = np.stack([zero if p.detail is None else p.detail for p in plans])
        if warm is None:
            # start still: hold the pusher where it is if the task can say where that is
            warm = prior if prior is not None else self.refiner.hold_plan(self.task.hold_action(state))
        try:
            res = self.refiner.refine(state, prior=prior, warm=warm, proposals=proposals, carry=carry,
                                      in_flight=in_flight, proposal_detail=detail)
        except Exception as exc:  # fall back, never crash the robot loop
            self.n_fallbacks += 1
            self._committed = None
            backup = prior if prior is not None else warm
            return backup, TickInfo(action=backup.first_action(), fallback=True, reason=f"{type(exc).__name__}: {exc}",
                                    plan=backup)
        plan, cost = res.plan, res.cost
        if self.commit is not None:
            plan, cost = self._commit(res, whole, plans[: len(whole)], under_way)
        return plan, TickInfo(action=plan.first_action(), cost=cost, prior_cost=res.prior_cost,
                              iterations=res.iterations, n_unstable=res.n_unstable, seconds=res.seconds,
                              optimizer_info=res.optimizer_info, result=res, plan=plan)

    def _repairs(self, state: np.ndarray) -> list:
        """This tick's repair chunks: ``horizon`` ticks long; with a commit margin as long as an
        episode, the rest of the repair under way first."""
        if self.repair is None:
            return []
        H = self.refiner.spec.horizon_ticks
        if self.commit is None:
            return list(self.repair.candidates(state, H))
        whole = list(self.repair.candidates(state, max(H, self.task.max_ticks)))
        return whole if self._committed is None else [self._committed, *whole]

    def _commit(self, res: RefineResult, whole: list, plans: list, under_way: bool) -> tuple[Plan, float]:
        """The plan sent and its cost under a commit margin (see the class docstring; ``whole``:
        the repairs offered, ``plans`` theirs, ``under_way``: a repair was), and the rest of the
        repair sent, if one was, kept for the next tick."""
        costs = np.array([]) if res.offered_costs is None else res.offered_costs[: len(whole)]
        self._committed, plan, cost = None, res.plan, res.cost
        if not np.isfinite(costs).any():
            return plan, cost
        j = int(np.nanargmin(np.where(np.isfinite(costs), costs, np.nan)))
        if costs[j] <= res.cost or (under_way and costs[j] - res.cost <= self.commit * abs(res.cost)):
            if costs[j] > res.cost:  # kept against a cheaper plan: send the repair's own chunk
                p = plans[j]
                plan, cost = replace(p, knots=np.clip(p.knots, self.refiner.spec.low, self.refiner.spec.high)), float(costs[j])
            rest = np.concatenate([whole[j][1:], whole[j][-1:]])
            self._committed = rest if np.abs(rest - rest[-1]).max() > 0 else None
        return plan, cost

