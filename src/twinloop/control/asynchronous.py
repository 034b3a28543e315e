"""The asynchronous controller: planning in its own thread, actuation at the world's rate."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from twinloop import threads
from twinloop.control.anytime import cycle_deadline
from twinloop.control.controller import Controller, TickInfo
from twinloop.control.parts import is_hook
from twinloop.control.refiner import Refiner
from twinloop.errors import TwinloopError, number


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
        anytime: bound each cycle's refine by what one tick of the world allows, where the
            refiner has no deadline of its own (``RefinerConfig.deadline``): ``(1 - margin) /
            rate`` wall seconds less the slowest of the last five cycles' non-refine parts
            (state estimate, prediction, proposer, publishing; before the first cycle's, what it
            has spent before planning). The refine then stops at the sample chunk or iteration
            that would pass it (see :mod:`twinloop.control.anytime`). The default: a plan that
            arrives after the world's next tick is already stale. Off: each cycle refines all
            its iterations and samples, however long that takes (how every real-time result
            measured before anytime planning existed was run).
        margin: the fraction of the tick kept free under ``anytime`` (for the last chunk's
            overrun and the world's own thread).

    A known actuation delay is the refiner's (``RefinerConfig.actuation_delay``), as for the
    synchronous controller.
    """

    latency_comp: bool = True
    budget: float | None = None
    anytime: bool = True
    margin: float = 0.1

    def __post_init__(self):
        if self.budget is not None and not (np.isfinite(self.budget) and self.budget > 0):
            raise TwinloopError(f"budget must be > 0 s or None, got {self.budget!r}")
        object.__setattr__(self, "margin", number(self.margin, "margin", low=0, high=1, high_open=True))


@dataclass
class PlanCycle:
    """One planning cycle of :class:`AsyncController` (world times in s, wall in s).

    Attributes:
        obs_time: world time of the observation planned from.
        start: world time the plan starts at (``nan``: when it arrives, no compensation).
        seconds: wall time of the cycle (refine, prediction and any budget wait).
        lead: predicted ahead (s of world time; 0 without compensation).
        deadline: the refine's deadline (s, wall; ``nan``: none).
        refine_seconds: wall time of the refine.
        overhead: wall time of the rest of the cycle, before any budget wait.
        iterations: optimizer iterations begun.
        samples: candidates evaluated (over its iterations).
        cut: the deadline stopped the refine before all its iterations and samples.
    """

    obs_time: float
    start: float
    seconds: float
    lead: float
    deadline: float = float("nan")
    refine_seconds: float = 0.0
    overhead: float = 0.0
    iterations: int = 0
    samples: int = 0
    cut: bool = False


class AsyncController(Controller):
    """Planning in its own thread, actuation at the world's rate.

    For a world that stamps observations with time (a :class:`~twinloop.worlds.realtime.
    RealtimeWorld`, whose ``info`` has ``time``, ``tick``, ``period`` and ``rate``). The
    actuation side, :meth:`act`, returns at once: it hands the observation to the planner and
    sends, for the tick the action will apply at (``time + period``), the action the newest
    plan holds for that time. The planner thread loops: take the newest observation, refine,
    publish a plan stamped with the world time it starts at.

    Anytime (``config.anytime``, the default): each cycle's refine gets a deadline, what one
    world tick leaves after the rest of the cycle (:meth:`deadline`), and spends it in sample
    chunks and iterations; each :class:`PlanCycle` records what it spent.

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
        sources: candidate sources (see :class:`Controller`); no tick hooks (the state is the
            task's stateless estimate, the plans are made between ticks).
    """

    def __init__(self, refiner: Refiner, proposer=None, config: AsyncConfig | None = None, sources=()):
        hooks = [type(s).__name__ for s in sources if is_hook(s)]
        if hooks:
            raise TwinloopError(f"candidate source {hooks[0]} carries its decision on tick by tick (it is a tick hook); "
                                "the asynchronous controller plans between ticks: use the synchronous Controller")
        super().__init__(refiner, proposer, refine=True, sources=sources)
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
        period (the plan was not renewed on time), median lead predicted; what the refines
        spent (median deadline, iterations and samples, the fewest samples, cycles cut) and
        how many cycles took longer than one world tick (``late_cycles``)."""
        cyc = self.cycles

        def med(name, f=np.median):
            return float(f([getattr(c, name) for c in cyc])) if cyc else float("nan")

        tick = np.inf if self._period is None else self._period / self._speed
        return {"cycles": len(cyc), "cycle_median": med("seconds"), "cycle_max": med("seconds", np.max),
                "overruns": sum(c.seconds > self.task.control_period for c in cyc), "lead_median": med("lead"),
                "deadline_median": med("deadline"), "iterations_median": med("iterations"),
                "samples_median": med("samples"), "samples_min": med("samples", np.min),
                "cut_cycles": sum(c.cut for c in cyc),
                "late_cycles": sum(c.refine_seconds + c.overhead > tick for c in cyc)}

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
        first = int(round(t0 / self._period))
        out = np.empty((ticks, self.task.nu))
        last = hold
        with self._cv:
            for i, j in enumerate(range(first, first + ticks)):
                a = self._sent.get(j)
                if a is None and self._current is not None and j >= 1:
                    a = self._action_at(self._current[3], self._current[1], j * self._period)
                out[i] = last = last if a is None else a
        return per_twin_step(out, self._period, self.refiner.twin.dt)

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
        # a timed proposer (a gait) proposes for the time the state planned from is of
        self._call(self.proposer, "set_time", t_obs if np.isnan(start) else start)
        deadline = self.deadline(period / speed, time.perf_counter() - c0)
        plan, tick = self.plan(obs, state, warm, carry, line, deadline=deadline)
        acts = plan.actions()
        busy = time.perf_counter() - c0
        if cfg.budget is not None and cfg.budget > busy:
            time.sleep(cfg.budget - busy)
        with self._cv:
            self._pending = (plan, start, tick, acts)
        res = tick.result
        self.cycles.append(PlanCycle(
            obs_time=t_obs, start=start, seconds=time.perf_counter() - c0, lead=lead,
            deadline=float("nan") if res is None or res.deadline is None else res.deadline,
            refine_seconds=tick.seconds, overhead=busy - tick.seconds, iterations=tick.iterations,
            samples=tick.samples, cut=res is not None and res.cut))

    def deadline(self, interval: float, spent: float) -> float | None:
        """The refine's deadline (s) in a cycle with ``interval`` wall seconds per world tick,
        ``spent`` seconds into it: ``None`` where ``config.anytime`` is off or the refiner has a
        deadline of its own; else :func:`~twinloop.control.anytime.cycle_deadline` of the last
        cycles' non-refine parts (before the first, ``spent``)."""
        if not self.config.anytime or self.refiner.config.deadline is not None:
            return None
        return cycle_deadline(interval, [c.overhead for c in self.cycles] or [spent], self.config.margin)


def per_twin_step(per_tick: np.ndarray, period: float, dt: float) -> np.ndarray:
    """``(n, nu)`` controls per twin step of ``dt`` s from ``(ticks, nu)`` actions held for world
    ticks of ``period`` s: each twin step takes the action of the world tick it starts in (``dt``
    a divisor of ``period``: each action repeated ``period / dt`` times; a twin step coarser than
    the world's tick: the action of every ``dt / period``-th tick)."""
    n = int(round(len(per_tick) * period / dt))
    idx = np.floor(np.arange(n) * dt / period + 1e-6).astype(int)
    return per_tick[np.minimum(idx, len(per_tick) - 1)] if len(per_tick) else per_tick[:0]
