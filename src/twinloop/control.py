"""The refiner (twin + task + optimizer + proposer) and the receding-horizon controller.

One refine iteration::

    candidates = clip([mean, prior, suggested, optimizer.sample(K - 2 - M)])   (K, N, nu) knots
    rollouts   = twin.rollout(state, basis.controls(candidates), params)
    J          = risk(task.cost(rollouts), over parameter particles)   (K,)
    state      = optimizer.update(finite candidates, finite J)

Everything an optimizer would otherwise repeat (clipping, keeping the incumbent and the base
proposal in the batch, dropping non-finite rollouts, best-so-far, the deadline) is here. So is
the batch itself: knots an optimizer suggests (``OptState.suggested``, e.g. a language
model's plans, M of them) join the next batch in place of as many samples, and when another
iteration follows the optimizer is told what the batch did (``OptState.feedback``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import mujoco
import numpy as np

from twinloop.errors import RefinementFailed, TwinloopError, as_array, choose, number
from twinloop.plan import RISKS, Feedback, Optimizer, Plan, PlanBasis, PlanSpec, aggregate
from twinloop.plan.spline import KINDS
from twinloop.tasks.base import Task
from twinloop.twin.base import Rollouts, Twin, check_twin_scene

#: physics steps one refine iteration may simulate (K x horizon steps), about 4 GB of states
_MAX_STEPS = 5e7


@dataclass(frozen=True)
class RefinerConfig:
    """Knobs of the refiner.

    Attributes:
        num_samples: K candidates per iteration (including the incumbent and the prior).
        horizon: planning horizon (s); rounded to whole control ticks.
        n_knots: spline knots per plan.
        spline: ``zero`` | ``linear`` | ``cubic``.
        iterations: optimizer iterations per ``refine`` call.
        deadline: seconds per ``refine`` call; ``None`` runs all iterations.
        risk: aggregation over parameter particles: ``mean`` | ``worst`` | ``cvar``.
        cvar_alpha: tail fraction for ``cvar``.
        seed: seed of the sampling stream.
    """

    num_samples: int = 64
    horizon: float = 1.0
    n_knots: int = 4
    spline: str = "cubic"
    iterations: int = 1
    deadline: float | None = None
    risk: str = "mean"
    cvar_alpha: float = 0.25
    seed: int = 0

    def __post_init__(self):
        checked = {
            "num_samples": number(self.num_samples, "num_samples", low=2, integer=True),
            "horizon": number(self.horizon, "horizon (s)", low=0, low_open=True),
            "n_knots": number(self.n_knots, "n_knots", low=1, integer=True),
            "iterations": number(self.iterations, "iterations", low=1, integer=True),
            "deadline": None if self.deadline is None else number(self.deadline, "deadline (s)", low=0, low_open=True),
            "cvar_alpha": number(self.cvar_alpha, "cvar_alpha", low=0, high=1, low_open=True),
            "seed": number(self.seed, "seed", low=0, integer=True),
        }
        for k, v in checked.items():
            object.__setattr__(self, k, v)
        choose("spline", self.spline, KINDS)
        choose("risk", self.risk, RISKS)


@dataclass
class RefineResult:
    """Outcome of one ``refine`` call.

    Attributes:
        plan: the best plan found (lowest aggregated cost seen in any iteration).
        cost: its cost.
        prior_cost: cost of the base proposal (``nan`` without one).
        iterations: iterations completed before the deadline.
        n_rollouts: trajectories simulated (P x K per iteration).
        n_unstable: of those, how many went non-finite or unstable.
        seconds: wall time.
        rollouts: the last iteration's rollouts (for plotting ghost traces), if kept.
        costs: the last iteration's ``(K,)`` aggregated costs.
        optimizer_info: what the optimizer reported (``OptState.info``).
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
    optimizer_info: dict = field(default_factory=dict)


