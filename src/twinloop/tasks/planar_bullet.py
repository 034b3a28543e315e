"""The planar pushing scenes (block-push, push-t) rebuilt in PyBullet, for
:class:`~twinloop.worlds.BulletWorld` (``[bullet]`` extra).

Same geometry and goal as the task's MuJoCo scene (the floor, the pusher sphere, the block's
boxes, their masses and centre of mass are read from ``task.model``), but PyBullet's own
physics, different in kind from the twin's:

- contacts: Bullet's constraint solver; a contact's friction is the *product* of the two
  bodies' coefficients (MuJoCo: the larger), so pusher-block and block-floor friction differ;
  no contact softness to match MuJoCo's ``solref``;
- the block is a free rigid body (the twin's block slides and yaws on joints, it cannot tip);
- the pusher is dragged to the commanded target by a fixed constraint with a force limit
  (a kinematic, force-limited stage), not MuJoCo's PD servo with its lag.
"""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, number

_JOINTS = ("pusher_x", "pusher_y", "block_x", "block_y", "block_z", "block_yaw")


class PlanarPushScene:
    """A planar pushing scene (a pusher body with slide joints ``pusher_x``/``pusher_y`` and a
    block body with ``block_x``, ``block_y``, ``block_z``, ``block_yaw``) built in a PyBullet
    client; the protocol :meth:`Task.bullet_scene <twinloop.tasks.Task.bullet_scene>` returns.

    Args:
        task: block-push or push-t (or any task with that scene layout).
        pb, client: the ``pybullet`` module and a connected client.
        floor_friction, block_friction, pusher_friction: Bullet's per-body coefficients
            (a contact takes the product: block-floor 1.0 x 0.5, pusher-block 0.6 x 0.5).
        pusher_force: the stage's force limit (N; default: the scene's actuator limit).
    """

    def __init__(self, task, pb, client: int, floor_friction: float = 1.0, block_friction: float = 0.5,
                 pusher_friction: float = 0.6, pusher_force: float | None = None):
        m = task.model
        for j in _JOINTS:
            if mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j) < 0:
                raise TwinloopError(f"the bullet world rebuilds planar pushing scenes; task {task.name!r} has no joint {j!r}")
        self.task, self.pb, self.client = task, pb, client
        self.frictions = {k: number(v, k, low=0) for k, v in (("floor_friction", floor_friction),
                                                              ("block_friction", block_friction),
                                                              ("pusher_friction", pusher_friction))}
        limit = float(np.abs(m.actuator_forcerange).max()) if m.actuator_forcelimited.any() else 20.0
        self.pusher_force = limit if pusher_force is None else number(pusher_force, "pusher_force", low=0, low_open=True)
        self._build()

    def _build(self) -> None:
        pb, c, m = self.pb, self.client, self.task.model
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

    def reset(self, state: np.ndarray) -> None:
        """Place the pusher and the block at the twin ``state``, at rest, the stage holding."""
        pb, c = self.pb, self.client
        px, py, bx, by, bz, yaw = state[:6]
        pb.resetBasePositionAndOrientation(self.pusher, [px, py, self._pusher_z], [0, 0, 0, 1], physicsClientId=c)
        pb.resetBaseVelocity(self.pusher, [0, 0, 0], [0, 0, 0], physicsClientId=c)
        q = pb.getQuaternionFromEuler([0, 0, yaw])
        R = np.array(pb.getMatrixFromQuaternion(q)).reshape(3, 3)
        com = np.array([bx, by, self._block_z0 + bz]) + R @ self._ipos
        pb.resetBasePositionAndOrientation(self.block, list(com), q, physicsClientId=c)
        pb.resetBaseVelocity(self.block, [0, 0, 0], [0, 0, 0], physicsClientId=c)
        self.act(self.task.hold_action(state))

    def act(self, action: np.ndarray) -> None:
        """Command the stage to the ``(2,)`` pusher target; it holds until the next command."""
        self.pb.changeConstraint(self.stage, [float(action[0]), float(action[1]), self._pusher_z],
                                 maxForce=self.pusher_force, physicsClientId=self.client)

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """``(qpos, qvel)`` in the twin's coordinates (the block frame's origin, not its centre
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

    def describe(self) -> dict:
        return {**self.frictions, "pusher_force": self.pusher_force}
