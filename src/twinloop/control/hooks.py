"""Tick hooks of the synchronous controller (see :mod:`twinloop.control.parts`): the gap
monitor's watch and the trusted acceptance rule."""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, replace

import numpy as np

from twinloop.control.parts import Batch, TickHook
from twinloop.errors import TwinloopError, as_array, number

#: values of ``RefinerConfig.accept``
ACCEPT_RULES = ("always", "trusted", "robust")


class GapWatch(TickHook):
    """The live gap monitor (:class:`~twinloop.calib.monitor.GapMonitor`) as a tick hook: each
    tick first scores the twin's one-tick prediction against the new state (``tick.gap``); an
    alarm widens the refiner's parameter particles, starts a background refit, or makes the
    controller fall back to its proposer for the rest of the episode, as the monitor is
    configured (``tick.alarm`` says why). Particles it changed are restored at ``reset``."""

    def __init__(self, monitor):
        self.monitor = monitor

    def bind(self, controller) -> None:
        m, refiner = self.monitor, controller.refiner
        if m.config.action in ("widen", "refit", "adapt") and not len(refiner.twin.param_space):
            raise TwinloopError(f"monitor action {m.config.action!r} changes parameter particles, but the "
                                "refiner's twin has no parameter space")
        if m.config.action == "adapt" and not refiner.twin.param_space.on("actuator"):
            raise TwinloopError("monitor action 'adapt' refits the actuators' parameters, but the refiner's twin "
                                f"has none among {refiner.twin.param_space.names}")
        if m.config.action == "fallback" and controller.proposer is None:
            raise TwinloopError("monitor action 'fallback' needs a proposer to fall back to")
        self.controller, self.refiner = controller, refiner
        self._episode_params = refiner.params

    def reset(self, seed: int | None = None) -> None:
        if self.monitor.alarms or self.monitor.refits:  # the particles it changed belong to that episode
            self.refiner.set_params(self._episode_params)
        self.monitor.reset()
        self._episode_params = self.refiner.params

    def begin(self, state: np.ndarray) -> str:
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
            self.controller.fall_back(alarm.reason)
        return alarm.reason

    def sent(self, state: np.ndarray, tick) -> None:
        tick.gap = self.monitor.score
        self.monitor.sent(state, tick.action)

    def report(self) -> dict:
        """``alarms`` (tick, score, threshold, action) and ``refits`` (the tick each took
        over, the estimate by parameter name)."""
        names = self.refiner.twin.param_space.names
        return {"alarms": [asdict(a) for a in self.monitor.alarms],
                "refits": [{"tick": t, "params": dict(zip(names, map(float, x), strict=True))}
                           for t, x in self.monitor.refits],
                "rejected_refits": [{"tick": t, "reason": why} for t, why in getattr(self.monitor, "rejected", [])]}


