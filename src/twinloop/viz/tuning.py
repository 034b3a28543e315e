"""Live tuning of a refined controller's planner from the view's page.

The page's controls write requests (:meth:`Tuning.request`, on the server's thread); the
control thread takes them at the start of its next tick (:meth:`Tuning.apply`) without ever
waiting: if the page holds the lock at that instant the requests wait for the tick after.
Every change applied is logged (tick, setting, value) and reported with the episode.

When each setting takes effect:

- ``num_samples`` (K), ``iterations``, ``optimizer``, ``noise``, ``temperature``: the next tick
  (the optimizer's state is rebuilt every tick; the carried candidates and the warm start keep
  their shape).
- ``horizon``: the next episode. The plan's knots, the warm start and the delay line are shaped
  by the horizon, so a change mid-episode would replace the plan under way; it is applied when
  the next episode starts and logged there at tick 0.
"""

from __future__ import annotations

import threading
from dataclasses import fields, replace

from twinloop.errors import TwinloopError
from twinloop.plan import OPTIMIZERS, make_optimizer

#: the settings the page offers, and when each takes effect
WHEN = {"num_samples": "tick", "iterations": "tick", "optimizer": "tick", "noise": "tick", "temperature": "tick",
        "horizon": "episode"}


def planner_settings(refiner) -> dict:
    """The refiner's current values of the tunable settings (``None`` where its optimizer has
    no such field)."""
    opt, cfg = refiner.optimizer, refiner.config
    return {"num_samples": cfg.num_samples, "iterations": cfg.iterations, "horizon": cfg.horizon,
            "optimizer": getattr(opt, "name", type(opt).__name__), "noise": getattr(opt, "noise", None),
            "temperature": getattr(opt, "temperature", None)}


class Tuning:
    """Requests from the page, applied to a controller's refiner between ticks."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending: dict = {}
        self._next_episode: dict = {}
        self.message = ""  # the last refusal, shown on the page

    def request(self, name: str, value) -> None:
        """Ask for ``name = value`` (called from the page's thread)."""
        if name not in WHEN:
            raise TwinloopError(f"no tunable setting {name!r}: tunable are {', '.join(WHEN)}")
        with self._lock:
            (self._pending if WHEN[name] == "tick" else self._next_episode)[name] = value

    def _take(self, episode: bool) -> dict:
        if not self._lock.acquire(blocking=False):  # the page is writing: next tick
            return {}
        try:
            out, self._pending = self._pending, {}
            if episode:
                out.update(self._next_episode)
                self._next_episode = {}
            return out
        finally:
            self._lock.release()

    def apply(self, controller, tick: int, log: list, episode: bool = False) -> None:
        """Apply what was requested (and, at an episode's start, ``episode=True``, what waits for
        it) to ``controller``'s refiner; append ``{"tick", "setting", "value"}`` to ``log``. A
        value the refiner refuses is not applied and its reason is kept in :attr:`message`."""
        for name, value in self._take(episode).items():
            try:
                _set(controller, name, value)
            except (TwinloopError, TypeError, ValueError) as exc:
                self.message = f"{name} = {value!r} refused: {exc}"
                continue
            log.append({"tick": tick, "setting": name, "value": value})
            self.message = ""


def _set(controller, name: str, value) -> None:
    r = controller.refiner
    if name in ("num_samples", "iterations"):
        value = int(value)
        if name == "num_samples":
            offered = sum(int(getattr(s, "n", 0)) for s in controller.sources)
            if value < offered + 2:
                raise TwinloopError(f"K={value} leaves no room for the {offered} proposal samples offered each tick "
                                    "and the incumbent and prior")
        r.config = replace(r.config, **{name: value})
    elif name == "horizon":
        cfg = replace(r.config, horizon=float(value))
        # the refiner's plan shape follows from its config: build it anew, keeping its parts
        type(r).__init__(r, r.task, r.twin, r.optimizer, cfg, r.params, r.keep_rollouts, r.extra_costs)
    elif name == "optimizer":
        noise = getattr(r.optimizer, "noise", None)
        known = {f.name for f in fields(OPTIMIZERS[value])} if value in OPTIMIZERS else set()
        r.optimizer = make_optimizer(value, **({"noise": noise} if noise is not None and "noise" in known else {}))
    else:  # noise, temperature: fields of the optimizer
        if name not in {f.name for f in fields(r.optimizer)}:
            raise TwinloopError(f"optimizer {r.optimizer.name!r} has no {name}")
        r.optimizer = replace(r.optimizer, **{name: float(value)})
