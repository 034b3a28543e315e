"""Another engine as the world: a planar pushing task rebuilt in PyBullet (``[bullet]`` extra).

Same geometry and goal as the task's MuJoCo scene (the floor, the pusher sphere, the block's
boxes, their masses and centre of mass are read from ``task.model``), but PyBullet's own
physics, different in kind from the twin's:

- contacts: Bullet's constraint solver; a contact's friction is the *product* of the two
  bodies' coefficients (MuJoCo: the larger), so pusher-block and block-floor friction differ;
  no contact softness to match MuJoCo's ``solref``;
- the block is a free rigid body (the twin's block slides and yaws on joints, it cannot tip);
- the pusher is dragged to the commanded target by a fixed constraint with a force limit
  (a kinematic, force-limited stage), not MuJoCo's PD servo with its lag;
- Bullet's time step (1/240 s) instead of the twin's 5 ms.

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
    """A planar pushing task (a pusher body with slide joints ``pusher_x``/``pusher_y`` and a
    block body with ``block_x``, ``block_y``, ``block_z``, ``block_yaw``) in PyBullet.

    Args:
        task: block-push or push-t (or any task with that scene layout).
        floor_friction, block_friction, pusher_friction: Bullet's per-body coefficients
            (a contact takes the product: block-floor 1.0 x 0.5, pusher-block 0.6 x 0.5).
        pusher_force: the stage's force limit (N; default: the scene's actuator limit).
        noise: observation noise level (ShiftedWorld severity 0-3).
    """

    name = "bullet"
    records_twin_state = True

    def __init__(self, task: Task, floor_friction: float = 1.0, block_friction: float = 0.5,
                 pusher_friction: float = 0.6, pusher_force: float | None = None, noise: int = 1):
        try:
            import pybullet
        except ImportError as exc:
            raise TwinloopError("the bullet world needs PyBullet: pip install 'twinloop[bullet]'") from exc
        self.pb = pybullet
        self.task = task
        m = task.model
        for j in ("pusher_x", "pusher_y", "block_x", "block_y", "block_z", "block_yaw"):
            if mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j) < 0:
                raise TwinloopError(f"the bullet world rebuilds planar pushing scenes; task {task.name!r} has no joint {j!r}")
        self.frictions = {k: number(v, k, low=0) for k, v in (("floor_friction", floor_friction),
                                                              ("block_friction", block_friction),
                                                              ("pusher_friction", pusher_friction))}
        limit = float(np.abs(m.actuator_forcerange).max()) if m.actuator_forcelimited.any() else 20.0
        self.pusher_force = limit if pusher_force is None else number(pusher_force, "pusher_force", low=0, low_open=True)
        self.obs_noise = noise_scales(task, number(noise, "noise", low=0, high=3, integer=True))
        self.period = float(task.control_period)
        self.substeps = int(round(task.control_period / DT))
        self._data = mujoco.MjData(m)
        self.client = pybullet.connect(pybullet.DIRECT)
        self._build()
        self.rng = np.random.default_rng(0)
        self.t = 0
        self._started = False

    # -- scene ---------------------------------------------------------------------------------

    def _build(self) -> None:
        pb, c, m = self.pb, self.client, self.task.model
        pb.resetSimulation(physicsClientId=c)
        pb.setGravity(0, 0, -9.81, physicsClientId=c)
        pb.setTimeStep(DT, physicsClientId=c)
        self.floor = pb.createMultiBody(0, pb.createCollisionShape(pb.GEOM_PLANE, physicsClientId=c), physicsClientId=c)
        block, pusher = m.body("block"), m.body("pusher")
        geoms = [g for g in range(m.ngeom) if m.geom_bodyid[g] == block.id]
        if any(int(m.geom_type[g]) != int(mujoco.mjtGeom.mjGEOM_BOX) for g in geoms):
            raise TwinloopError("the bullet world rebuilds blocks made of boxes only")
        shape = pb.createCollisionShapeArray([pb.GEOM_BOX] * len(geoms), halfExtents=[list(m.geom_size[g]) for g in geoms],
                                             collisionFramePositions=[list(m.geom_pos[g]) for g in geoms],
                                             physicsClientId=c)
        self._ipos = np.array(block.ipos)  # centre of mass in the block frame
        self._block_z0 = float(block.pos[2])
        self.block = pb.createMultiBody(float(block.mass[0]), shape, basePosition=list(block.pos),
                                        baseInertialFramePosition=list(self._ipos), physicsClientId=c)
        radius = float(m.geom_size[m.body_geomadr[pusher.id], 0])
        self._pusher_z = float(pusher.pos[2])
        self.pusher = pb.createMultiBody(float(pusher.mass[0]), pb.createCollisionShape(pb.GEOM_SPHERE, radius=radius,
                                                                                        physicsClientId=c),
                                         basePosition=list(pusher.pos), physicsClientId=c)
        pb.setCollisionFilterPair(self.pusher, self.floor, -1, -1, 0, physicsClientId=c)  # it glides above the floor
        for body, key in ((self.floor, "floor_friction"), (self.block, "block_friction"), (self.pusher, "pusher_friction")):
            pb.changeDynamics(body, -1, lateralFriction=self.frictions[key], physicsClientId=c)
        self.stage = pb.createConstraint(self.pusher, -1, -1, -1, pb.JOINT_FIXED, [0, 0, 0], [0, 0, 0],
                                         list(pusher.pos), physicsClientId=c)
        pb.changeConstraint(self.stage, maxForce=self.pusher_force, physicsClientId=c)

    # -- world protocol ----------------------------------------------------------------------

    def reset(self, seed: int) -> np.ndarray:
        pb, c = self.pb, self.client
        seed = number(seed, "seed", low=0, integer=True)
        self.rng = np.random.default_rng(seed)
        state = self.task.initial_state(np.random.default_rng([seed, 0]))
        px, py, bx, by, bz, yaw = state[:6]
        pb.resetBasePositionAndOrientation(self.pusher, [px, py, self._pusher_z], [0, 0, 0, 1], physicsClientId=c)
        pb.resetBaseVelocity(self.pusher, [0, 0, 0], [0, 0, 0], physicsClientId=c)
        q = pb.getQuaternionFromEuler([0, 0, yaw])
        R = np.array(pb.getMatrixFromQuaternion(q)).reshape(3, 3)
        com = np.array([bx, by, self._block_z0 + bz]) + R @ self._ipos
        pb.resetBasePositionAndOrientation(self.block, list(com), q, physicsClientId=c)
        pb.resetBaseVelocity(self.block, [0, 0, 0], [0, 0, 0], physicsClientId=c)
        self._target = self.task.hold_action(state)
        pb.changeConstraint(self.stage, [*self._target, self._pusher_z], maxForce=self.pusher_force, physicsClientId=c)
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
        pb, c = self.pb, self.client
        pb.changeConstraint(self.stage, [float(a[0]), float(a[1]), self._pusher_z], maxForce=self.pusher_force,
                            physicsClientId=c)
        for _ in range(self.substeps):
            pb.stepSimulation(physicsClientId=c)
        self.t += 1
        return self._observe(), self.info()

    def _qpos_qvel(self) -> tuple[np.ndarray, np.ndarray]:
        """The Bullet state in the twin's coordinates (the block frame's origin, not its centre
        of mass; yaw about z)."""
        pb, c = self.pb, self.client
        ppos, _ = pb.getBasePositionAndOrientation(self.pusher, physicsClientId=c)
        pvel, _ = pb.getBaseVelocity(self.pusher, physicsClientId=c)
        com, quat = pb.getBasePositionAndOrientation(self.block, physicsClientId=c)
        v, w = pb.getBaseVelocity(self.block, physicsClientId=c)
        R = np.array(pb.getMatrixFromQuaternion(quat)).reshape(3, 3)
        r = R @ self._ipos
        origin = np.array(com) - r
        v_origin = np.array(v) - np.cross(w, r)
        yaw = pb.getEulerFromQuaternion(quat)[2]
        qpos = np.array([ppos[0], ppos[1], origin[0], origin[1], origin[2] - self._block_z0, yaw])
        qvel = np.array([pvel[0], pvel[1], v_origin[0], v_origin[1], v_origin[2], w[2]])
        return qpos, qvel

    def info(self) -> dict:
        qpos, qvel = self._qpos_qvel()
        return {"time": self.t * self.task.control_period, "tick": self.t, "qpos": qpos, "qvel": qvel}

    def _observe(self) -> np.ndarray:
        d = self._data
        d.qpos[:], d.qvel[:] = self._qpos_qvel()
        obs = self.task.obs_from_data(self.task.model, d)
        return obs + self.rng.normal(0.0, 1.0, obs.shape) * self.obs_noise

    def describe(self) -> dict:
        return {"world": self.name, "task": self.task.name, "engine": "pybullet", "timestep": DT,
                **self.frictions, "pusher_force": self.pusher_force,
                "obs_noise": {n: float(s) for n, s in zip(self.task.obs_names, self.obs_noise, strict=True)}}

    def close(self) -> None:
        if self.client is not None and self.pb.isConnected(self.client):
            self.pb.disconnect(self.client)
        self.client = None
