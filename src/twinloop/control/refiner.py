"""The refiner: twin + task + optimizer (+ the proposer's prior).

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

Under a deadline the call is anytime in samples as well as iterations: each batch is rolled
out in ``chunks`` and cut where the next chunk would end past the deadline
(:mod:`twinloop.control.anytime`); ``RefineResult`` says what was spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from twinloop.control.anytime import chunk_size, evaluate_in_chunks
from twinloop.control.feedback import batch_feedback, qpos_names
from twinloop.control.prune import pruned_rollout
from twinloop.control.result import RefineResult, RefineSearch
from twinloop.errors import RefinementFailed, TwinloopError, as_array, choose, number
from twinloop.modifiers import through_delay_line
from twinloop.plan import RISKS, Optimizer, Plan, PlanBasis, PlanSpec, aggregate
from twinloop.plan.spline import KINDS
from twinloop.tasks.base import Task
from twinloop.tasks.checks import check_horizon
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
        deadline: seconds per ``refine`` call; ``None`` runs all iterations and samples. Under
            a deadline a batch is rolled out in ``chunks`` and the call stops before a chunk
            (or an iteration) that would end past it, selecting among the candidates evaluated;
            the first chunk (the incumbent and the base proposal first) always runs. In real
            time the asynchronous controller derives a deadline from the world's period when
            this is ``None`` (:class:`~twinloop.control.AsyncConfig`).
        chunks: chunks a batch is rolled out in under a deadline (1: whole batches, as the
            deadline stops only between iterations); without a deadline, one batch. Not with
            ``prune`` (which ranks the whole batch at its prune point).
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
        accept: when the synchronous controller sends the refined plan rather than the base
            proposal (default ``robust``: refinement that does no harm where the twin is wrong;
            without a base proposal, or in real time, the refined plan is always sent):
            ``always`` (the refiner's choice) | ``trusted`` (only where the refined
            plan's predicted advantage over the base proposal exceeds ``accept_factor`` times
            the twin's recent cost error, measured tick by tick on the world; see
            :class:`~twinloop.control.hooks.TrustedAcceptance`) | ``robust`` (only where the
            refined plan beats the base proposal under ``accept_quantile`` of ``accept_particles``
            parameter particles drawn from the twin's prior; see
            :class:`~twinloop.control.hooks.RobustAcceptance`). Each tick then records which
            plan was sent and why (``TickInfo.accept``). It applies to the comparison's refined
            controller (``twinloop run``, ``demo``); the controllers of ``evaluate``, ``distill``
            and ``rsr`` send the refiner's choice. The rule is a tick hook: a
            :class:`~twinloop.control.Controller` built by hand applies it only when given
            ``hooks=acceptance_hooks(config)`` (:func:`~twinloop.control.hooks.acceptance_hooks`), or
            when built by :func:`twinloop.run.build.refined_controller` as ``twinloop run`` builds
            its own; otherwise it sends the refiner's choice whatever this field says.
        accept_factor: ``trusted``: how many twin cost errors the advantage must exceed.
        accept_particles: ``robust``: parameter particles (the nominal and prior draws).
        accept_quantile: ``robust``: the fraction of them under which the refined plan must win.
        accept_under: ``robust``: ``prior`` (those particles, also with a calibration) |
            ``calibration`` (a run's calibration's samples, estimate first; measured worse on
            quadruped-walk, 16/20 against 19/20: docs/settings.md).
    """

    num_samples: int = 64
    horizon: float = 1.0
    n_knots: int = 4
    spline: str = "cubic"
    iterations: int = 1
    deadline: float | None = None
    chunks: int = 8
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
    accept: str = "robust"
    accept_factor: float = 1.0
    accept_particles: int = 8
    accept_quantile: float = 0.75
    accept_under: str = "prior"

    def __post_init__(self):
        checked = {
            "num_samples": number(self.num_samples, "num_samples", low=2, integer=True),
            "horizon": number(self.horizon, "horizon (s)", low=0, low_open=True),
            "n_knots": number(self.n_knots, "n_knots", low=1, integer=True),
            "iterations": number(self.iterations, "iterations", low=1, integer=True),
            "deadline": None if self.deadline is None else number(self.deadline, "deadline (s)", low=0, low_open=True),
            "chunks": number(self.chunks, "chunks", low=1, integer=True),
            "cvar_alpha": number(self.cvar_alpha, "cvar_alpha", low=0, high=1, low_open=True),
            "seed": number(self.seed, "seed", low=0, integer=True),
            "prior_margin": number(self.prior_margin, "prior_margin", low=0, high=1, high_open=True),
            "actuation_delay": number(self.actuation_delay, "actuation_delay (s)", low=0),
            "accept_factor": number(self.accept_factor, "accept_factor", low=0),
            "accept_particles": number(self.accept_particles, "accept_particles", low=2, integer=True),
            "accept_quantile": number(self.accept_quantile, "accept_quantile", low=0, high=1, low_open=True),
        }
        for k, v in checked.items():
            object.__setattr__(self, k, v)
        choose("spline", self.spline, KINDS)
        choose("risk", self.risk, RISKS)
        choose("accept", self.accept, ("always", "trusted", "robust"))
        choose("accept_under", self.accept_under, ("prior", "calibration"))
        if not 0 <= self.prune < 1:
            raise TwinloopError(f"prune must be in [0, 1), got {self.prune}")
        if not 0 < self.prune_keep <= 1:
            raise TwinloopError(f"prune_keep must be in (0, 1], got {self.prune_keep}")
        if not 0 <= self.carry <= self.num_samples - 2:
            raise TwinloopError(f"carry must be in [0, num_samples - 2], got {self.carry}")


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
        clock: seconds now, for the deadline (default ``time.perf_counter``).
    """

    def __init__(self, task: Task, twin: Twin, optimizer: Optimizer, config: RefinerConfig | None = None,
                 params: np.ndarray | None = None, keep_rollouts: bool = False,
                 extra_costs: Sequence[Callable[[Rollouts], np.ndarray]] = (),
                 clock: Callable[[], float] = time.perf_counter):
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
        ticks = max(1, int(round(check_horizon(task, self.config.horizon) / task.control_period)))
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
        self.clock = clock
        self._per_candidate = 0.0  # the last chunk's seconds per candidate: the next call's first prediction
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
        n_keep = max(keep, int(np.ceil(self.config.prune_keep * len(ctrl))))
        return pruned_rollout(self.twin, self.score, state, ctrl, self.params, self.prune_step, keep, n_keep)

    def plan_costs(self, state: np.ndarray, plans: Sequence[Plan], params, in_flight: np.ndarray | None = None) -> np.ndarray:
        """``(P, M)`` task cost of ``M`` plans (each with its detail) from ``state`` under each of
        ``P`` parameter particles (``(P, n)`` values or a list of P models of the scene; ``inf``
        where a rollout went unstable), behind the ``in_flight`` delay line as :meth:`evaluate`
        rolls them out, in one batched rollout."""
        ctrl = np.concatenate([self.basis.controls(p.knots[None], p.detail) for p in plans])
        if self.delay_steps:
            ctrl = through_delay_line(ctrl, self.in_flight(state, in_flight))
        r = self.twin.rollout(state, ctrl, params)
        c = np.asarray(self.task.cost(r), dtype=float)
        return np.where(r.ok & np.isfinite(c), c, np.inf)

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
               in_flight: np.ndarray | None = None, proposal_detail: np.ndarray | None = None,
               deadline: float | None = None) -> RefineResult:
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
            deadline: seconds for this call, in place of ``config.deadline`` (``None``: that).

        Raises:
            RefinementFailed: if no candidate in any iteration had a finite cost.
        """
        t0, cfg = self.clock(), self.config
        deadline = cfg.deadline if deadline is None else number(deadline, "deadline (s)", low=0)
        end = None if deadline is None else t0 + deadline
        s = as_array(state, "state", (self.task.nstate,))
        line = self.in_flight(s, in_flight) if self.delay_steps else None
        lo, hi = self.spec.low, self.spec.high
        warm = warm if warm is not None else prior if prior is not None else self.hold_plan((lo + hi) / 2)
        self._check_plan("prior", prior), self._check_plan("warm", warm)
        pk = None if prior is None else prior.knots
        ostate = self.optimizer.init(warm.knots, pk, lo, hi)
        ostate, offered, offered_d, carried = self._first_extras(ostate, proposals, proposal_detail, carry)
        details = self._details(warm, prior, offered_d is not None)
        fixed = [ostate.mean] + ([pk] if pk is not None else [])
        found = RefineSearch(offered_c=np.full(len(offered), np.nan) if proposals is not None else None)
        it, cut = 0, False
        while it < cfg.iterations and not cut and not (it and self._out_of_time(end)):
            incumbent = [ostate.mean] + fixed[1:] if it else fixed
            extra = [] if it else (offered + carried)[: max(cfg.num_samples - len(incumbent), 0)]
            cand, ostate = self._batch(ostate, incumbent + extra)
            detail = self._batch_detail(details, len(cand), prior is not None, None if it else offered_d, len(incumbent))
            ev, cand, detail = self._evaluate_until(s, cand, len(incumbent), detail, line, end)
            cut = ev.n < cfg.num_samples
            found.record(ev.rollouts, ev.costs, ev.steps, cand, detail)
            if it == 0:
                found.first_batch(ev.costs, cand, detail, len(incumbent), len(extra) if offered else 0, pk is not None)
            ostate = self._update(ostate, ev.rollouts, cand, ev.costs, more=it + 1 < cfg.iterations and not cut)
            it += 1
        return self._result(found, ostate, it, t0, deadline, cut or it < cfg.iterations)

    def _evaluate_until(self, s, cand: np.ndarray, keep: int, detail, line, end: float | None):
        """:meth:`_evaluate` of the ``(K, N, nu)`` candidates in chunks until the next would end
        past ``end`` (one batch without a deadline or with ``prune``; see
        :func:`~twinloop.control.anytime.evaluate_in_chunks`): ``(evaluated, their candidates,
        their detail)``."""
        size = len(cand) if end is None or self.prune_step else chunk_size(len(cand), self.config.chunks)

        def part(a: int, b: int):
            return self._evaluate(s, cand[a:b], keep=keep, detail=None if detail is None else detail[a:b],
                                  in_flight=line)

        ev = evaluate_in_chunks(part, len(cand), size, end, self.clock, self._per_candidate)
        self._per_candidate = ev.chunk_seconds
        return ev, cand[: ev.n], None if detail is None else detail[: ev.n]

    def _out_of_time(self, end: float | None) -> bool:
        """Whether another iteration's first chunk would end past ``end`` (predicted from the
        last chunk's time per candidate)."""
        size = self.config.num_samples if self.prune_step else chunk_size(self.config.num_samples, self.config.chunks)
        return end is not None and self.clock() + size * self._per_candidate > end

    def _update(self, ostate, r: Rollouts, cand: np.ndarray, c: np.ndarray, more: bool):
        """The optimizer's state after a batch: updated on its finite candidates (told what the
        batch did when ``more`` iterations follow); unchanged where none was finite."""
        finite = np.isfinite(c)
        if not finite.any():
            return ostate
        fb = batch_feedback(self.task, self.spec, r, cand, c, self._description, self._state_names) if more else None
        return self.optimizer.update(ostate.with_(feedback=fb), cand[finite], c[finite])

    def _check_plan(self, name: str, p: Plan | None) -> None:
        """A clear error where the ``prior`` or ``warm`` plan does not fit this refiner."""
        if p is None:
            return
        if not isinstance(p, Plan):
            raise TwinloopError(f"{name} must be a Plan (see Refiner.plan_from_actions), got {type(p).__name__}")
        if p.knots.shape != (self.spec.n_knots, self.spec.nu):
            raise TwinloopError(f"{name} plan has knots {p.knots.shape}, expected {(self.spec.n_knots, self.spec.nu)}")
        as_array(p.knots, f"{name} plan knots")  # named here: deeper down a NaN knot is only "ctrl contains NaN"
        if p.detail is not None:
            as_array(p.detail, f"{name} plan detail")
            if p.detail.shape != (self.spec.horizon_ticks, self.spec.nu):
                raise TwinloopError(f"{name} plan has detail {p.detail.shape}, expected "
                                    f"{(self.spec.horizon_ticks, self.spec.nu)}")

    def _first_extras(self, ostate, proposals, proposal_detail, carry):
        """What joins the first batch: a stochastic proposer's ``(M, N, nu)`` samples (clipped;
        the optimizer's state told of them), their ``(M, H, nu)`` detail, and the knots carried
        from the last tick: ``(ostate, samples, detail, carried)``."""
        lo, hi, shape = self.spec.low, self.spec.high, (None, self.spec.n_knots, self.spec.nu)
        carried = [] if carry is None else list(np.clip(as_array(carry, "carry", shape), lo, hi))
        if proposals is None:
            return ostate, [], None, carried
        props = np.clip(as_array(proposals, "proposals", shape), lo, hi)
        detail = None
        if proposal_detail is not None:
            detail = as_array(proposal_detail, "proposal_detail", (len(props), self.spec.horizon_ticks, self.spec.nu))
        return ostate.with_(proposals=props), list(props), detail, carried

    def _batch(self, ostate, head: list):
        """``(K, N, nu)`` candidates: the ``head`` knots, the optimizer's suggestions (evaluated
        once, in place of as many samples), then its samples, clipped to the action bounds."""
        head = np.stack(head)
        if ostate.suggested is not None:
            head = np.concatenate([head, ostate.suggested[: self.config.num_samples - len(head)]])
            ostate = ostate.with_(suggested=None)
        n_new = self.config.num_samples - len(head)
        sampled = self.optimizer.sample(ostate, self.rng, n_new) if n_new > 0 else np.empty((0, *head.shape[1:]))
        return np.clip(np.concatenate([head, sampled]), self.spec.low, self.spec.high), ostate

    @staticmethod
    def _batch_detail(details, n: int, has_prior: bool, offered_d, n_incumbent: int):
        """``(K, H, nu)`` per-tick detail of a batch: the warm plan's for every candidate, the
        prior's for it (row 1), the offered proposals' for them; ``None`` without any."""
        if details is None:
            return None
        detail = np.repeat(details[:1], n, axis=0)
        if has_prior:
            detail[1] = details[1]
        if offered_d is not None:
            n_off = min(len(offered_d), n - n_incumbent)
            detail[n_incumbent : n_incumbent + n_off] = offered_d[:n_off]
        return detail

    def _result(self, found: RefineSearch, ostate, iterations: int, t0: float, deadline: float | None,
                cut: bool) -> RefineResult:
        """The best plan found (the prior's where it is within ``prior_margin``), with the counts
        and what the call spent (``deadline`` and whether it ``cut`` the iterations or samples)."""
        cfg = self.config
        if found.best_k is None:
            raise RefinementFailed(f"all {found.n_roll} rollouts were non-finite or unstable; no plan to select")
        best_k, best_c, best_d = found.best_k, found.best_c, found.best_d
        prior_c = found.prior_c
        if cfg.prior_margin and np.isfinite(prior_c) and not best_c < prior_c - cfg.prior_margin * abs(prior_c):
            best_k, best_c, best_d = found.prior_k, prior_c, found.prior_d
        elites, last_c = None, found.last_c
        if cfg.carry:
            order = np.argsort(np.where(np.isfinite(last_c), last_c, np.inf), kind="stable")
            elites = found.last_cand[order[: cfg.carry]][np.isfinite(last_c[order[: cfg.carry]])]
        return RefineResult(
            plan=Plan(best_k, self.spec, best_d), cost=best_c, prior_cost=prior_c, iterations=iterations,
            n_rollouts=found.n_roll, n_unstable=found.n_bad, seconds=self.clock() - t0, n_samples=found.n_samples,
            deadline=deadline, cut=cut,
            rollouts=found.last_r if self.keep_rollouts else None, costs=last_c, n_steps=found.n_steps,
            elites=elites, optimizer_info=dict(ostate.info), offered_costs=found.offered_c,
        )

    def _details(self, warm: Plan, prior: Plan | None, offered: bool = False) -> np.ndarray | None:
        """``(1 or 2, H, nu)``: the warm plan's per-tick detail (which its samples share), then
        the prior's; ``None`` when neither has any and no ``offered`` proposal does."""
        if warm.detail is None and (prior is None or prior.detail is None) and not offered:
            return None
        zero = np.zeros((self.spec.horizon_ticks, self.spec.nu))
        own = zero if warm.detail is None else warm.detail
        return np.stack([own] + ([] if prior is None else [zero if prior.detail is None else prior.detail]))