class Refiner:
    """Refines a plan by rolling out candidates in a twin and re-selecting by cost.

    Args:
        task: cost, bounds, control period.
        twin: a :class:`~twinloop.twin.base.Twin` of ``task.model``.
        optimizer: the selection mechanism.
        config: :class:`RefinerConfig`.
        params: ``None`` (nominal twin) or ``(P, n)`` parameter particles to evaluate every
            candidate under (domain randomization; costs aggregated by ``config.risk``).
        keep_rollouts: keep the last iteration's rollouts in the result (for videos).
        extra_costs: functions ``f(rollouts) -> (K,)`` added to the aggregated cost (e.g. an
            information-gain bonus across parameter particles). Non-finite values are ignored.
    """

    def __init__(self, task: Task, twin: Twin, optimizer: Optimizer, config: RefinerConfig | None = None,
                 params: np.ndarray | None = None, keep_rollouts: bool = False,
                 extra_costs: Sequence[Callable[[Rollouts], np.ndarray]] = ()):
        self.task, self.twin, self.optimizer = task, twin, optimizer
        self.config = config or RefinerConfig()
        if not isinstance(self.config, RefinerConfig):
            raise TwinloopError(f"config must be a RefinerConfig, got {type(self.config).__name__}")
        for what, obj, hook in (("optimizer", optimizer, "init"), ("optimizer", optimizer, "sample"),
                                ("optimizer", optimizer, "update"), ("twin", twin, "rollout"), ("task", task, "cost")):
            if not callable(getattr(obj, hook, None)):
                raise TwinloopError(f"{what} {type(obj).__name__} has no {hook}() method")
        check_twin_scene(twin, task.model, task.name)  # equal nu alone let a block-push refiner run on push-t
        n = task.control_period / twin.dt
        if abs(n - round(n)) > 1e-6 * max(n, 1.0) or round(n) < 1:
            raise TwinloopError(f"the twin's timestep {twin.dt:g} s does not divide task {task.name!r}'s control "
                                f"period {task.control_period:g} s; the twin would tick at {round(n) * twin.dt:g} s")
        substeps = int(round(n))
        ticks = max(1, int(round(self.config.horizon / task.control_period)))
        if ticks * substeps * self.config.num_samples > _MAX_STEPS:
            raise TwinloopError(f"horizon {self.config.horizon:g} s x num_samples {self.config.num_samples} is "
                                f"{ticks * substeps * self.config.num_samples:.3g} physics steps per iteration "
                                f"(at most {_MAX_STEPS:.0e})")
        self.spec = PlanSpec(ticks, task.control_period, substeps, min(self.config.n_knots, ticks),
                             self.config.spline, task.action_low, task.action_high)
        self.basis = PlanBasis(self.spec)
        self.params = None if params is None else twin.param_space.check(np.atleast_2d(params), "params")
        self.keep_rollouts = keep_rollouts
        self.extra_costs = tuple(extra_costs)
        for f in self.extra_costs:
            if not callable(f):
                raise TwinloopError(f"extra_costs must be functions f(rollouts) -> (K,), got {f!r}")
        self.rng = np.random.default_rng(self.config.seed)
        self._description = task.description()
        self._state_names = qpos_names(task.model)

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def set_params(self, params: np.ndarray | None) -> None:
        """Change the parameter particles (e.g. after calibration)."""
        self.params = None if params is None else self.twin.param_space.check(np.atleast_2d(params), "params")

    def plan_from_actions(self, actions) -> Plan:
        """A plan from a ``(H', nu)`` per-tick action chunk (held past its end)."""
        return Plan(self.basis.knots_from_ticks(actions), self.spec)

    def hold_plan(self, action) -> Plan:
        return Plan.constant(self.spec, action)

    def evaluate(self, state: np.ndarray, knots: np.ndarray):
        """Roll out ``(K, N, nu)`` knots; returns ``(rollouts, (K,) aggregated costs)``."""
        r = self.twin.rollout(state, self.basis.controls(knots), self.params)
        costs = self.task.cost(r)
        agg = aggregate(costs, r.ok, self.config.risk, self.config.cvar_alpha)
        for f in self.extra_costs:
            extra = np.asarray(f(r), dtype=float)
            if extra.shape != agg.shape:
                raise TwinloopError(f"extra cost {f!r} returned shape {extra.shape}, expected {agg.shape}")
            agg = agg + np.where(np.isfinite(extra), extra, 0.0)
        return r, agg

    def refine(self, state, prior: Plan | None = None, warm: Plan | None = None,
               proposals: np.ndarray | None = None) -> RefineResult:
        """Best plan from ``state`` within the iteration budget and the deadline.

        Args:
            state: ``(nstate,)`` twin state.
            prior: base proposal (e.g. a policy's action chunk as a plan), or ``None``.
            warm: last tick's plan shifted by one tick; defaults to ``prior`` or holding the
                middle of the action range.
            proposals: ``(M, N, nu)`` knots sampled from a stochastic proposer (best-of-N).

        Raises:
            RefinementFailed: if no candidate in any iteration had a finite cost.
        """
        t0 = time.perf_counter()
        cfg = self.config
        s = as_array(state, "state", (self.task.nstate,))
        lo, hi = self.spec.low, self.spec.high
        if warm is None:
            warm = prior if prior is not None else self.hold_plan((lo + hi) / 2)
        for name, p in (("prior", prior), ("warm", warm)):
            if p is not None and not isinstance(p, Plan):
                raise TwinloopError(f"{name} must be a Plan (see Refiner.plan_from_actions), got {type(p).__name__}")
            if p is not None and p.knots.shape != (self.spec.n_knots, self.spec.nu):
                raise TwinloopError(f"{name} plan has knots {p.knots.shape}, expected {(self.spec.n_knots, self.spec.nu)}")
        pk = None if prior is None else prior.knots
        ostate = self.optimizer.init(warm.knots, pk, lo, hi)
        if proposals is not None:
            ostate = ostate.with_(proposals=np.clip(as_array(proposals, "proposals", (None, *warm.knots.shape)), lo, hi))
        fixed = [ostate.mean] + ([pk] if pk is not None else [])
        best_k, best_c, prior_c = None, np.inf, np.nan
        n_roll = n_bad = it = 0
        last_r = last_c = None
        iter_time = 0.0
        while it < cfg.iterations:
            if cfg.deadline is not None and it > 0 and (time.perf_counter() - t0) + iter_time > cfg.deadline:
                break
            ti = time.perf_counter()
            incumbent = [ostate.mean] + fixed[1:] if it else fixed
            head = np.stack(incumbent)
            if ostate.suggested is not None:  # evaluated once, in place of as many samples
                head = np.concatenate([head, ostate.suggested[: cfg.num_samples - len(head)]])
                ostate = ostate.with_(suggested=None)
            n_new = cfg.num_samples - len(head)
            sampled = self.optimizer.sample(ostate, self.rng, n_new) if n_new > 0 else np.empty((0, *warm.knots.shape))
            cand = np.clip(np.concatenate([head, sampled]), lo, hi)
            r, c = self.evaluate(s, cand)
            n_roll += r.ok.size
            n_bad += r.n_unstable
            if pk is not None and it == 0:
                prior_c = float(c[1])
            finite = np.isfinite(c)
            if finite.any():
                j = int(np.argmin(np.where(finite, c, np.inf)))
                if c[j] < best_c:
                    best_c, best_k = float(c[j]), cand[j].copy()
                fb = self._feedback(r, cand, c) if it + 1 < cfg.iterations else None
                ostate = self.optimizer.update(ostate.with_(feedback=fb), cand[finite], c[finite])
            last_r, last_c = r, c
            it += 1
            iter_time = time.perf_counter() - ti
        if best_k is None:
            raise RefinementFailed(f"all {n_roll} rollouts were non-finite or unstable; no plan to select")
        return RefineResult(
            plan=Plan(best_k, self.spec), cost=best_c, prior_cost=prior_c, iterations=it,
            n_rollouts=n_roll, n_unstable=n_bad, seconds=time.perf_counter() - t0,
            rollouts=last_r if self.keep_rollouts else None, costs=last_c,
            optimizer_info=dict(ostate.info),
        )

    def _feedback(self, r: Rollouts, cand: np.ndarray, costs: np.ndarray) -> Feedback:
        """What the batch did, for an optimizer that reasons over rollouts (see ``Feedback``)."""
        ticks = np.arange(0, r.horizon_steps + 1, self.spec.substeps)
        return Feedback(
            description=self._description, spec=self.spec, candidates=cand, costs=costs,
            unstable=~r.ok.all(axis=0), times=ticks * r.dt, states=r.qpos[0][:, ticks],
            state_names=self._state_names,
            cost_terms=lambda: {k: v.mean(axis=0) for k, v in self.task.rollout_terms(r).items()},
            failure=self.task.failure,
        )


