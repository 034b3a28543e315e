"""The refiner (twin + task + optimizer + proposer) and the receding-horizon controller.

One refine iteration::

    candidates = clip([mean, prior, carried, suggested, optimizer.sample(K - 2 - M)])   (K, N, nu) knots
    rollouts   = twin.rollout(state, basis.controls(candidates), params)
    J          = risk(task.cost(rollouts), over parameter particles)   (K,)
    state      = optimizer.update(finite candidates, finite J)

Everything an optimizer would otherwise repeat (clipping, keeping the incumbent and the base
proposal in the batch, dropping non-finite rollouts, best-so-far, the deadline) is here. So is
the batch itself: knots an optimizer suggests (``OptState.suggested``, e.g. a language
model's plans, M of them) join the next batch in place of as many samples, and when another
iteration follows the optimizer is told what the batch did (``OptState.feedback``).


Simulating less for the same decision (what a real-time loop asks for):

- a coarser twin (``make_twin(..., timestep=)``; :func:`check_timestep` tests that it ranks
  candidates as the fine one does and stays stable);
- ``prune``: roll every candidate to a fraction of the horizon, score that stretch, and
  continue only the best ``prune_keep`` of them (the incumbent and the prior always); the
  rest are dropped (cost ``inf``);
- ``carry``: the ``M`` lowest-cost candidates of the last tick, shifted one tick, join the
  batch (the controller passes them back as ``carry``), so good plans found once are not
  left to chance again.

``RefineResult.n_steps`` counts the physics steps simulated (the speed study's unit).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import mujoco
import numpy as np

from twinloop import threads
from twinloop.errors import RefinementFailed, TwinloopError, as_array, choose, number
from twinloop.modifiers import through_delay_line
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
        prune: fraction of the horizon after which the worst candidates stop (0: never).
        prune_keep: fraction of the candidates that continue past ``prune``.
        carry: last tick's best candidates carried into this tick's batch.
        exact_prior: rehearse and send a proposer's action chunk exactly: a plan made from it
            keeps what its knots cannot express as per-tick ``detail`` (a grasp closing between
            two ticks; see :class:`~twinloop.plan.Plan`). Off: the chunk's least-squares knots,
            a smoothed copy of it.
        prior_margin: trust in the base proposal: the refined plan replaces the prior only
            where its cost is lower by more than this fraction of the prior's, ``J < (1 -
            margin) |J_prior|`` (0: any improvement the twin predicts; a twin whose errors are
            known should not win on small predicted gains).
        actuation_delay: the robot's known actuation delay (s; rounded to twin steps, ``D``):
            an action sent now reaches the actuators ``D`` steps later. Every candidate's
            rollout then applies the controls still in the delay line (sent before, held as
            the world holds them) for its first ``D`` steps and its own controls ``D`` steps
            late, the way the world will execute them. 0: the twin applies a candidate at once.
        binary_actions: treat the task's binary actions (:attr:`Task.binary_actions
            <twinloop.tasks.Task.binary_actions>`: a pinch gripper's grasp) as open/closed
            commands, snapped at the middle of their range in every action rehearsed and sent
            (:meth:`~twinloop.plan.PlanSpec.bound`), the base proposal's too, also where it is
            sent alone (``Controller(refine=False)``): a policy's soft grasp of 0.7 is sent
            closed. Off: the actions are continuous, as the task's actuator takes them.
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
    prune: float = 0.0
    prune_keep: float = 0.5
    carry: int = 0
    exact_prior: bool = False
    prior_margin: float = 0.0
    actuation_delay: float = 0.0
    binary_actions: bool = False

    def __post_init__(self):
        checked = {
            "num_samples": number(self.num_samples, "num_samples", low=2, integer=True),
            "horizon": number(self.horizon, "horizon (s)", low=0, low_open=True),
            "n_knots": number(self.n_knots, "n_knots", low=1, integer=True),
            "iterations": number(self.iterations, "iterations", low=1, integer=True),
            "deadline": None if self.deadline is None else number(self.deadline, "deadline (s)", low=0, low_open=True),
            "cvar_alpha": number(self.cvar_alpha, "cvar_alpha", low=0, high=1, low_open=True),
            "seed": number(self.seed, "seed", low=0, integer=True),
            "prior_margin": number(self.prior_margin, "prior_margin", low=0, high=1, high_open=True),
            "actuation_delay": number(self.actuation_delay, "actuation_delay (s)", low=0),
        }
        for k, v in checked.items():
            object.__setattr__(self, k, v)
        choose("spline", self.spline, KINDS)
        choose("risk", self.risk, RISKS)
        if not 0 <= self.prune < 1:
            raise TwinloopError(f"prune must be in [0, 1), got {self.prune}")
        if not 0 < self.prune_keep <= 1:
            raise TwinloopError(f"prune_keep must be in (0, 1], got {self.prune_keep}")
        if not 0 <= self.carry <= self.num_samples - 2:
            raise TwinloopError(f"carry must be in [0, num_samples - 2], got {self.carry}")


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
        n_steps: physics steps simulated (all particles, candidates and iterations).
        elites: ``(M, N, nu)`` knots of the last iteration's ``config.carry`` best candidates.
        optimizer_info: what the optimizer reported (``OptState.info``).
        offered_costs: ``(M,)`` costs of the ``proposals`` as rehearsed in the first batch
            (``nan`` for those that did not fit in it); ``None`` without proposals.
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
        if self.config.binary_actions and not task.binary_actions:
            raise TwinloopError(f"binary_actions=True: task {task.name!r} declares no binary actions "
                                "(Task.binary_actions); its actions are continuous")
        self.spec = PlanSpec(ticks, task.control_period, substeps, min(self.config.n_knots, ticks),
                             self.config.spline, task.action_low, task.action_high,
                             task.binary_actions if self.config.binary_actions else ())
        self.basis = PlanBasis(self.spec)
        #: the actuation delay in twin steps (``config.actuation_delay`` rounded)
        self.delay_steps = int(round(self.config.actuation_delay / twin.dt))
        if self.delay_steps >= ticks * substeps:
            raise TwinloopError(f"actuation_delay {self.config.actuation_delay:g} s is not shorter than the horizon "
                                f"{ticks * task.control_period:g} s: no candidate would act within it")
        self.params = None if params is None else twin.param_space.check(np.atleast_2d(params), "params")
        # prune at a tick boundary strictly inside the horizon
        self.prune_step = int(round(self.config.prune * ticks)) * substeps if self.config.prune else 0
        if self.prune_step >= ticks * substeps:
            self.prune_step = 0
        if self.prune_step and (task.model.na or (self.params is not None and len(self.params) > 1)):
            raise TwinloopError("prune needs a twin without actuator activations and at most one parameter particle")
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
        """A plan from a ``(H', nu)`` per-tick action chunk (held past its end): its
        least-squares knots, and with ``config.exact_prior`` the chunk's detail they cannot
        express, so that the plan sends the chunk exactly (see :class:`~twinloop.plan.Plan`)."""
        plan = self.basis.plan_from_ticks(actions)
        return plan if self.config.exact_prior else Plan(plan.knots, self.spec)

    def hold_plan(self, action) -> Plan:
        return Plan.constant(self.spec, action)

    def in_flight(self, state: np.ndarray, line=None) -> np.ndarray:
        """``(D, nu)`` controls per twin step in the actuation delay line, oldest first
        (``D = delay_steps``): ``line`` checked, or for ``None`` the task's hold action at
        ``state`` (an episode's start, where a world fills its delay line with it)."""
        if line is None:
            return np.repeat(self.task.hold_action(state)[None], self.delay_steps, axis=0)
        return as_array(line, "in_flight (delay line)", (self.delay_steps, self.task.nu))

    def sent(self, state: np.ndarray, line, action) -> np.ndarray:
        """The delay line after ``action`` was sent for one control tick (see :meth:`in_flight`)."""
        held = np.repeat(np.asarray(action, dtype=float)[None], self.spec.substeps, axis=0)
        return np.concatenate([self.in_flight(state, line), held])[len(held):]

    def evaluate(self, state: np.ndarray, knots: np.ndarray, keep: int = 0, detail: np.ndarray | None = None,
                 in_flight: np.ndarray | None = None):
        """Roll out ``(K, N, nu)`` knots (each plus the ``(H, nu)`` per-tick ``detail``), behind
        the ``in_flight`` delay line (see :meth:`in_flight`; only with an actuation delay); returns
        ``(rollouts, (K,) aggregated costs)``. With ``config.prune`` the candidates dropped at
        the prune point (never the first ``keep``) hold their state from there and cost ``inf``."""
        return self._evaluate(state, knots, keep, detail, in_flight)[:2]

    def _evaluate(self, state: np.ndarray, knots: np.ndarray, keep: int = 0, detail: np.ndarray | None = None,
                  in_flight: np.ndarray | None = None):
        """:meth:`evaluate`, and the physics steps it simulated."""
        ctrl = self.basis.controls(knots, detail)
        if self.delay_steps:  # what the actuators will receive: the line's controls, then ours late
            ctrl = through_delay_line(ctrl, self.in_flight(state, in_flight))
        if not self.prune_step:
            r = self.twin.rollout(state, ctrl, self.params)
            return r, self.score(r), r.ok.size * ctrl.shape[1]
        split, (K, T, _) = self.prune_step, ctrl.shape
        head = self.twin.rollout(state, ctrl[:, :split], self.params)
        partial = self.score(head)
        n_keep = max(keep, int(np.ceil(self.config.prune_keep * K)))
        kept = np.zeros(K, bool)
        kept[:keep] = True
        for i in np.argsort(partial, kind="stable"):
            if kept.sum() >= n_keep:
                break
            kept[i] = True
        idx = np.flatnonzero(kept & np.isfinite(partial) | (np.arange(K) < keep))
        starts = np.concatenate([head.qpos[0, idx, -1], head.qvel[0, idx, -1]], axis=1)
        tail = self.twin.rollout_many(starts, ctrl[idx, split:], self.params)

        def join(a, b):
            out = np.concatenate([a, np.repeat(a[:, :, -1:], T - split, axis=2)], axis=2)
            out[:, idx, split + 1:] = b[:, :, 1:]
            return out

        ok = head.ok.copy()
        ok[:, idx] &= tail.ok
        r = Rollouts(join(head.qpos, tail.qpos), join(head.qvel, tail.qvel),
                     join(head.sensordata, tail.sensordata), ctrl, ok, head.dt)
        c = self.score(r)
        dropped = np.ones(K, bool)
        dropped[idx] = False
        c[dropped] = np.inf
        return r, c, head.ok.size * split + tail.ok.size * (T - split)

    def score(self, r: Rollouts) -> np.ndarray:
        """``(K,)`` cost of rollouts: the task's, aggregated over particles, plus extra costs."""
        agg = aggregate(self.task.cost(r), r.ok, self.config.risk, self.config.cvar_alpha)
        for f in self.extra_costs:
            extra = np.asarray(f(r), dtype=float)
            if extra.shape != agg.shape:
                raise TwinloopError(f"extra cost {f!r} returned shape {extra.shape}, expected {agg.shape}")
            agg = agg + np.where(np.isfinite(extra), extra, 0.0)
        return agg

    def refine(self, state, prior: Plan | None = None, warm: Plan | None = None,
               proposals: np.ndarray | None = None, carry: np.ndarray | None = None,
               in_flight: np.ndarray | None = None, proposal_detail: np.ndarray | None = None) -> RefineResult:
        """Best plan from ``state`` within the iteration budget and the deadline.

        A plan's per-tick ``detail`` (what its knots cannot express: a grasp closing between two
        ticks) travels with it: the prior is rehearsed, and if it wins sent, exactly as
        proposed; the warm plan and the samples drawn around it carry the warm plan's detail
        (on the first tick, when the warm start is the prior, the prior's steps); the returned
        plan carries its own.

        Args:
            state: ``(nstate,)`` twin state.
            prior: base proposal (e.g. a policy's action chunk as a plan), or ``None``.
            warm: last tick's plan shifted by one tick; defaults to ``prior`` or holding the
                middle of the action range.
            proposals: ``(M, N, nu)`` knots sampled from a stochastic proposer: they join the
                first iteration's batch (after the incumbent and the prior, before ``carry``) for
                every optimizer, and best-of-N perturbs around them.
            carry: ``(M, N, nu)`` knots carried from the last tick (its ``elites``, shifted);
                they join the first iteration's batch.
            in_flight: with ``config.actuation_delay``, the ``(D, nu)`` controls still in the
                delay line (see :meth:`in_flight`); ``None``: the hold action at ``state``.
            proposal_detail: ``(M, H, nu)`` per-tick detail of the proposals (their chunks'
                under ``config.exact_prior``, see :meth:`plan_from_actions`), so each is
                rehearsed as proposed; ``None``: none.

        Raises:
            RefinementFailed: if no candidate in any iteration had a finite cost.
        """
        t0 = time.perf_counter()
        cfg = self.config
        s = as_array(state, "state", (self.task.nstate,))
        lo, hi = self.spec.low, self.spec.high
        line = self.in_flight(s, in_flight) if self.delay_steps else None
        if warm is None:
            warm = prior if prior is not None else self.hold_plan((lo + hi) / 2)
        for name, p in (("prior", prior), ("warm", warm)):
            if p is not None and not isinstance(p, Plan):
                raise TwinloopError(f"{name} must be a Plan (see Refiner.plan_from_actions), got {type(p).__name__}")
            if p is not None and p.knots.shape != (self.spec.n_knots, self.spec.nu):
                raise TwinloopError(f"{name} plan has knots {p.knots.shape}, expected {(self.spec.n_knots, self.spec.nu)}")
            if p is not None:  # named here: deeper down a NaN knot is only "ctrl contains NaN"
                as_array(p.knots, f"{name} plan knots")
                if p.detail is not None:
                    as_array(p.detail, f"{name} plan detail")
            if p is not None and p.detail is not None and p.detail.shape != (self.spec.horizon_ticks, self.spec.nu):
                raise TwinloopError(f"{name} plan has detail {p.detail.shape}, expected "
                                    f"{(self.spec.horizon_ticks, self.spec.nu)}")
        pk = None if prior is None else prior.knots
        ostate = self.optimizer.init(warm.knots, pk, lo, hi)
        offered, offered_d = [], None  # a stochastic proposer's samples, in the first batch
        if proposals is not None:
            props = np.clip(as_array(proposals, "proposals", (None, *warm.knots.shape)), lo, hi)
            ostate = ostate.with_(proposals=props)
            offered = list(props)
            if proposal_detail is not None:
                offered_d = as_array(proposal_detail, "proposal_detail", (len(props), self.spec.horizon_ticks, self.spec.nu))
        details = self._details(warm, prior, offered_d is not None)
        fixed = [ostate.mean] + ([pk] if pk is not None else [])
        carried = [] if carry is None else list(np.clip(as_array(carry, "carry", (None, *warm.knots.shape)), lo, hi))
        best_k, best_c, prior_c = None, np.inf, np.nan
        offered_c = np.full(len(offered), np.nan) if proposals is not None else None
        prior_k = prior_d = None  # the prior as rehearsed (row 1 of the first batch)
        n_roll = n_bad = it = n_steps = 0
        last_r = last_c = None
        iter_time = 0.0
        while it < cfg.iterations:
            if cfg.deadline is not None and it > 0 and (time.perf_counter() - t0) + iter_time > cfg.deadline:
                break
            ti = time.perf_counter()
            incumbent = [ostate.mean] + fixed[1:] if it else fixed
            extra = [] if it else (offered + carried)[: max(cfg.num_samples - len(incumbent), 0)]
            head = np.stack(incumbent + extra)
            if ostate.suggested is not None:  # evaluated once, in place of as many samples
                head = np.concatenate([head, ostate.suggested[: cfg.num_samples - len(head)]])
                ostate = ostate.with_(suggested=None)
            n_new = cfg.num_samples - len(head)
            sampled = self.optimizer.sample(ostate, self.rng, n_new) if n_new > 0 else np.empty((0, *warm.knots.shape))
            cand = np.clip(np.concatenate([head, sampled]), lo, hi)
            detail = None
            if details is not None:  # the warm plan's for every candidate, the prior's for it (row 1)
                detail = np.repeat(details[:1], len(cand), axis=0)
                if prior is not None:
                    detail[1] = details[1]
                if offered_d is not None and it == 0:
                    n_off = min(len(offered_d), len(cand) - len(incumbent))
                    detail[len(incumbent) : len(incumbent) + n_off] = offered_d[:n_off]
            r, c, steps = self._evaluate(s, cand, keep=len(incumbent), detail=detail, in_flight=line)
            n_steps += steps
            n_roll += r.ok.size
            n_bad += r.n_unstable
            if offered and it == 0:
                n_off = min(len(offered), len(extra))
                offered_c[:n_off] = c[len(incumbent) : len(incumbent) + n_off]
            if pk is not None and it == 0:
                prior_c, prior_k = float(c[1]), cand[1].copy()
                prior_d = None if detail is None else detail[1]
            finite = np.isfinite(c)
            if finite.any():
                j = int(np.argmin(np.where(finite, c, np.inf)))
                if c[j] < best_c:
                    best_c, best_k = float(c[j]), cand[j].copy()
                    best_d = None if detail is None else detail[j]
                fb = self._feedback(r, cand, c) if it + 1 < cfg.iterations else None
                ostate = self.optimizer.update(ostate.with_(feedback=fb), cand[finite], c[finite])
            last_r, last_c = r, c
            it += 1
            iter_time = time.perf_counter() - ti
        if best_k is None:
            raise RefinementFailed(f"all {n_roll} rollouts were non-finite or unstable; no plan to select")
        if cfg.prior_margin and np.isfinite(prior_c) and not best_c < prior_c - cfg.prior_margin * abs(prior_c):
            best_k, best_c, best_d = prior_k, prior_c, prior_d
        elites = None
        if cfg.carry:
            order = np.argsort(np.where(np.isfinite(last_c), last_c, np.inf), kind="stable")
            elites = cand[order[: cfg.carry]][np.isfinite(last_c[order[: cfg.carry]])]
        return RefineResult(
            plan=Plan(best_k, self.spec, best_d), cost=best_c, prior_cost=prior_c, iterations=it,
            n_rollouts=n_roll, n_unstable=n_bad, seconds=time.perf_counter() - t0,
            rollouts=last_r if self.keep_rollouts else None, costs=last_c, n_steps=n_steps, elites=elites,
            optimizer_info=dict(ostate.info), offered_costs=offered_c,
        )

    def _details(self, warm: Plan, prior: Plan | None, offered: bool = False) -> np.ndarray | None:
        """``(1 or 2, H, nu)``: the warm plan's per-tick detail (which its samples share), then
        the prior's; ``None`` when neither has any and no ``offered`` proposal does."""
        if warm.detail is None and (prior is None or prior.detail is None) and not offered:
            return None
        zero = np.zeros((self.spec.horizon_ticks, self.spec.nu))
        own = zero if warm.detail is None else warm.detail
        return np.stack([own] + ([] if prior is None else [zero if prior.detail is None else prior.detail]))

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


@dataclass(frozen=True)
class AsyncConfig:
    """Knobs of the asynchronous controller.

    Attributes:
        latency_comp: plan from the state the twin predicts for the time the plan will start
            to apply (from the last observation and the actions in flight), not from the last
            observation itself.
        budget: wall seconds a planning cycle takes at least (``None``: as fast as the refine
            goes). A cycle that finishes early waits out the rest, which stands in for a
            slower planner or a larger model in benchmarks; keep ``RefinerConfig.deadline``
            below it.

    A known actuation delay is the refiner's (``RefinerConfig.actuation_delay``), as for the
    synchronous controller.
    """

    latency_comp: bool = True
    budget: float | None = None

    def __post_init__(self):
        if self.budget is not None and not (np.isfinite(self.budget) and self.budget > 0):
            raise TwinloopError(f"budget must be > 0 s or None, got {self.budget!r}")


@dataclass
class PlanCycle:
    """One planning cycle of :class:`AsyncController` (world times in s, wall in s).

    Attributes:
        obs_time: world time of the observation planned from.
        start: world time the plan starts at (``nan``: when it arrives, no compensation).
        seconds: wall time of the cycle (refine, prediction and any budget wait).
        lead: predicted ahead (s of world time; 0 without compensation).
    """

    obs_time: float
    start: float
    seconds: float
    lead: float


class AsyncController(Controller):
    """Planning in its own thread, actuation at the world's rate.

    For a world that stamps observations with time (a :class:`~twinloop.worlds.realtime.
    RealtimeWorld`, whose ``info`` has ``time``, ``tick``, ``period`` and ``rate``). The
    actuation side, :meth:`act`, returns at once: it hands the observation to the planner and
    sends, for the tick the action will apply at (``time + period``), the action the newest
    plan holds for that time. The planner thread loops: take the newest observation, refine,
    publish a plan stamped with the world time it starts at.

    Latency compensation (``config.latency_comp``): a cycle that starts from an observation
    of world time ``t`` will publish after about ``c`` seconds (the slowest of the last few
    cycles) and its first action applies one tick after that, at ``t_a = t + c + period``
    rounded up to a tick. The cycle predicts the state at ``t_a`` by rolling the twin from the
    observed state through the actions in flight (those already sent, then the current plan's
    for the ticks before ``t_a``), and plans from it; the plan starts at ``t_a``. Without
    compensation the plan is computed from the observed state and starts when it arrives.
    With a known actuation delay ``D`` (the refiner's ``actuation_delay``) an action applied
    at ``t`` acts over ``t + D`` on: the prediction to ``t_a`` runs through the actions applied
    over ``[t - D, t_a - D)``, and those applied over ``[t_a - D, t_a)`` are the delay line the
    refiner rolls every candidate out behind (as the synchronous controller's is; without
    compensation, the line at ``t``), so each candidate is rehearsed as the world will
    execute it.

    Args:
        refiner: the refiner (its twin predicts the state ahead).
        proposer: the base proposer (asked with the predicted state).
        config: :class:`AsyncConfig`.
    """

    def __init__(self, refiner: Refiner, proposer=None, config: AsyncConfig | None = None,
                 proposal_samples: int = 0, repair=None):
        super().__init__(refiner, proposer, refine=True, proposal_samples=proposal_samples, repair=repair)
        if self.commit is not None:
            raise TwinloopError(f"a repair's commit margin ({self.commit}) carries a repair on tick by tick; the "
                                "asynchronous controller plans between ticks: use the synchronous Controller")
        self.config = config or AsyncConfig()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._reset_state()

    def _reset_state(self) -> None:
        self._running = False
        self._mail = None            # (obs, time, tick) newest observation
        self._current = None         # (plan, start time, TickInfo, (H, nu) actions) in use
        self._pending = None         # the newest plan, until its start time comes
        self._sent: dict[int, np.ndarray] = {}   # apply tick -> action sent for it
        self._period = self._speed = None
        self.cycles: list[PlanCycle] = []

    def reset(self, seed: int | None = None) -> None:
        self.stop()
        super().reset(seed)
        self._reset_state()

    def stop(self) -> None:
        """Stop the planner thread (end of episode)."""
        with self._cv:
            self._running = False
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30.0)
            self._thread = None

    def _stop_thread(self) -> None:  # what twinloop.threads calls at exit
        self.stop()

    def act(self, obs, info: dict | None = None) -> np.ndarray:
        if info is None or not {"time", "tick", "period", "rate"} <= set(info):
            raise TwinloopError("AsyncController needs a real-time world: info with time, tick, period and rate "
                                "(wrap the world in RealtimeWorld)")
        if self._error is not None:
            raise TwinloopError(f"the planner thread failed: {type(self._error).__name__}: {self._error}") from self._error
        t, k = float(info["time"]), int(info["tick"])
        with self._cv:
            self._period, self._speed = float(info["period"]), float(info["period"]) * float(info["rate"])
            self._mail = (np.array(obs, dtype=float), t, k)
            self._cv.notify_all()
            if self._thread is None:
                self._running = True
                self._thread = threading.Thread(target=self._plan_loop, name="twinloop-planner", daemon=True)
                self._thread.start()
                threads.track(self)
            action, tick = self._scheduled(t + self._period, obs)
            self._sent[k + 1] = action
            self._sent.pop(k - 1000, None)
        self.last = tick
        return action

    def stats(self) -> dict:
        """Planning cycles: count, median/max wall seconds, how many overran the control
        period (the plan was not renewed on time), median lead predicted."""
        sec = np.array([c.seconds for c in self.cycles])
        lead = np.array([c.lead for c in self.cycles])
        p = self.task.control_period
        return {"cycles": len(sec), "cycle_median": float(np.median(sec)) if len(sec) else float("nan"),
                "cycle_max": float(sec.max()) if len(sec) else float("nan"),
                "overruns": int((sec > p).sum()), "lead_median": float(np.median(lead)) if len(lead) else float("nan")}

    # -- actuation side (holds the lock) -----------------------------------------------------

    def _scheduled(self, t_apply: float, obs) -> tuple[np.ndarray, TickInfo]:
        """The action for world time ``t_apply`` from the newest plan that has started."""
        if self._pending is not None:
            plan, start, tick, acts = self._pending
            if np.isnan(start):  # no compensation: the plan starts when it arrives
                start = t_apply
            if start <= t_apply + 1e-9:
                self._current, self._pending = (plan, start, tick, acts), None
        if self._current is None:
            hold = self.task.hold_action(self.task.state_from_obs(obs))
            return hold, TickInfo(action=hold, fallback=True, reason="no plan yet")
        _, start, tick, acts = self._current
        return self._action_at(acts, start, t_apply), tick

    def _action_at(self, acts: np.ndarray, start: float, t: float) -> np.ndarray:
        """The action ``acts (H, nu)`` of a plan starting at ``start`` holds at time ``t``."""
        i = int(np.floor((t - start) / self.task.control_period + 1e-6))
        return acts[min(max(i, 0), len(acts) - 1)]

    def _in_flight(self, t0: float, t1: float, hold: np.ndarray) -> np.ndarray:
        """``(n, nu)`` controls per twin step over world time ``[t0, t1)``: the actions sent
        for those ticks, else what the current plan will send, else the previous control
        (``hold`` before the first tick a sent action can reach, tick 1)."""
        ticks = int(round((t1 - t0) / self._period))
        per_tick = int(round(self._period / self.refiner.twin.dt))
        first = int(round(t0 / self._period))
        out = np.empty((ticks, self.task.nu))
        last = hold
        with self._cv:
            for i, j in enumerate(range(first, first + ticks)):
                a = self._sent.get(j)
                if a is None and self._current is not None and j >= 1:
                    a = self._action_at(self._current[3], self._current[1], j * self._period)
                out[i] = last = last if a is None else a
        return np.repeat(out, per_tick, axis=0)

    def predict(self, state: np.ndarray, t_obs: float, start: float) -> tuple[np.ndarray, np.ndarray | None, float]:
        """``(state at world time start, the delay line then, lead in s)``: the twin rolled from
        ``state`` (observed at ``t_obs``) through the actions in flight to ``start``. With the
        refiner's actuation delay of ``D`` twin steps of ``dt`` the actuators act over
        ``[t_obs, start)`` on the actions applied over ``[t_obs - D dt, start - D dt)``; the
        ``(D, nu)`` controls applied over ``[start - D dt, start)`` are the delay line
        (``None`` without a delay)."""
        dt, D = self.refiner.twin.dt, self.refiner.delay_steps
        ahead = int(round((start - t_obs) / dt))
        back = np.ceil(D * dt / self._period - 1e-6) * self._period  # whole world ticks spanning the line
        ctrl = self._in_flight(t_obs - back, start, self.task.hold_action(state))
        ctrl = ctrl[max(len(ctrl) - ahead - D, 0):]
        line = ctrl[ahead:] if D else None
        if ahead:
            params = None if self.refiner.params is None else self.refiner.params[:1]
            r = self.refiner.twin.rollout(state, ctrl[:ahead], params)
            if r.ok[0, 0]:
                m = self.task.model
                state = np.concatenate([r.qpos[0, 0, -1], r.qvel[0, 0, -1], state[m.nq + m.nv:]])
        return state, line, start - t_obs

    # -- planner thread ----------------------------------------------------------------------

    def _plan_loop(self) -> None:
        planned = -1
        try:
            while True:
                with self._cv:
                    self._cv.wait_for(lambda last=planned: not self._running or (self._mail is not None and self._mail[2] > last))
                    if not self._running:
                        return
                    obs, t_obs, planned = self._mail
                    period, speed = self._period, self._speed
                    prev = self._pending or self._current
                self._cycle(obs, t_obs, period, speed, prev)
        except BaseException as exc:  # the actuation side re-raises it
            self._error = exc

    def _cycle(self, obs, t_obs: float, period: float, speed: float, prev) -> None:
        c0 = time.perf_counter()
        cfg = self.config
        state = self.task.state_from_obs(obs)
        start, lead, line = float("nan"), 0.0, None
        if cfg.latency_comp:
            recent = [c.seconds for c in self.cycles[-5:]]
            c = max(recent) if recent else (cfg.budget or self.task.control_period)
            # the first tick boundary after the plan is published, plus one tick of pipeline
            start = (np.ceil((t_obs + c * speed) / period - 1e-6) + 1) * period
            state, line, lead = self.predict(state, t_obs, start)
        elif self.refiner.delay_steps:  # the plan starts when it arrives: the line observed is the best known
            _, line, _ = self.predict(state, t_obs, t_obs)
        warm = carry = None
        if prev is not None:
            p_plan, p_start, p_tick, _ = prev
            ref = t_obs if np.isnan(start) else start
            shift = 1.0 if np.isnan(p_start) else (ref - p_start) / self.task.control_period
            warm, carry = self.carried(p_plan, p_tick, max(shift, 0.0))
        plan, tick = self.plan(obs, state, warm, carry, line)
        if cfg.budget is not None:
            wait = cfg.budget - (time.perf_counter() - c0)
            if wait > 0:
                time.sleep(wait)
        acts = plan.actions()
        with self._cv:
            self._pending = (plan, start, tick, acts)
        self.cycles.append(PlanCycle(obs_time=t_obs, start=start, seconds=time.perf_counter() - c0, lead=lead))


def check_timestep(task: Task, twin: Twin, reference: Twin, *, n_states: int = 8, num_samples: int = 32,
                   horizon: float | None = None, seed: int = 0, min_rank_corr: float = 0.8,
                   strict: bool = True) -> dict:
    """Whether a twin with a coarser timestep decides as the reference twin does.

    From ``n_states`` states an episode of the task's scripted proposer visits in the nominal
    scene (a random tick in ``[0, 30)`` of a seeded episode; the start state without a
    proposer), ``num_samples`` candidate plans (MPPI samples around the proposer's plan or
    around holding) are rolled out in both twins. The coarse twin passes when none of its
    rollouts goes unstable where the reference's does not, and the median over states of
    Spearman's rank correlation between the two twins' costs is at least ``min_rank_corr``
    (a sampling planner only needs the ranking).

    Returns:
        ``{"timestep", "reference_timestep", "rank_corr_median", "rank_corr_min",
        "unstable", "reference_unstable", "ok"}``.

    Raises:
        TwinloopError: if it does not pass and ``strict``.
    """
    from scipy.stats import spearmanr

    from twinloop.plan import make_optimizer
    from twinloop.worlds.base import SimWorld

    cfg = RefinerConfig(num_samples=num_samples, horizon=horizon or task.horizon, seed=seed)
    fine, coarse = (Refiner(task, t, make_optimizer("mppi"), cfg) for t in (reference, twin))
    proposer = task.default_proposer()
    world = SimWorld(task)
    rng = np.random.default_rng([seed, 11])
    corr, bad, bad_ref = [], 0, 0
    for i in range(n_states):
        obs = world.reset(seed * 1000 + i)
        if proposer is not None:
            proposer.reset(i)
            for _ in range(int(rng.integers(0, 30))):
                obs, _ = world.step(np.clip(proposer.propose(obs, task.state_from_obs(obs))[0], task.action_low, task.action_high))
        state = task.state_from_obs(obs)
        mean = (fine.plan_from_actions(proposer.propose(obs, state)) if proposer is not None
                else fine.hold_plan(task.hold_action(state))).knots
        opt = make_optimizer("mppi")
        knots = np.clip(opt.sample(opt.init(mean, None, fine.spec.low, fine.spec.high), rng, num_samples),
                        fine.spec.low, fine.spec.high)
        rf, cf = fine.evaluate(state, knots)
        rc, cc = coarse.evaluate(state, knots)
        bad += int((rc.ok.all(axis=0) < rf.ok.all(axis=0)).sum())
        bad_ref += int((~rf.ok.all(axis=0)).sum())
        both = np.isfinite(cf) & np.isfinite(cc)
        if both.sum() > 2:
            corr.append(float(spearmanr(cf[both], cc[both]).statistic))
    med = float(np.median(corr)) if corr else float("nan")
    out = {"timestep": float(twin.dt), "reference_timestep": float(reference.dt), "rank_corr_median": med,
           "rank_corr_min": float(np.min(corr)) if corr else float("nan"), "unstable": bad,
           "reference_unstable": bad_ref, "ok": bool(bad == 0 and med >= min_rank_corr)}
    if strict and not out["ok"]:
        raise TwinloopError(f"a twin timestep of {twin.dt:g} s does not decide as {reference.dt:g} s does for task "
                            f"{task.name!r}: median rank correlation {med:.2f} (need >= {min_rank_corr}), "
                            f"{bad} rollouts unstable only at the coarse step")
    return out
