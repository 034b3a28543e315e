"""Base proposers: scripted heuristics and policies distilled from refined actions.

A task's own scripted proposer comes from ``task.default_proposer()``; the point-pushing
machinery the planar tasks share is :class:`PointPusher`. ``make_proposer(task, name,
**options)`` builds a proposer by registry name (the CLI's ``--proposer`` choices come from
:data:`PROPOSERS`); ``noise=`` wraps any of them in :class:`NoisyProposer`. ``open-loop`` is the
task's script planned once against the nominal physics and replayed (:class:`OpenLoopProposer`).

A user's own proposer needs no registration: ``path/to/file.py:MyPolicy`` or
``my_pkg.policies:MyPolicy`` (a class or function called as ``factory(task, **options)``, returning
an object with ``propose(obs, state) -> (H, nu)`` and optionally ``reset(seed)``), or an installed
entry point of group ``twinloop.proposers`` (:mod:`twinloop.plugins`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import mujoco
import numpy as np

from twinloop import plugins
from twinloop.errors import TwinloopError, as_array, number
from twinloop.policies.scripted import PointPusher, ScriptedConfig, pusher_excitation


def _scripted(task):
    proposer = task.default_proposer()
    if proposer is None:
        raise TwinloopError(f"task {task.name!r} has no scripted proposer; use proposer 'none'")
    return proposer


def _distilled(task, checkpoint: str | None = None):
    if not checkpoint:
        raise TwinloopError("proposer 'distilled' needs checkpoint=PATH (`twinloop run --checkpoint PATH`): a policy "
                            "saved by twinloop distill")
    from twinloop.policies.distilled import DistilledPolicy  # needs the [learn] extra (torch)

    return DistilledPolicy.load(checkpoint, task)


def _open_loop(task):
    return OpenLoopProposer(task, _scripted(task))


PROPOSERS: dict[str, Callable] = {
    "scripted": _scripted,
    "open-loop": _open_loop,
    "distilled": _distilled,
    "none": lambda task: None,
}


class NoisyProposer:
    """A proposer whose action chunks carry seeded Gaussian noise: a family of worse policies.

    Each target of each chunk gets independent noise of std ``noise`` x the action range's
    half-width, then is clipped to the bounds; ``reset(seed)`` seeds the noise, so the same
    episode seed gives the same noisy episode.
    """

    def __init__(self, task, proposer, noise: float):
        if proposer is None:
            raise TwinloopError("noise needs a proposer to perturb; proposer 'none' has none")
        if not (np.isfinite(noise) and noise >= 0):
            raise TwinloopError(f"noise must be >= 0 (a fraction of the action half-range), got {noise}")
        self.task, self.proposer, self.noise = task, proposer, float(noise)
        self.scale = self.noise * (task.action_high - task.action_low) / 2
        self.rng = np.random.default_rng(0)

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng([0 if seed is None else seed, 11])
        if callable(getattr(self.proposer, "reset", None)):
            self.proposer.reset(seed)

    def set_time(self, time: float) -> None:
        """Pass the world time on to a timed proposer."""
        if callable(getattr(self.proposer, "set_time", None)):
            self.proposer.set_time(time)

    def propose(self, obs, state) -> np.ndarray:
        chunk = as_array(self.proposer.propose(obs, state), "proposer action chunk")
        noisy = chunk + self.rng.normal(0.0, 1.0, chunk.shape) * self.scale
        return np.clip(noisy, self.task.action_low, self.task.action_high)


class OpenLoopProposer:
    """A plan made once and replayed: the brittle base an action chunk or a stale plan is.

    At the first call after ``reset`` it rehearses ``proposer`` in the task's *nominal* model,
    closed loop, from that call's state for ``ticks`` control ticks (default: the task's
    ``max_ticks``), and keeps the actions it sent. Every call (one per control tick, as the
    controller makes them) then returns the rest of that sequence, ``(ticks - i, nu)`` at tick
    ``i`` (the last action once it runs out), whatever it observes: a script that is right in
    the nominal world stays right only where the world behaves nominally.
    """

    def __init__(self, task, proposer, ticks: int | None = None):
        if proposer is None:
            raise TwinloopError("an open-loop plan needs a proposer to rehearse; proposer 'none' has none")
        self.task, self.proposer = task, proposer
        self.ticks = task.max_ticks if ticks is None else number(ticks, "ticks", low=1, integer=True)
        n = task.control_period / task.model.opt.timestep
        if abs(n - round(n)) > 1e-6 * n or round(n) < 1:
            raise TwinloopError(f"the scene's timestep {task.model.opt.timestep:g} s does not divide the control "
                                f"period {task.control_period:g} s")
        self.substeps = int(round(n))
        self.plan: np.ndarray | None = None
        self.tick = 0

    def reset(self, seed: int | None = None) -> None:
        self.plan, self.tick = None, 0
        if callable(getattr(self.proposer, "reset", None)):
            self.proposer.reset(seed)

    def propose(self, obs, state) -> np.ndarray:
        """The rest of the plan from this tick on, ``(H', nu)``."""
        if self.plan is None:
            self.plan = self.rehearse(obs, state)
        i = min(self.tick, len(self.plan) - 1)
        self.tick += 1
        return self.plan[i:].copy()

    def rehearse(self, obs, state) -> np.ndarray:
        """``(ticks, nu)`` actions the proposer sends in the nominal model from ``state``
        (``(nstate,)`` as ``[qpos, qvel, act]``), observing ``obs`` first."""
        t = self.task
        m = t.model
        s = as_array(state, "state", (t.nstate,))
        d = mujoco.MjData(m)
        d.qpos[:], d.qvel[:], d.act[:] = s[: m.nq], s[m.nq : m.nq + m.nv], s[m.nq + m.nv :]
        mujoco.mj_forward(m, d)
        out = np.empty((self.ticks, m.nu))
        for k in range(self.ticks):
            chunk = as_array(self.proposer.propose(obs, s), "proposer action chunk")
            out[k] = d.ctrl[:] = np.clip(chunk[0], t.action_low, t.action_high)
            for _ in range(self.substeps):
                mujoco.mj_step(m, d)
            obs, s = t.obs_from_data(m, d), np.concatenate([d.qpos, d.qvel, d.act])
        return out


def proposer_factory(name: str) -> Callable:
    """The factory of proposer ``name``: a registered name, an installed entry point of group
    ``twinloop.proposers``, ``path/to/file.py:Name`` or ``package.module:Name``."""
    return plugins.resolve("proposer", name, PROPOSERS, "a class or function taking the task")


def check_proposer(name: str) -> str:
    """``name`` if it names a proposer (see :func:`proposer_factory`; nothing is built)."""
    proposer_factory(name)
    return name


def make_proposer(task, name: str, noise: float = 0.0, **options):
    """The base proposer ``name`` for ``task`` (``None`` for ``none``); ``options`` go to its
    factory (``checkpoint=`` for ``distilled``); ``noise > 0`` wraps it in :class:`NoisyProposer`."""
    factory = proposer_factory(name)
    try:
        inspect.signature(factory).bind(task, **options)
    except TypeError as exc:
        raise TwinloopError(f"proposer {name!r} does not take option(s) {sorted(options)}") from exc
    proposer = factory(task, **options)
    if proposer is not None and not callable(getattr(proposer, "propose", None)):
        raise TwinloopError(f"proposer {name!r} made a {type(proposer).__name__}, which has no propose(obs, state)")
    return NoisyProposer(task, proposer, noise) if noise else proposer


__all__ = ["PROPOSERS", "NoisyProposer", "OpenLoopProposer", "PointPusher", "ScriptedConfig", "check_proposer",
           "make_proposer", "proposer_factory", "pusher_excitation"]