def qpos_names(model: mujoco.MjModel) -> tuple[str, ...]:
    """``(nq,)`` names of a model's position coordinates: the joint's name, indexed for the
    7 of a free joint and the 4 of a ball joint."""
    width = {int(mujoco.mjtJoint.mjJNT_FREE): 7, int(mujoco.mjtJoint.mjJNT_BALL): 4}
    names: list[str] = []
    for j in range(model.njnt):
        name = model.joint(j).name or f"joint{j}"
        n = width.get(int(model.jnt_type[j]), 1)
        names += [name] if n == 1 else [f"{name}[{i}]" for i in range(n)]
    return tuple(names)


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


class Controller:
    """Receding-horizon control around a refiner: ``act(obs) -> action``.

    Each tick: state from the observation, base proposal from the proposer (if any), warm start
    from the last plan shifted one tick, refine, send the first action. If refinement fails
    (every rollout unstable, or an exception) the base proposal's first action is sent
    instead (or the warm plan's, without a proposer) and ``last.fallback`` says why.

    With ``refine=False`` the controller runs the proposer alone (the baseline).

    With a ``monitor`` (:class:`~twinloop.calib.monitor.GapMonitor`) each tick first scores
    the twin's one-tick prediction against the new observation (``last.gap``); an alarm widens
    the parameter particles, starts a background refit, or falls back to the proposer for the
    rest of the episode, as the monitor is configured, and ``last.alarm`` says why. Particles
    a monitor changed are restored at ``reset``.
    """

    def __init__(self, refiner: Refiner, proposer=None, refine: bool = True, proposal_samples: int = 0,
                 monitor=None):
        if not refine and proposer is None:
            raise TwinloopError("a controller without refinement needs a proposer")
        if not isinstance(refiner, Refiner):
            raise TwinloopError(f"refiner must be a Refiner, got {type(refiner).__name__}")
        if proposer is not None and not callable(getattr(proposer, "propose", None)):
            raise TwinloopError(f"proposer {type(proposer).__name__} has no propose(obs, state) method")
        self.refiner, self.proposer, self.refine_enabled = refiner, proposer, refine
        self.proposal_samples = number(proposal_samples, "proposal_samples", low=0, integer=True)
        self.task = refiner.task
        self.monitor = monitor
        if monitor is not None and monitor.config.action in ("widen", "refit") and not len(refiner.twin.param_space):
            raise TwinloopError(f"monitor action {monitor.config.action!r} changes parameter particles, but the "
                                "refiner's twin has no parameter space")
        if monitor is not None and monitor.config.action == "fallback" and proposer is None:
            raise TwinloopError("monitor action 'fallback' needs a proposer to fall back to")
        self._warm: Plan | None = None
        self.last: TickInfo | None = None
        self.n_fallbacks = 0
        self._episode_params = refiner.params
        self._gave_up = ""

    def reset(self, seed: int | None = None) -> None:
        self._warm = None
        self.last = None
        self.n_fallbacks = 0
        if self.monitor is not None:
            if self.monitor.alarms:  # the particles the monitor changed belong to that episode
                self.refiner.set_params(self._episode_params)
            self.monitor.reset()
        self._episode_params = self.refiner.params
        self._gave_up = ""
        if seed is not None:
            self.refiner.reseed(seed)
        if self.proposer is not None and callable(getattr(self.proposer, "reset", None)):
            self.proposer.reset(seed)

    def act(self, obs) -> np.ndarray:
        state = self.task.state_from_obs(obs)
        alarm = self._watch(state) if self.monitor is not None else ""
        action = self._act(obs, state)
        self.last.alarm = alarm or self.last.alarm
        if self.monitor is not None:
            self.last.gap = self.monitor.score
            self.monitor.sent(state, action)
        return action

    def _watch(self, state: np.ndarray) -> str:
        """Score the twin's last prediction; act on an alarm. Returns the alarm's reason."""
        m, space = self.monitor, self.refiner.twin.param_space
        fresh = m.refit_ready()
        if fresh is not None:
            self.refiner.set_params(fresh)
        alarm = m.observe(state, self.refiner.params)
        if alarm is None:
            return ""
        params = self.refiner.params
        if alarm.action == "widen":
            self.refiner.set_params(m.widened(params, space))
        elif alarm.action == "refit":
            m.start_refit(space, None if params is None else np.atleast_2d(params).mean(axis=0))
        elif alarm.action == "fallback":
            self._gave_up = alarm.reason
        return alarm.reason

    def _act(self, obs, state: np.ndarray) -> np.ndarray:
        prior = None
        proposals = None
        if self.proposer is not None:
            chunk = as_array(self.proposer.propose(obs, state), "proposer action chunk")
            if chunk.ndim != 2 or chunk.shape[1] != self.task.nu:
                raise TwinloopError(f"proposer returned an action chunk of shape {chunk.shape}, expected (H, {self.task.nu})")
            if not self.refine_enabled or self._gave_up:
                # the baseline sends the proposer's own first action, not a spline fit of it
                self.last = TickInfo(action=np.clip(chunk[0], self.task.action_low, self.task.action_high),
                                     alarm=self._gave_up)
                return self.last.action
            prior = self.refiner.plan_from_actions(chunk)
            if self.refine_enabled and self.proposal_samples > 0 and hasattr(self.proposer, "sample"):
                chunks = self.proposer.sample(obs, state, self.proposal_samples, self.refiner.rng)
                proposals = np.stack([self.refiner.plan_from_actions(c).knots for c in chunks])
        warm = self._warm
        if warm is None:
            # start still: hold the pusher where it is if the task can say where that is
            warm = prior if prior is not None else self.refiner.hold_plan(self.task.hold_action(state))
        try:
            res = self.refiner.refine(state, prior=prior, warm=warm, proposals=proposals)
        except Exception as exc:  # fall back, never crash the robot loop
            self.n_fallbacks += 1
            backup = prior if prior is not None else warm
            self._warm = backup.shifted()
            self.last = TickInfo(action=backup.first_action(), fallback=True, reason=f"{type(exc).__name__}: {exc}")
            return self.last.action
        self._warm = res.plan.shifted()
        self.last = TickInfo(action=res.plan.first_action(), cost=res.cost, prior_cost=res.prior_cost,
                             iterations=res.iterations, n_unstable=res.n_unstable, seconds=res.seconds,
                             optimizer_info=res.optimizer_info, result=res)
        return self.last.action
