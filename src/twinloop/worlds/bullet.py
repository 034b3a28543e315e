"""Another engine as the world: a task's scene rebuilt in PyBullet (``[bullet]`` extra).

The world is generic: it connects a PyBullet client, asks the task for its scene
(:meth:`Task.bullet_scene <twinloop.tasks.Task.bullet_scene>`: built from ``task.model``,
placed at a twin state, commanded by an action, read back as the twin's ``qpos``/``qvel``),
and steps it at Bullet's time step (1/240 s) instead of the twin's. The planar pushing tasks
build theirs in :mod:`twinloop.tasks.planar_bullet`.

Observations have the task's layout (the Bullet state is written into a MuJoCo ``MjData`` and
read by ``task.obs_from_data``), with the observation noise of ShiftedWorld severity ``noise``.
"""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.tasks.base import Task
from twinloop.worlds.base import World
from twinloop.worlds.shifted import noise_scales

DT = 1.0 / 240.0  # Bullet's default step


class BulletWorld(World):
    """A task's scene in PyBullet.

    Args:
        task: a task that builds a PyBullet scene (block-push, push-t).
        noise: observation noise level (ShiftedWorld severity 0-3).
        **scene_options: the task's scene options (the planar pushing scenes: ``floor_friction``,
            ``block_friction``, ``pusher_friction``, ``pusher_force``; see
            :class:`~twinloop.tasks.planar_bullet.PlanarPushScene`).
    """

    name = "bullet"
    records_twin_state = True

    def __init__(self, task: Task, noise: int = 1, **scene_options):
        try:
            import pybullet
        except ImportError as exc:
            raise TwinloopError("the bullet world needs PyBullet: pip install 'twinloop[bullet]'") from exc
        self.pb = pybullet
        self.task = task
        self.obs_noise = noise_scales(task, number(noise, "noise", low=0, high=3, integer=True))
        self.period = float(task.control_period)
        self.substeps = int(round(task.control_period / DT))
        self._data = mujoco.MjData(task.model)
        self.client = pybullet.connect(pybullet.DIRECT)
        try:
            pybullet.resetSimulation(physicsClientId=self.client)
            pybullet.setGravity(0, 0, -9.81, physicsClientId=self.client)
            pybullet.setTimeStep(DT, physicsClientId=self.client)
            self.scene = task.bullet_scene(pybullet, self.client, **scene_options)
        except BaseException:
            self.close()
            raise
        self.rng = np.random.default_rng(0)
        self.t = 0
        self._started = False

    def reset(self, seed: int) -> np.ndarray:
        seed = number(seed, "seed", low=0, integer=True)
        self.rng = np.random.default_rng(seed)
        self.scene.reset(self.task.initial_state(np.random.default_rng([seed, 0])))
        self.t = 0
        self._started = True
        return self._observe()

    def step(self, action) -> tuple[np.ndarray, dict]:
        if not self._started:
            raise TwinloopError("BulletWorld.step called before reset(seed): there is no episode yet")
        a = as_array(action, "action", (self.task.nu,))
        lo, hi = self.task.action_low, self.task.action_high
        if np.any(a < lo - 1e-9) or np.any(a > hi + 1e-9):
            raise TwinloopError(f"action {a} outside bounds [{lo}, {hi}]")
        self.scene.act(a)
        for _ in range(self.substeps):
            self.pb.stepSimulation(physicsClientId=self.client)
        self.t += 1
        return self._observe(), self.info()

    def info(self) -> dict:
        qpos, qvel = self.scene.state()
        return {"time": self.t * self.task.control_period, "tick": self.t, "qpos": qpos, "qvel": qvel}

    def _observe(self) -> np.ndarray:
        d = self._data
        d.qpos[:], d.qvel[:] = self.scene.state()
        obs = self.task.obs_from_data(self.task.model, d)
        return obs + self.rng.normal(0.0, 1.0, obs.shape) * self.obs_noise

    def describe(self) -> dict:
        return {"world": self.name, "task": self.task.name, "engine": "pybullet", "timestep": DT,
                **self.scene.describe(),
                "obs_noise": {n: float(s) for n, s in zip(self.task.obs_names, self.obs_noise, strict=True)}}

    def close(self) -> None:
        if self.client is not None and self.pb.isConnected(self.client):
            self.pb.disconnect(self.client)
        self.client = None
