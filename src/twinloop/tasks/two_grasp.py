"""Two pinch grippers on one deformable: what a two-armed grasp task shares.

Each gripper is :mod:`twinloop.tasks.deformable`'s (a sphere on its own XYZ stage, PD position
actuators, gravity compensated) and has its own grasp: a spatial tendon to one point of the
object, pulled by an actuator whose activation lives in ``act``. The two grasps share nothing:
each pulls only its own point, with its own activation, and both are in the twin state
``[qpos, qvel, act]``, so a rollout that starts with either or both mid-grasp continues them
exactly.

Scene contract: joints ``left_x, left_y, left_z, right_x, right_y, right_z`` first (qpos and
qvel ``0..5``), actuators ``left_x, left_y, left_z, left_grasp, right_x, right_y, right_z,
right_grasp`` (so the action is one block of four per gripper, each laid out as the one-armed
tasks' action), two activations ``(left, right)``, sites ``left_grip``/``right_grip`` and
sensors ``left_gripper``, ``left_grasp_target``, ``right_gripper``, ``right_grasp_target``.

Observation (``14 + 6 n``): both grippers' x, y, z (m, left then right), their velocities
(m/s), both grasp activations (0-1, exact: the robot commands them), then each keypoint's x, y, z
and its velocity. Action (8,): per gripper its target x, y, z (m) and grasp command (0-1).

Cost: as the one-armed tasks' (keypoint distance running and final, effort), with the hold and
release terms once per gripper. Success: mean keypoint distance <= ``tolerance``, the scored
points on the table and both grippers released.
"""

from __future__ import annotations

from functools import cached_property

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array
from twinloop.modifiers import record_flex_materials
from twinloop.tasks.base import Residual, Traj
from twinloop.tasks.deformable import GraspTask
from twinloop.tasks.keypoints import KeypointEstimator, add_keypoint_sites

ARMS = ("left", "right")
ARM_JOINTS = tuple(f"{a}_{c}" for a in ARMS for c in "xyz")
XYZ = np.array([0, 1, 2, 4, 5, 6])  # the gripper targets among the 8 actions
GRASP = np.array([3, 7])  # the grasp commands


