"""A second engine of another kind as the world: a planar pushing task rebuilt in Pymunk
(Chipmunk2D, ``[pymunk]`` extra), a 2-D rigid-body engine.

Same geometry and goal as the task's MuJoCo scene (the block's boxes seen from above, the
pusher's radius, the masses and the block's centre of mass are read from ``task.model``), but
Pymunk's own physics, different in kind from the twin's 3-D contacts:

- the floor is not a contact: seen from above, the block's sliding friction is a pivot joint
  to the static world whose force is capped at ``mu m g`` (and its turning friction a gear
  joint capped at ``mu m g r``, ``r`` the block's mean distance from its centre of mass): the
  top-down friction of Pymunk's own examples, a rigid stick-slip law with no contact softness;
- pusher and block meet as 2-D shapes (no heights, no tipping), their friction the *product*
  of the two coefficients (MuJoCo: the larger), no restitution;
- the pusher is pulled toward the commanded target by a pivot joint capped at the scene's
  actuator force and at the speed its PD stage settles to (force limit / damping), not by
  MuJoCo's PD servo;
- Chipmunk's iterative impulse solver at its own step (``DT``).

Observations have the task's layout (the Pymunk state is written into a MuJoCo ``MjData`` and
read by ``task.obs_from_data``), with the observation noise of ShiftedWorld severity ``noise``.
"""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.tasks.base import Task
from twinloop.worlds.base import World
from twinloop.worlds.shifted import noise_scales

DT = 1.0 / 200.0
G = 9.81
JOINTS = ("pusher_x", "pusher_y", "block_x", "block_y", "block_z", "block_yaw")


def block_boxes(model: mujoco.MjModel) -> list[np.ndarray]:
    """The block's box geoms seen from above: one ``(4, 2)`` corner array each, in the block's
    frame (m)."""
    block = model.body("block").id
    boxes = []
    for g in np.flatnonzero(model.geom_bodyid == block):
        if int(model.geom_type[g]) != int(mujoco.mjtGeom.mjGEOM_BOX):
            raise TwinloopError("the pymunk world rebuilds blocks made of boxes only")
        q = model.geom_quat[g]
        yaw = np.arctan2(2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] ** 2 + q[3] ** 2))
        c, s = np.cos(yaw), np.sin(yaw)
        sx, sy = model.geom_size[g, :2]
        corners = np.array([[-sx, -sy], [sx, -sy], [sx, sy], [-sx, sy]]) @ np.array([[c, s], [-s, c]])
        boxes.append(corners + model.geom_pos[g, :2])
    return boxes


def mean_radius(boxes: list[np.ndarray], center: np.ndarray, n: int = 24) -> float:
    """Mean distance (m) of the boxes' area from ``center``: the lever arm of turning friction."""
    d = []
    for b in boxes:
        u = (np.arange(n) + 0.5) / n
        a, c = np.meshgrid(u, u)
        p = b[0] + a.reshape(-1, 1) * (b[1] - b[0]) + c.reshape(-1, 1) * (b[3] - b[0])
        d.append(np.linalg.norm(p - center, axis=1))
    return float(np.mean(np.concatenate(d)))


