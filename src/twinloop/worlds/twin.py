"""The twin as a world: the task's scene with given parameters, delay, noise and engine settings.

Evaluating a policy "in the twin" means running it in a world built from the twin's model:
``TwinWorld(task)`` is the nominal twin itself; ``TwinWorld(task, estimate, delay_steps=d,
obs_noise=s)`` is a calibrated twin that also carries the actuation delay and observation
noise estimated from world data (a world with noise and delay is only predicted by a twin that
has them too); ``engine=Engine(...)`` swaps solver settings (cross-engine studies). :class:`ModelWorld` makes a
world of any twin, e.g. a learned one.
:class:`~twinloop.worlds.shifted.ShiftedWorld` is a TwinWorld whose values are drawn and hidden.
"""

from __future__ import annotations

from collections import deque

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.params import ParamSpace
from twinloop.tasks.base import Task
from twinloop.twin.engine import Engine
from twinloop.worlds.base import SimWorld, World, check_task


class TwinWorld(SimWorld):
    """The task's scene with parameter values, actuation delay, observation noise and engine
    settings, each optional.

    Args:
        task: the task (its nominal model is the starting point).
        params: ``(n,)`` values of ``space`` written into the model (default: nominal).
        space: the parameter space of ``params`` (default: ``task.param_space()``).
        delay_steps: actuation delay in physics steps of the *task's* timestep (what
            calibration estimates); rescaled when ``engine`` changes the timestep.
        obs_noise: ``(len(task.obs_names),)`` Gaussian observation noise std per entry
            (default: none), seeded by ``reset(seed)``.
        engine: solver settings (default: the model's own).
        period: world time (s) per ``step`` (default: the task's control period), as
            :class:`~twinloop.worlds.base.SimWorld`.

    Attributes:
        params: the parameter values in the model (``(n,)``).
        param_space: their space.
        delay_steps: actuation delay in this world's physics steps.
        obs_noise: ``(n_obs,)`` noise std.
        engine: the engine settings.
    """

    name = "twin"
    has_hidden_params = True
    counterpart = None  # its parameters, delay and noise are the caller's

    def __init__(self, task: Task, params=None, *, space: ParamSpace | None = None, delay_steps: int = 0,
                 obs_noise=None, engine: Engine | None = None, period: float | None = None):
        check_task(task, type(self).__name__)
        self.param_space = space if space is not None else task.param_space()
        self.params = self.param_space.nominal if params is None else self.param_space.check(
            as_array(params, "params", (len(self.param_space),)), "params")
        self.engine = engine or Engine()
        model = task.model if params is None else self.param_space.apply(task.model, self.params)
        model = self.engine.apply(model)
        super().__init__(task, model, period)
        if isinstance(delay_steps, bool) or int(delay_steps) != delay_steps or delay_steps < 0:
            raise TwinloopError(f"delay_steps must be an integer >= 0, got {delay_steps!r}")
        self.delay_steps = int(round(delay_steps * task.model.opt.timestep / model.opt.timestep))
        n_obs = len(task.obs_names)
        self.obs_noise = np.zeros(n_obs) if obs_noise is None else as_array(obs_noise, "obs_noise", (n_obs,))
        if np.any(self.obs_noise < 0):
            raise TwinloopError(f"obs_noise must be >= 0, got {self.obs_noise}")
        self._queue: deque[np.ndarray] = deque()

    def reset(self, seed: int) -> np.ndarray:
        obs = super().reset(seed)  # seeds self.rng, then observes once (noise drawn from it)
        hold = self.data.ctrl.copy()
        self._queue = deque(hold.copy() for _ in range(self.delay_steps))
        return obs

    def step(self, action) -> tuple[np.ndarray, dict]:
        a = self._check_action(action)
        for _ in range(self.substeps):
            # the command sent now reaches the actuators delay_steps physics steps later
            self._queue.append(a.copy())
            self.data.ctrl[:] = self._queue.popleft()
            self._physics_step()
        self.t += 1
        return self._observe(), self.info()

    def _observe(self) -> np.ndarray:
        obs = self.task.obs_from_data(self.model, self.data)
        if self.obs_noise.any():
            obs = obs + self.rng.normal(0.0, 1.0, obs.shape) * self.obs_noise
        return obs

    def describe(self) -> dict:
        """JSON-serializable: the parameter values, noise, delay and solver settings."""
        opt = self.model.opt
        space = self.param_space
        return {
            "world": self.name,
            "task": self.task.name,
            "params": {n: float(v) for n, v in zip(space.names, self.params, strict=True)},
            "nominal": {n: float(v) for n, v in zip(space.names, space.nominal, strict=True)},
            "obs_noise": {n: float(s) for n, s in zip(self.task.obs_names, self.obs_noise, strict=True)},
            "delay_steps": int(self.delay_steps),
            "delay_s": float(self.delay_steps * opt.timestep),
            "engine": self.engine.label,
            "solver": {
                "integrator": mujoco.mjtIntegrator(opt.integrator).name,
                "cone": mujoco.mjtCone(opt.cone).name,
                "solref_scale": float(self.engine.timeconst),
                "timestep": float(opt.timestep),
            },
        }


class ModelWorld(World):
    """Any twin (e.g. a learned one) stepped one control tick at a time, as a world.

    Each ``step`` rolls the twin out for one tick holding the action, from the current state; a
    twin with several particles (a learned twin's ensemble members) moves to their mean. The
    observation is the task's, read from the state; there is no noise and no delay beyond what
    the twin itself learned. Episodes start from ``task.initial_state`` as every world does.

    Args:
        task: the task.
        twin: a :class:`~twinloop.twin.base.Twin` of ``task.model``'s scene.
    """

    name = "model"

    def __init__(self, task: Task, twin):
        check_task(task, type(self).__name__)
        if getattr(twin, "nu", None) != task.nu:
            raise TwinloopError(f"twin has {twin.nu} actuators but task {task.name!r} has {task.nu}")
        self.task, self.twin = task, twin
        self.substeps = int(round(task.control_period / twin.dt))
        self.data = mujoco.MjData(task.model)
        self.state = np.zeros(task.nstate)
        self.t = 0

    def reset(self, seed: int) -> np.ndarray:
        seed = number(seed, "seed", low=0, integer=True)
        self.state = self.task.initial_state(np.random.default_rng([seed, 0]))
        self.t = 0
        return self._observe()

    def step(self, action) -> tuple[np.ndarray, dict]:
        a = as_array(action, "action", (self.task.nu,))
        r = self.twin.rollout(self.state, np.repeat(a[None, None], self.substeps, axis=1))
        m = self.task.model
        self.state = np.concatenate([r.qpos[:, 0, -1].mean(axis=0), r.qvel[:, 0, -1].mean(axis=0), self.state[m.nq + m.nv :]])
        self.t += 1
        return self._observe(), self.info()

    def info(self) -> dict:
        m = self.task.model
        return {"time": self.t * self.task.control_period, "tick": self.t, "qpos": self.state[: m.nq].copy(),
                "qvel": self.state[m.nq : m.nq + m.nv].copy()}

    def _observe(self) -> np.ndarray:
        m, d = self.task.model, self.data
        d.qpos[:], d.qvel[:] = self.state[: m.nq], self.state[m.nq : m.nq + m.nv]
        mujoco.mj_forward(m, d)
        return self.task.obs_from_data(m, d)

    def describe(self) -> dict:
        return {"world": self.name, "task": self.task.name, "twin": type(self.twin).__name__}


__all__ = ["ModelWorld", "TwinWorld"]
