"""A world that does not wait: any world stepped on a wall-clock schedule in its own thread.

``RealtimeWorld(world, rate)`` calls ``world.step`` every ``1 / rate`` wall-clock seconds,
whatever the controller is doing. At each tick boundary ``k`` it

1. publishes the observation of world time ``k * period`` (computed during the last tick),
2. takes the latest action sent (or holds the previous one if none arrived since),
3. steps the inner world one ``period`` with it (the state of time ``(k+1) * period``).

So an action sent during tick ``k`` is applied over ``[(k+1) p, (k+2) p)``: one tick of
pipeline, as on a robot whose driver latches commands at its servo rate. Controller side::

    obs = world.reset(seed)          # starts the clock (the world holds the task's hold action)
    world.send(action)               # non-blocking: applied at the next tick boundary
    obs, info = world.observe()      # non-blocking: the latest published observation
    obs, info = world.step(action)   # send, then wait for the next published observation

``info`` adds ``time`` (world time of the observation, s), ``tick``, ``wall`` (wall-clock
seconds since reset), ``period`` and ``rate`` to the inner world's info. The clock stops
after the inner world reports ``terminated`` or ``truncated``. Every tick is logged (:class:`TickRecord`):
whether a fresh action was applied or the previous one held (a *deadline miss* once the
controller has started sending), the applied action's *age* (world time since the
observation it was computed from) and *delay* (wall time from ``send`` to application), how
late the tick started and how long the inner step took. ``rate`` other than ``1 / period``
runs the world faster or slower than real time (``speed = rate * period``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

from twinloop import threads
from twinloop.errors import TwinloopError, as_array
from twinloop.worlds.base import World


@dataclass(frozen=True)
class TickRecord:
    """One tick of a real-time world.

    Attributes:
        tick: index ``k``; the action was applied over world time ``[k p, (k+1) p)``.
        wall: wall-clock seconds since reset when the tick started.
        lateness: how late it started against its schedule (s, wall).
        fresh: a new action was applied (``False``: the previous one was held).
        age: world time (s) from the observation the action was computed from to its
            application (``nan`` for the hold action before any was sent).
        delay: wall seconds from ``send`` to application (``nan`` likewise).
        step_seconds: wall time of the inner world's step.
        action: the action applied.
    """

    tick: int
    wall: float
    lateness: float
    fresh: bool
    age: float
    delay: float
    step_seconds: float
    action: tuple


class RealtimeWorld(World):
    """Wraps ``world`` so it advances on a wall-clock schedule in its own thread.

    Args:
        world: any world (its ``period`` is the world time one step advances).
        rate: ticks per wall-clock second (default ``1 / world.period``: real time).
        hold: the action applied before the first one arrives (default: the task's
            ``hold_action`` of the first observation).
    """

    name = "realtime"
    keeps_clock = True

    def __init__(self, world: World, rate: float | None = None, hold=None):
        if not isinstance(world, World):
            raise TwinloopError(f"world must be a World, got {type(world).__name__}")
        if isinstance(world, RealtimeWorld):
            raise TwinloopError("world is already real-time")
        self.world, self.task = world, world.task
        self.period = float(world.period)
        self.rate = float(1.0 / self.period if rate is None else rate)
        if not (np.isfinite(self.rate) and self.rate > 0):
            raise TwinloopError(f"rate must be > 0 Hz, got {rate!r}")
        self.interval = 1.0 / self.rate
        self._hold = None if hold is None else as_array(hold, "hold", (self.task.nu,))
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._running = False
        self._error: BaseException | None = None
        self.log: list[TickRecord] = []
        self._reset_state()

    def _reset_state(self) -> None:
        self._obs = None
        self._info: dict = {}
        self._tick = 0          # index of the latest published observation
        self._seen = -1         # the latest tick handed to the controller
        self._inbox = None      # (action, wall time sent, world time of the obs it used)
        self._applied = None    # (action, sent, based_on) applied last tick
        self._t0 = 0.0

    # -- controller side -----------------------------------------------------------------------

    def reset(self, seed: int) -> np.ndarray:
        """Stop the clock, reset the inner world, start the clock; returns the observation."""
        self._stop()
        obs = self.world.reset(seed)
        self._reset_state()
        self.log = []
        hold = self._hold if self._hold is not None else self.task.hold_action(self.task.state_from_obs(obs))
        self._applied = (np.asarray(hold, float), np.nan, np.nan)
        self._publish(obs, self.world.info(), 0, 0.0)
        self._seen = 0
        self._running = True
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="twinloop-realtime-world", daemon=True)
        self._thread.start()
        threads.track(self)
        return obs

    def send(self, action, based_on: float | None = None) -> None:
        """Queue ``action`` for the next tick boundary (the latest sent wins).

        Args:
            based_on: world time of the observation it was computed from (default: the
                latest observation this world handed out).
        """
        a = as_array(action, "action", (self.task.nu,))
        self._check_alive()
        with self._cv:
            t = self._seen * self.period if based_on is None else float(based_on)
            self._inbox = (a.copy(), time.perf_counter(), t)

    def observe(self) -> tuple[np.ndarray, dict]:
        """The latest published observation and its info (non-blocking)."""
        self._check_alive()
        with self._cv:
            self._seen = self._tick
            return self._obs, self._info

    def step(self, action) -> tuple[np.ndarray, dict]:
        """Send ``action``, then wait for the next published observation."""
        self.send(action)
        with self._cv:
            k = self._tick
            # generous: a tick may start late on a loaded machine
            if not self._cv.wait_for(lambda: self._tick > k or not self._running, timeout=10 * self.interval + 1.0):
                raise TwinloopError(f"real-time world published nothing for {10 * self.interval + 1.0:.1f} s")
            self._seen = self._tick
            obs, info = self._obs, self._info
        self._check_alive()
        return obs, info

    def info(self) -> dict:
        with self._cv:
            return self._info

    @property
    def running(self) -> bool:
        """Whether the clock is ticking (between ``reset`` and the episode's end or ``close``)."""
        return self._running

    def describe(self) -> dict:
        return {**self.world.describe(), "realtime": {"rate": self.rate, "period": self.period,
                                                      "speed": self.rate * self.period}}

    def stats(self) -> dict:
        """Summary of the log: deadline misses (ticks that held the previous action after the
        controller's first), action age and delay, how late ticks started."""
        log = self.log
        first = next((i for i, r in enumerate(log) if r.fresh), len(log))
        after = log[first:]
        age = np.array([r.age for r in after if r.fresh])
        delay = np.array([r.delay for r in after if r.fresh])
        late = np.array([r.lateness for r in log]) if log else np.zeros(0)

        def q(x, p):
            return float(np.percentile(x, p)) if len(x) else float("nan")

        return {"ticks": len(log), "misses": int(sum(not r.fresh for r in after)),
                "ticks_before_first_action": first, "age_median": q(age, 50), "age_max": q(age, 100),
                "delay_median": q(delay, 50), "delay_max": q(delay, 100),
                "lateness_p99": q(late, 99), "late_ticks": int((late > 0.5 * self.interval).sum())}

    def log_rows(self) -> list[dict]:
        return [asdict(r) for r in self.log]

    def close(self) -> None:
        self._stop()
        self.world.close()

    # -- the clock -----------------------------------------------------------------------------

    def _publish(self, obs, info: dict, k: int, wall: float) -> None:
        with self._cv:
            self._obs = obs
            self._info = {**info, "time": k * self.period, "tick": k, "wall": wall,
                          "period": self.period, "rate": self.rate}
            self._tick = k
            self._cv.notify_all()

    def _run(self) -> None:
        try:
            k = 0
            pending = None
            while self._running:
                target = self._t0 + k * self.interval
                delay = target - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                start = time.perf_counter()
                if not self._running:
                    break
                if pending is not None:
                    self._publish(*pending, k, start - self._t0)
                    if pending[1].get("terminated") or pending[1].get("truncated"):
                        break  # the inner world's episode is over: nothing more to step
                with self._cv:
                    fresh = self._inbox is not None
                    if fresh:
                        self._applied, self._inbox = self._inbox, None
                action, sent, based_on = self._applied
                obs, info = self.world.step(action)
                done = time.perf_counter()
                self.log.append(TickRecord(
                    tick=k, wall=start - self._t0, lateness=start - target, fresh=fresh,
                    age=k * self.period - based_on, delay=start - sent if fresh else np.nan,
                    step_seconds=done - start, action=tuple(float(v) for v in action)))
                pending = (obs, info)
                k += 1
        except BaseException as exc:  # the controller side re-raises it
            self._error = exc
        finally:
            with self._cv:
                self._running = False
                self._cv.notify_all()

    def _stop(self) -> None:
        self._running = False
        if self._thread is not None:
            self._thread.join(timeout=10.0)
            self._thread = None

    _stop_thread = _stop  # what twinloop.threads calls at exit

    def _check_alive(self) -> None:
        if self._error is not None:
            raise TwinloopError(f"the real-time world's clock stopped: {type(self._error).__name__}: {self._error}") from self._error
        if self._thread is None:
            raise TwinloopError("RealtimeWorld: call reset(seed) first")