class TwoGraspTask(GraspTask):
    """Base of the two-gripper deformable tasks (see the module docstring).

    Subclass attributes as :class:`~twinloop.tasks.deformable.GraspTask`'s, with the grasp
    given per gripper (left, right): ``grasp_bodies``, ``grasp_offsets``, ``grasp_points``.
    """

    grasp_bodies: tuple[str, str] = ("", "")
    grasp_offsets: tuple[tuple[float, float, float], ...] = ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    grasp_points: tuple[str, str] = ("", "")

    def __init__(self, weights: dict | None = None, settle_steps: int = 10):
        self._options(weights, settle_steps)
        m = self.model
        names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(6)]
        if names != list(ARM_JOINTS) or m.nu != 8 or m.na != 2:
            raise TwinloopError(f"{self.name}: the scene must start with joints {ARM_JOINTS} and have 8 actuators "
                                "(per gripper x, y, z, grasp) and two activations")
        adr = self._index_points()
        self._s_grips = np.array([adr(f"{a}_gripper") for a in ARMS])
        self._s_targets = np.array([adr(f"{a}_grasp_target") for a in ARMS])
        self._grip_sites = np.array([m.site(f"{a}_grip").id for a in ARMS])
        self._target_sites = np.array([m.site(f"{a}_grasp_target").id for a in ARMS])
        self._scratch = mujoco.MjData(m)
        gains = m.actuator_gainprm[GRASP]
        if not np.allclose(gains[0], gains[1]):
            raise TwinloopError(f"{self.name}: the two grasp actuators must have the same gains")
        self.capture_radius = float(-gains[0, 0] / gains[0, 1])

    @property
    def grasp_point(self) -> str:  # the left grasp: what a one-armed reader of the task sees
        return self.grasp_points[0]

    def spec(self) -> mujoco.MjSpec:
        """The scene with both grasp targets and the keypoint sites added, flex materials recorded."""
        spec = super(GraspTask, self).spec()
        for arm, body_name, offset in zip(ARMS, self.grasp_bodies, self.grasp_offsets, strict=True):
            body = spec.body(body_name)
            if body is None:
                raise TwinloopError(f"{self.name}: no grasp body {body_name!r} in the scene")
            body.add_site(name=f"{arm}_grasp_target", pos=list(offset), size=[0.002] * 3)
        add_keypoint_sites(spec, self.points)
        return record_flex_materials(spec)

    @cached_property
    def estimator(self) -> KeypointEstimator:
        """The keypoint -> twin state map (both grippers observed directly)."""
        return KeypointEstimator(self.spec(), self.keypoints, self.guess, range(6), self.settle_steps)

    # -- observation -------------------------------------------------------------------------

    @cached_property
    def obs_names(self) -> tuple[str, ...]:
        kp = [f"{k.name}_{c}" for k in self.keypoints for c in ("x", "y", "z")]
        kv = [f"{k.name}_{c}" for k in self.keypoints for c in ("vx", "vy", "vz")]
        return (*ARM_JOINTS, *(f"{j[:-1]}v{j[-1]}" for j in ARM_JOINTS), *(f"{a}_grasp" for a in ARMS), *kp, *kv)

    def obs_units(self) -> tuple[str, ...]:
        """Positions m, velocities m/s, the grasp activations dimensionless (``1``: exact)."""
        return tuple("1" if n.endswith("_grasp") else "m/s" if n.rsplit("_", 1)[-1].startswith("v") else "m"
                     for n in self.obs_names)

    def obs_from_data(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        vel = np.empty(6)
        kv = []
        sites = self._sites[self._obs]
        for s in sites:
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_SITE, int(s), vel, 0)
            kv.append(vel[3:].copy())
        return np.concatenate([data.qpos[:6], data.qvel[:6], data.act[:2], data.site_xpos[sites].ravel(), np.ravel(kv)])

    def split_obs(self, obs) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(grippers (6,), their velocities (6,), grasp activations (2,), points (n, 3),
        velocities (n, 3))``, grippers left then right."""
        o = self.check_obs(obs)
        n = len(self.keypoints)
        return o[0:6], o[6:12], o[12:14], o[14 : 14 + 3 * n].reshape(n, 3), o[14 + 3 * n :].reshape(n, 3)

    def state_from_obs(self, obs) -> np.ndarray:
        g, gv, act, pts, vel = self.split_obs(obs)
        return self.estimator(g, gv, act, pts, vel, self.settle_ctrl(g, act))

    def settle_ctrl(self, gripper, act) -> np.ndarray:
        """Controls ``(8,)`` that hold both grippers where they were seen (``(6,)``) and both
        grasps as they are (``(2,)``) while an estimate settles."""
        a = np.empty(8)
        a[XYZ], a[GRASP] = gripper, np.ravel(act)
        return np.clip(a, self.action_low, self.action_high)

    # -- geometry ----------------------------------------------------------------------------

    def grasp_gap(self, qpos) -> np.ndarray:
        """``(..., 2)`` distance (m) from each gripper to its grasped point (left, right)."""
        q = as_array(qpos, "qpos")
        flat = q.reshape(-1, self.model.nq)
        m, d = self.model, self._scratch
        out = np.empty((len(flat), 2))
        for i, row in enumerate(flat):
            d.qpos[:] = row
            mujoco.mj_kinematics(m, d)
            out[i] = np.linalg.norm(d.site_xpos[self._grip_sites] - d.site_xpos[self._target_sites], axis=-1)
        return out.reshape(*q.shape[:-1], 2)

    def success(self, qpos) -> bool:
        """Mean keypoint error <= ``tolerance``, every scored keypoint on the table and both
        grippers released (each beyond the capture radius of its grasped point)."""
        q = as_array(qpos, "qpos", (self.model.nq,))
        kp = self.keypoint_positions(q)[self._err]
        return bool(np.linalg.norm(kp - self.goal, axis=-1).mean() <= self.tolerance
                    and kp[:, 2].max() <= self.landed and self.grasp_gap(q).min() >= self.capture_radius)

    # -- cost --------------------------------------------------------------------------------

    def residuals(self) -> tuple[Residual, ...]:
        n = len(self._err)
        goal, scale, rc = self.goal, self.tolerance * np.sqrt(n), self.capture_radius

        def kp_error(s):  # (..., n, 3) -> (..., 3n)
            d = self._sensor_points(s)[..., self._err, :] - goal
            return d.reshape(*d.shape[:-2], 3 * n) / scale

        def gaps(s):  # (..., 2): each gripper to its grasped point
            grip = s[..., self._s_grips[:, None] + np.arange(3)]
            return np.linalg.norm(grip - s[..., self._s_targets[:, None] + np.arange(3)], axis=-1)

        def hold(t: Traj):  # per gripper, while its grasp is commanded
            lag = np.maximum(gaps(t.sensordata[..., :-1, :]) - 0.5 * rc, 0.0)
            return t.ctrl[..., GRASP] * lag / (0.25 * rc)

        def release(t: Traj):  # per gripper, weighted in as the shape nears its goal
            s = t.sensordata[..., -1, :]
            short = np.maximum(1.5 * rc - gaps(s), 0.0) / rc
            near = 1.0 / (1.0 + (np.linalg.norm(kp_error(s), axis=-1) / 2.0) ** 2)
            return short * near[..., None]

        w = self.weights
        return (
            Residual("keypoints", w["keypoints"], lambda t: kp_error(t.sensordata[..., 1:, :])),
            Residual("final_keypoints", w["final_keypoints"], lambda t: kp_error(t.sensordata[..., -1, :]), terminal=True),
            Residual("hold", w["hold"], hold),
            Residual("release", w["release"], release, terminal=True),
            Residual("effort", w["effort"], lambda t: (t.ctrl[..., XYZ] - t.qpos[..., :-1, 0:6]) / 0.1),
        )

    # -- hooks -------------------------------------------------------------------------------

    def hold_action(self, state: np.ndarray) -> np.ndarray:
        """Keep both grippers where they are and both grasps as they are."""
        s = np.asarray(state, dtype=float)
        m = self.model
        return self.settle_ctrl(s[0:6], s[m.nq + m.nv : m.nq + m.nv + 2])

    def candidate_sources(self, options=None) -> tuple:
        """None: the one-armed tasks' repair places a single grasped point."""
        return ()

    def repair_primitive(self, *args, **kw):
        raise TwinloopError(f"task {self.name!r} has no repair primitive (it has two grippers)")

    def trace_points(self, qpos, sensordata) -> np.ndarray:
        """Both grippers and the traced keypoints."""
        s = np.asarray(sensordata)
        grips = s[..., self._s_grips[:, None] + np.arange(3)]
        return np.concatenate([grips, self._sensor_points(s)[..., self._trace, :]], axis=-2)

    def excitation(self, seed: int, kind: str = "excite"):
        """``excite``: every 12 ticks each gripper grasps its own point, carries it to its own
        random spot (random height) and drops it: lifts, drags, drops, one point or two at once.
        Other kinds: see :meth:`Task.excitation`."""
        if kind != "excite":
            return super(GraspTask, self).excitation(seed, kind)
        rng = np.random.default_rng([seed, 7])
        names = [k.name for k in self.keypoints]
        grasped = [names.index(p) for p in self.grasp_points]
        mem: dict = {}

        def f(obs, k):
            g, _, _, pts, _ = self.split_obs(obs)
            ph = k % 12
            if ph == 0:
                mem["to"] = rng.uniform([-0.12, -0.12, 0.02], [0.12, 0.12, 0.12], (2, 3))
            a = np.empty(8)
            for i, j in enumerate(grasped):
                grip, target = g[3 * i : 3 * i + 3], pts[j]
                if ph < 3:
                    a[4 * i : 4 * i + 4] = [*target[:2], target[2] + 0.04, 0.0]
                elif ph < 5:
                    a[4 * i : 4 * i + 4] = [*target[:2], target[2] + 0.008, 1.0]
                elif ph < 10:
                    a[4 * i : 4 * i + 4] = [*(grip + np.clip(mem["to"][i] - grip, -0.04, 0.04)), 1.0]
                else:
                    a[4 * i : 4 * i + 4] = [*grip[:2], grip[2] + 0.03, 0.0]
            return np.clip(a, self.action_low, self.action_high)

        return f


class TwoArmScript:
    """Two one-armed scripts run side by side: ``propose(obs, state) -> (H, 8)``, the left
    script's ``(H, 4)`` chunk then the right's (each script reads its own gripper and grasp from
    the state, e.g. :class:`~twinloop.tasks.deformable.SwingScript` with ``arm=0`` and ``arm=1``)."""

    def __init__(self, left, right):
        self.scripts = (left, right)
        self.H = min(s.H for s in self.scripts)

    def reset(self, seed: int | None = None) -> None:
        for s in self.scripts:
            s.reset(seed)

    def propose(self, obs, state) -> np.ndarray:
        """``(H, 8)`` actions per control tick."""
        return np.concatenate([s.propose(obs, state)[: self.H] for s in self.scripts], axis=1)
