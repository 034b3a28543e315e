"""The world contract and the simplest world: the task's own scene, stepped in MuJoCo.

A world is what the robot really acts in::

    obs = world.reset(seed)
    obs, info = world.step(action)     # holds ``action`` for one control period
    world.info()                       # what the last reset or step reported
    world.describe()                   # JSON-serializable: what kind of world, what is hidden

``info`` carries at least ``time`` (s, world time of the observation) and ``tick`` (steps
since reset) and, for simulated worlds, ``qpos``/``qvel`` (the hidden true state, used by
benchmarks and success tests, never by controllers). A world may also report ``terminated``
(the episode is over: stop), ``truncated`` (stop: a time limit), ``success`` (its own
verdict, which then replaces the task's test) and ``failure`` (a non-empty reason the episode
cannot count: it stops there and fails, e.g. a simulation MuJoCo had to reset).

``world.period`` is the world time (s) one ``step`` advances: the task's control period,
unless a world is made finer for a real-time wrapper (``SimWorld(task, period=0.01)``).
"""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.tasks.base import Task


class World:
    """Base of every world: ``reset`` and ``step`` to implement, the rest has defaults.

    Attributes:
        task: the task whose controller acts here.
        name: the world's kind (``nominal``, ``shifted``, ``gym`` ...).
        period: world time (s) one ``step`` advances.
    """

    name = "world"
    task: Task
    period: float

    def reset(self, seed: int) -> np.ndarray:
        """Start an episode; the same seed gives the same episode. Returns the observation."""
        raise NotImplementedError

    def step(self, action) -> tuple[np.ndarray, dict]:
        """Apply ``action`` for one control period; returns ``(obs, info)``."""
        raise NotImplementedError

    def info(self) -> dict:
        """What the last ``reset``/``step`` reported (default: nothing beyond the clock)."""
        return {"time": 0.0, "tick": 0}

    def describe(self) -> dict:
        """JSON-serializable description (what kind of world, what it hides from the twin)."""
        return {"world": self.name, "task": self.task.name}

    def close(self) -> None:
        """Release what the world holds (threads, processes, sockets); default: nothing."""


class SimWorld(World):
    """The task's scene in CPU MuJoCo: the nominal twin acting as the world.

    Subclasses change ``self.model`` (hidden physics) and override ``_observe`` / ``_actuate``
    (noise, delay).

    Args:
        task: the task.
        model: the world's model (default: the task's nominal model).
        period: world time (s) per ``step`` (default: the task's control period); a finer
            period lets a real-time wrapper apply actions as they arrive. A multiple of the
            model's timestep.
    """

    name = "nominal"

    def __init__(self, task: Task, model: mujoco.MjModel | None = None, period: float | None = None):
        self.task = task
        self.model = model if model is not None else task.model
        self.data = mujoco.MjData(self.model)
        self.period = float(task.control_period if period is None else period)
        n = self.period / self.model.opt.timestep
        if not np.isfinite(n) or abs(n - round(n)) > 1e-6 * max(n, 1.0) or round(n) < 1:
            raise TwinloopError(f"the world's timestep {self.model.opt.timestep:g} s does not divide its step period "
                                f"{self.period:g} s (period={period!r}; default: the task's control period "
                                f"{task.control_period:g} s)")
        self.substeps = int(round(n))
        self.rng = np.random.default_rng(0)
        self.t = 0
        self._started = False  # the default MjData is no episode state (the pusher sits inside the block)

    def reset(self, seed: int) -> np.ndarray:
        seed = number(seed, "seed", low=0, integer=True)
        self.rng = np.random.default_rng(seed)
        state = self.task.initial_state(np.random.default_rng([seed, 0]))
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        d.qpos[:] = state[: m.nq]
        d.qvel[:] = state[m.nq : m.nq + m.nv]
        d.ctrl[:] = self.task.hold_action(state)
        mujoco.mj_forward(m, d)
        self.t = 0
        self._started = True
        return self._observe()

    def _check_action(self, action) -> np.ndarray:
        """``action`` as ``(nu,)`` within bounds, in a started episode."""
        if not self._started:
            raise TwinloopError(f"{type(self).__name__}.step called before reset(seed): there is no episode yet")
        a = as_array(action, "action", (self.model.nu,))
        lo, hi = self.task.action_low, self.task.action_high
        if np.any(a < lo - 1e-9) or np.any(a > hi + 1e-9):
            raise TwinloopError(f"action {a} outside bounds [{lo}, {hi}]")
        return a

    def step(self, action) -> tuple[np.ndarray, dict]:
        a = self._check_action(action)
        self.data.ctrl[:] = self._actuate(a)
        for _ in range(self.substeps):
            mujoco.mj_step(self.model, self.data)
        self.t += 1
        return self._observe(), self.info()

    def info(self) -> dict:
        d = self.data
        out = {"time": self.t * self.period, "tick": self.t, "qpos": d.qpos.copy(), "qvel": d.qvel.copy()}
        unstable = unstable_reason(d)
        if unstable:
            # MuJoCo reset the state mid-episode: what follows is no continuation of the episode
            out.update(failure=unstable, terminated=True)
        return out

    def true_state(self) -> np.ndarray:
        d = self.data
        return np.concatenate([d.qpos, d.qvel, d.act])

    def _observe(self) -> np.ndarray:
        return self.task.obs_from_data(self.model, self.data)

    def _actuate(self, action: np.ndarray) -> np.ndarray:
        return action


#: MuJoCo's warnings for a state it found non-finite or huge and reset to the model's default
INSTABILITY_WARNINGS = {mujoco.mjtWarning.mjWARN_BADQPOS: "positions", mujoco.mjtWarning.mjWARN_BADQVEL: "velocities",
                        mujoco.mjtWarning.mjWARN_BADQACC: "accelerations"}


def unstable_reason(data: mujoco.MjData) -> str:
    """``""``, or why the simulation in ``data`` went unstable since its last ``mj_resetData``
    (MuJoCo then silently resets the state and counts a warning: the physics step diverged)."""
    bad = [what for w, what in INSTABILITY_WARNINGS.items() if data.warning[w].number > 0]
    return f"simulation unstable: MuJoCo reset the state after bad {', '.join(bad)} (time step too large for this physics)" if bad else ""