class TrustedAcceptance(TickHook):
    """Send the refined plan only where the twin's predicted advantage exceeds its known error.

    Each tick ``t`` the twin's prediction of this tick's state (made at ``t - 1`` from the state
    then and the action sent, behind the actuation delay line if any; the first parameter
    particle) is compared with the state now estimated, in cost units: the
    cost ``J`` of the plan under way (the last plan sent, shifted a tick) rolled out from the
    predicted state and from the estimated one::

        e_t   = |J(predicted state) - J(estimated state)|
        error = max(e over the last ``window`` ticks)        (0 before any tick is checked)

    The refined plan replaces the base proposal only when its predicted advantage
    ``J(base) - J(refined) > factor * error``; otherwise the base proposal is sent (as
    rehearsed). ``tick.accept`` says which and why; :meth:`report` counts them. Without a base
    proposal (no proposer) the refined plan is always sent.

    Args:
        factor: how many twin errors the advantage must exceed.
        window: ticks of the running maximum.
    """

    def __init__(self, factor: float = 1.0, window: int = 5):
        self.factor = number(factor, "accept_factor", low=0.0)
        self.window = number(window, "window", low=1, integer=True)

    def bind(self, controller) -> None:
        self.controller, self.refiner = controller, controller.refiner
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        self.errors: deque = deque(maxlen=self.window)
        self._predicted = None  # (predicted state, plan under way) for the next tick
        self._plan = self._line = None
        self.counts = {"refined": 0, "base": 0}

    @property
    def error(self) -> float:
        """The twin's running cost error (``max`` over the window; 0 before any check)."""
        return max(self.errors) if self.errors else 0.0

    def _cost(self, state: np.ndarray, plan) -> float:
        _, c = self.refiner.evaluate(state, plan.knots[None], detail=None if plan.detail is None else plan.detail[None],
                                     in_flight=self.controller.delay_line)
        return float(c[0])

    def begin(self, state: np.ndarray) -> str:
        self._line = self.controller.delay_line  # before this tick's action joins it
        if self._predicted is not None:
            predicted, plan = self._predicted
            e = abs(self._cost(predicted, plan) - self._cost(state, plan))
            if np.isfinite(e):
                self.errors.append(e)
            self._predicted = None
        return ""

    def decide(self, tick, batch: Batch) -> None:
        self._plan = tick.plan
        if tick.fallback or batch.prior is None or not np.isfinite(tick.prior_cost):
            tick.accept = "fallback" if tick.fallback else "refined: no base proposal"
            return
        advantage, bar = tick.prior_cost - tick.cost, self.factor * self.error
        if advantage > bar:
            tick.accept = "refined"
            self.counts["refined"] += 1
            return
        spec = self.refiner.spec
        base = replace(batch.prior, knots=np.clip(batch.prior.knots, spec.low, spec.high))
        tick.plan, tick.action, tick.cost = base, base.first_action(), tick.prior_cost
        tick.accept = f"base: advantage {advantage:.3g} < twin error {bar:.3g}"
        self.counts["base"] += 1
        self._plan = base

    def sent(self, state: np.ndarray, tick) -> None:
        if not tick.accept:  # not refined this tick: the proposer alone (a monitor's fallback)
            tick.accept = "base: not refined"
        plan = tick.plan if tick.plan is not None else self._plan
        if plan is None:
            return
        ctrl = np.repeat(np.asarray(tick.action, dtype=float)[None], self.refiner.spec.substeps, axis=0)
        if self.refiner.delay_steps:  # what reaches the actuators this tick: the line first
            ctrl = np.concatenate([self.refiner.in_flight(state, self._line), ctrl])[: len(ctrl)]
        params = None if self.refiner.params is None else self.refiner.params[:1]
        r = self.refiner.twin.rollout(state, ctrl, params)
        if r.ok[0, 0]:
            m = self.refiner.task.model
            nxt = np.concatenate([r.qpos[0, 0, -1], r.qvel[0, 0, -1], state[m.nq + m.nv:]])
            self._predicted = (nxt, plan.shifted(1))

    def report(self) -> dict:
        """How many ticks sent the refined plan and the base one, and the last twin error."""
        return {"accept": dict(self.counts), "twin_cost_error": float(self.error)}