class PymunkWorld(World):
    """A planar pushing task (a pusher on slide joints ``pusher_x``/``pusher_y`` and a block on
    ``block_x``, ``block_y``, ``block_z``, ``block_yaw``) in Pymunk.

    Args:
        task: block-push or push-t (or any task with that scene layout).
        floor_friction: the block's sliding friction on the floor (``mu`` of ``mu m g``).
        block_friction, pusher_friction: the shapes' coefficients (their contact: the product).
        noise: observation noise level (ShiftedWorld severity 0-3).
    """

    name = "pymunk"

    def __init__(self, task: Task, floor_friction: float = 0.5, block_friction: float = 0.5,
                 pusher_friction: float = 0.6, noise: int = 1):
        try:
            import pymunk
        except ImportError as exc:
            raise TwinloopError("the pymunk world needs Pymunk: pip install 'twinloop[pymunk]'") from exc
        self.pm, self.task = pymunk, task
        m = task.model
        for j in JOINTS:
            if mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j) < 0:
                raise TwinloopError(f"the pymunk world rebuilds planar pushing scenes; task {task.name!r} has no joint {j!r}")
        if list(m.jnt_qposadr[[m.joint(j).id for j in JOINTS]]) != list(range(6)):
            raise TwinloopError(f"the pymunk world needs the joints {JOINTS} first and in that order in task {task.name!r}")
        self.frictions = {k: number(v, k, low=0) for k, v in (("floor_friction", floor_friction),
                                                              ("block_friction", block_friction),
                                                              ("pusher_friction", pusher_friction))}
        self.obs_noise = noise_scales(task, number(noise, "noise", low=0, high=3, integer=True))
        self.noise = int(noise)
        self.period = float(task.control_period)
        self.substeps = int(round(task.control_period / DT))
        self._data = mujoco.MjData(m)
        self.rng = np.random.default_rng(0)
        self.t = 0
        self._started = False

    def _stage_limits(self) -> tuple[float, float]:
        """``(force N, speed m/s)`` of the pusher's stage from the scene's actuators."""
        m = self.task.model
        force = float(np.abs(m.actuator_forcerange).max()) if m.actuator_forcelimited.any() else 20.0
        kd = float(np.abs(m.actuator_biasprm[:, 2]).max()) if m.nu else 0.0
        return force, (force / kd if kd > 0 else 1.0)

    def _build(self) -> None:
        """A fresh space (Chipmunk keeps contact caches: a new one per episode is deterministic)."""
        pm, m, fr = self.pm, self.task.model, self.frictions
        self.space = space = pm.Space()
        space.iterations = 20
        static = space.static_body
        block, pusher = m.body("block"), m.body("pusher")
        boxes = block_boxes(m)
        cog = np.array(block.ipos[:2])
        mass = float(block.mass[0])
        areas = np.array([abs(np.linalg.det(np.stack([b[1] - b[0], b[3] - b[0]]))) for b in boxes])
        moment = sum(pm.moment_for_poly(mass * a / areas.sum(), [tuple(p) for p in b], (-cog[0], -cog[1]))
                     for a, b in zip(areas, boxes, strict=True))
        self.block = pm.Body(mass, moment)
        self.block.center_of_gravity = tuple(cog)
        space.add(self.block)
        for b in boxes:
            shape = pm.Poly(self.block, [tuple(p) for p in b])
            shape.friction, shape.elasticity = fr["block_friction"], 0.0
            space.add(shape)
        slide = pm.PivotJoint(static, self.block, (0, 0), (0, 0))
        slide.max_bias, slide.max_force = 0.0, fr["floor_friction"] * mass * G
        turn = pm.GearJoint(static, self.block, 0.0, 1.0)
        turn.max_bias, turn.max_force = 0.0, fr["floor_friction"] * mass * G * mean_radius(boxes, cog)
        space.add(slide, turn)
        radius = float(m.geom_size[m.body_geomadr[pusher.id], 0])
        pmass = float(pusher.mass[0])
        self.pusher = pm.Body(pmass, pm.moment_for_circle(pmass, 0, radius))
        ball = pm.Circle(self.pusher, radius)
        ball.friction, ball.elasticity = fr["pusher_friction"], 0.0
        self.target = pm.Body(body_type=pm.Body.KINEMATIC)
        force, speed = self._stage_limits()
        stage = pm.PivotJoint(self.target, self.pusher, (0, 0), (0, 0))
        stage.max_force, stage.max_bias = force, speed
        spin = pm.GearJoint(static, self.pusher, 0.0, 1.0)  # the stage does not let it roll
        space.add(self.pusher, ball, self.target, stage, spin)

    def reset(self, seed: int) -> np.ndarray:
        seed = number(seed, "seed", low=0, integer=True)
        self.rng = np.random.default_rng(seed)
        state = self.task.initial_state(np.random.default_rng([seed, 0]))
        px, py, bx, by, _, yaw = state[:6]
        self._build()
        self.pusher.position = (float(px), float(py))
        self.block.angle = float(yaw)  # first: Chipmunk turns a body about its centre of gravity
        self.block.position = (float(bx), float(by))
        target = self.task.hold_action(state)
        self.target.position = (float(target[0]), float(target[1]))
        self.space.reindex_shapes_for_body(self.block)
        self.space.reindex_shapes_for_body(self.pusher)
        self.t = 0
        self._started = True
        return self._observe()

    def step(self, action) -> tuple[np.ndarray, dict]:
        if not self._started:
            raise TwinloopError("PymunkWorld.step called before reset(seed): there is no episode yet")
        a = as_array(action, "action", (self.task.nu,))
        lo, hi = self.task.action_low, self.task.action_high
        if np.any(a < lo - 1e-9) or np.any(a > hi + 1e-9):
            raise TwinloopError(f"action {a} outside bounds [{lo}, {hi}]")
        self.target.position = (float(a[0]), float(a[1]))
        for _ in range(self.substeps):
            self.space.step(DT)
        self.t += 1
        return self._observe(), self.info()

    def _qpos_qvel(self) -> tuple[np.ndarray, np.ndarray]:
        """The Pymunk state in the twin's coordinates (the block body's origin, yaw about z)."""
        p, b = self.pusher, self.block
        v = b.velocity_at_local_point((0, 0))
        qpos = np.array([p.position.x, p.position.y, b.position.x, b.position.y, 0.0, b.angle])
        qvel = np.array([p.velocity.x, p.velocity.y, v.x, v.y, 0.0, b.angular_velocity])
        return qpos, qvel

    def info(self) -> dict:
        qpos, qvel = self._qpos_qvel()
        return {"time": self.t * self.period, "tick": self.t, "qpos": qpos, "qvel": qvel}

    def _observe(self) -> np.ndarray:
        d = self._data
        d.qpos[:6], d.qvel[:6] = self._qpos_qvel()
        obs = self.task.obs_from_data(self.task.model, d)
        return obs + self.rng.normal(0.0, 1.0, obs.shape) * self.obs_noise

    def describe(self) -> dict:
        force, speed = self._stage_limits()
        return {"world": self.name, "task": self.task.name, "engine": "pymunk", "timestep": DT, **self.frictions,
                "pusher_force": force, "pusher_speed": speed, "noise": self.noise,
                "obs_noise": {n: float(s) for n, s in zip(self.task.obs_names, self.obs_noise, strict=True)}}