class RobustAcceptance(TickHook):
    """Send the refined plan only where its advantage over the base holds across the twin's
    parameter uncertainty.

    The nominal twin rates the refined plan cheaper than the base proposal (else it would not
    have won); a plan that is better only at the nominal parameters exploits exactly what the
    twin may have wrong. Each tick the base proposal and the refined plan are rolled out from
    the current state under ``P`` parameter particles (the nominal values and ``P - 1`` draws
    from the prior of the twin's parameter space, drawn once per episode seed)::

        wins  = #{p : J_p(refined) < J_p(base)}
        send refined  iff  wins >= quantile * P

    else the base proposal, as rehearsed. ``tick.accept`` says which and why; :meth:`report`
    counts them. It costs ``2 P`` rollouts a tick (the refiner's batch is ``K``), none where
    the refiner chose the base proposal itself (the same controls: sent, and said so). Without a
    base proposal, or a twin without parameters, the refined plan is always sent.

    Given ``params`` it judges under those instead (``twinloop run`` passes a calibration's
    samples with ``RefinerConfig.accept_under = "calibration"``; not the default, which judged
    better on quadruped-walk: docs/settings.md).

    Args:
        particles: ``P``, including the nominal.
        quantile: the fraction of particles under which the refined plan must win.
        params: ``(P', n)`` fixed particles to judge under (e.g. a posterior's samples,
            ``P' >= 2``), in place of the nominal values and the prior's draws; ``P = P'``.
    """

    def __init__(self, particles: int = 8, quantile: float = 1.0, params=None):
        self.n = number(particles, "accept_particles", low=2, integer=True)
        self.quantile = number(quantile, "accept_quantile", low=0.0, high=1.0, low_open=True)
        self.fixed = None
        if params is not None:
            self.fixed = as_array(params, "acceptance particles")
            if self.fixed.ndim != 2 or len(self.fixed) < 2:
                raise TwinloopError(f"acceptance particles must be (P, n) with P >= 2, got shape {self.fixed.shape}")
            self.n = len(self.fixed)

    def bind(self, controller) -> None:
        self.controller, self.refiner = controller, controller.refiner
        self.space = self.refiner.twin.param_space
        if self.fixed is not None and self.fixed.shape[1] != len(self.space):
            raise TwinloopError(f"acceptance particles have {self.fixed.shape[1]} parameters; the twin's space has "
                                f"{len(self.space)} ({self.space.names})")
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        if self.fixed is not None:
            self.params = self.fixed.copy()
        else:
            self.params = (self.space.prior_particles(np.random.default_rng([0 if seed is None else seed, 29]), self.n)
                           if len(self.space) else None)
        # the particles' models, built once an episode (the twin keeps one set of models: the
        # refiner's own would otherwise be rebuilt with these every tick)
        self.models = None if self.params is None else self.space.models(self.refiner.twin.model, self.params)
        self.state = None
        self.counts = {"refined": 0, "base": 0}

    def begin(self, state: np.ndarray) -> str:
        self.state = state
        return ""

    def decide(self, tick, batch: Batch) -> None:
        if tick.fallback or batch.prior is None or not np.isfinite(tick.prior_cost) or self.params is None:
            tick.accept = "fallback" if tick.fallback else "refined: no base proposal or no parameters"
        else:
            spec = self.refiner.spec
            base = replace(batch.prior, knots=np.clip(batch.prior.knots, spec.low, spec.high))
            if same_plan(self.refiner, tick.plan, base):  # the base won the batch: nothing to judge
                why = "base: the refiner chose the base proposal"
            else:
                line = self.controller.delay_line
                j = self.refiner.plan_costs(self.state, [tick.plan, base], self.models, line)  # (P, 2)
                wins = int(np.sum(j[:, 0] < j[:, 1]))
                why = "refined" if wins >= self.quantile * self.n else \
                    f"base: refined wins under {wins} of {self.n} parameter particles"
            if why == "refined":
                tick.accept = "refined"
                self.counts["refined"] += 1
            else:
                tick.plan, tick.action, tick.cost = base, base.first_action(), tick.prior_cost
                tick.accept = why
                self.counts["base"] += 1

    def report(self) -> dict:
        """How many ticks sent the refined plan and the base one."""
        return {"accept": dict(self.counts)}


def same_plan(refiner, a, b) -> bool:
    """Whether plans ``a`` and ``b`` give the same physics controls (the refiner kept the base)."""
    ca, cb = (refiner.basis.controls(p.knots[None], p.detail) for p in (a, b))
    return ca.shape == cb.shape and bool(np.array_equal(ca, cb))


def acceptance_hooks(config, params=None) -> list:
    """The tick hooks of a :class:`~twinloop.control.RefinerConfig`'s acceptance rule
    (``config.accept``): none for ``always``, :class:`TrustedAcceptance` for ``trusted``,
    :class:`RobustAcceptance` for ``robust`` (judging under ``params`` where given: a
    calibration's samples)."""
    if config.accept == "trusted":
        return [TrustedAcceptance(config.accept_factor)]
    if config.accept == "robust":
        return [RobustAcceptance(config.accept_particles, config.accept_quantile, params)]
    return []
