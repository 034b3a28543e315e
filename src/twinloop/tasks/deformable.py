"""What the deformable tasks share: a pinch gripper, keypoint observations, a keypoint cost.

The gripper is a small sphere on an XYZ stage (slide joints ``gripper_x/y/z``, PD position
actuators, gravity compensated). Its grasp is a spatial tendon from the gripper to one point of
the object (``grasp_target``), pulled by an actuator whose activation, a first-order filter of
the grasp command, lives in ``act`` and so in the twin state ``[qpos, qvel, act]``: a rollout
that starts mid-grasp continues the grasp exactly. The actuator's gain is affine in the tendon
length ``L`` and velocity, clamped to pull only::

    force = clamp(act * (-F + k L - d dL/dt), -F, 0)      capture radius  L_c = F / k

so the grasp holds only a point the gripper is at (within ``L_c``) and slips when that point
lags too far behind: a corner whipped around too fast, or too heavy, is dropped.

Observation (``7 + 6 n``): gripper x, y, z (m), its velocity (m/s), the grasp activation (0-1,
exact: the robot commands it), then each keypoint's x, y, z and its velocity. Action (4,):
gripper target x, y, z (m) and grasp command (0-1). The state comes from the keypoints through
:class:`~twinloop.tasks.keypoints.KeypointEstimator` (a task supplies the interpolation).

Cost: keypoint distance to the goal (running and final), a hold term that keeps a grasped point
close while the grasp is commanded, a terminal release term (end clear of the object) and effort.
Success: mean keypoint distance to the goal <= ``tolerance``, the scored keypoints on the table
(none in flight) and the gripper released (farther than the capture radius from the grasped
point, where the grasp can exert no force).
"""

from __future__ import annotations

from functools import cached_property

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array
from twinloop.params import record_flex_materials
from twinloop.tasks.base import Residual, Task, Traj
from twinloop.tasks.keypoints import Keypoint, KeypointEstimator, add_keypoint_sites

GRIPPER_JOINTS = ("gripper_x", "gripper_y", "gripper_z")


class GraspTask(Task):
    """Base of the gripper-and-deformable tasks (see the module docstring).

    Subclass attributes: ``keypoints`` (observed, in order), ``scored`` (points scored against
    ``goal``, an ``(n, 3)`` array set in ``__init__``; a name shared with a keypoint is the same
    point), ``trace_keypoints`` (names of points drawn as ghost paths), ``grasp_body`` and
    ``grasp_offset`` (the grasped point), ``tolerance`` (m); method ``guess(points, velocities)
    -> (qpos, qvel)`` (the estimator's interpolation).
    """

    camera = "overview"
    keypoints: tuple[Keypoint, ...] = ()
    scored: tuple[Keypoint, ...] = ()
    trace_keypoints: tuple[str, ...] = ()
    grasp_body: str = ""
    grasp_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    tolerance = 0.02
    landed = 0.01  # scored keypoints at most this high (m): the object lies on the table
    settle_steps = 10
    goal: np.ndarray
    WEIGHTS = {"keypoints": 1.0, "final_keypoints": 3.0, "hold": 1.0, "release": 0.5, "effort": 0.02}

    def __init__(self, weights: dict | None = None):
        unknown = sorted(set(weights or {}) - set(self.WEIGHTS))
        if unknown:
            raise TwinloopError(f"unknown {self.name} cost term(s) {unknown}; terms: {', '.join(self.WEIGHTS)}")
        self.weights = {**self.WEIGHTS, **{k: float(v) for k, v in (weights or {}).items()}}
        m = self.model
        names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(3)]
        if names != list(GRIPPER_JOINTS) or m.nu != 4 or m.na != 1:
            raise TwinloopError(f"{self.name}: the scene must start with joints {GRIPPER_JOINTS} and have "
                                "4 actuators (gripper x, y, z, grasp) and one activation")
        by_name = {k.name: i for i, k in enumerate(self.points)}
        self._obs = np.arange(len(self.keypoints))
        self._err = np.array([by_name[k.name] for k in self.scored])
        self._trace = np.array([by_name[n] for n in self.trace_keypoints])
        adr = lambda s: int(m.sensor_adr[m.sensor(s).id])  # noqa: E731
        self._s_grip, self._s_target = adr("gripper"), adr("grasp_target")
        self._s_kp = np.array([adr(f"kp_{k.name}") for k in self.points])
        self._sites = np.array([m.site(f"kp_{k.name}").id for k in self.points])
        self._grip_site, self._target_site = m.site("grip").id, m.site("grasp_target").id
        self._scratch = mujoco.MjData(m)
        # capture radius of the grasp actuator: where -F + k L crosses zero
        g = m.actuator_gainprm[3]
        self.capture_radius = float(-g[0] / g[1])

    # -- scene -------------------------------------------------------------------------------

    @property
    def points(self) -> tuple[Keypoint, ...]:
        """Every tracked point: the observed keypoints, then the scored points not among them."""
        seen = {k.name for k in self.keypoints}
        return self.keypoints + tuple(k for k in self.scored if k.name not in seen)

    def spec(self) -> mujoco.MjSpec:
        """The scene with the grasp target and keypoint sites added (they sit on bodies a
        flexcomp generates, which the XML cannot name) and its flex materials recorded."""
        spec = super().spec()
        body = spec.body(self.grasp_body)
        if body is None:
            raise TwinloopError(f"{self.name}: no grasp body {self.grasp_body!r} in the scene")
        body.add_site(name="grasp_target", pos=list(self.grasp_offset), size=[0.002] * 3)
        add_keypoint_sites(spec, self.points)
        return record_flex_materials(spec)

    @cached_property
    def model(self) -> mujoco.MjModel:
        if not self.xml_path.is_file():
            raise TwinloopError(f"task {self.name!r}: scene file {self.xml_path} does not exist")
        return self.spec().compile()

    @cached_property
    def estimator(self) -> KeypointEstimator:
        """The keypoint -> twin state map used by :meth:`state_from_obs`."""
        return KeypointEstimator(self.spec(), self.keypoints, self.guess, range(3), self.settle_steps)

    def guess(self, points: np.ndarray, velocities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(qpos, qvel)`` interpolated from keypoint positions and velocities ``(n, 3)``."""
        raise NotImplementedError

    # -- observation -------------------------------------------------------------------------

    @cached_property
    def obs_names(self) -> tuple[str, ...]:
        kp = [f"{k.name}_{c}" for k in self.keypoints for c in ("x", "y", "z")]
        kv = [f"{k.name}_{c}" for k in self.keypoints for c in ("vx", "vy", "vz")]
        return ("gripper_x", "gripper_y", "gripper_z", "gripper_vx", "gripper_vy", "gripper_vz", "grasp", *kp, *kv)

    def obs_units(self) -> tuple[str, ...]:
        """Positions m, velocities m/s, the grasp activation dimensionless (``1``: exact)."""
        return tuple("1" if n == "grasp" else "m/s" if n.rsplit("_", 1)[-1].startswith("v") else "m"
                     for n in self.obs_names)

    def obs_from_data(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        vel = np.empty(6)
        kv = []
        sites = self._sites[self._obs]
        for s in sites:
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_SITE, int(s), vel, 0)
            kv.append(vel[3:].copy())
        return np.concatenate([data.qpos[:3], data.qvel[:3], data.act[:1],
                               data.site_xpos[sites].ravel(), np.ravel(kv)])

    def split_obs(self, obs) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
        """``(gripper (3,), gripper velocity (3,), grasp activation, points (n, 3), velocities (n, 3))``."""
        o = self.check_obs(obs)
        n = len(self.keypoints)
        return o[0:3], o[3:6], float(o[6]), o[7 : 7 + 3 * n].reshape(n, 3), o[7 + 3 * n :].reshape(n, 3)

    def state_from_obs(self, obs) -> np.ndarray:
        """Twin state from keypoints (see :class:`~twinloop.tasks.keypoints.KeypointEstimator`)."""
        g, gv, act, pts, vel = self.split_obs(obs)
        hold = np.concatenate([np.clip(g, self.action_low[:3], self.action_high[:3]), [np.clip(act, 0.0, 1.0)]])
        return self.estimator(g, gv, [act], pts, vel, hold)

    # -- geometry ----------------------------------------------------------------------------

    def keypoint_positions(self, qpos) -> np.ndarray:
        """``(..., n, 3)`` positions (m) of every tracked point (:attr:`points`) of ``(..., nq)``
        positions (forward kinematics)."""
        q = as_array(qpos, "qpos")
        flat = q.reshape(-1, self.model.nq)
        out = np.empty((len(flat), len(self.points), 3))
        m, d = self.model, self._scratch
        for i, row in enumerate(flat):
            d.qpos[:] = row
            mujoco.mj_kinematics(m, d)
            out[i] = d.site_xpos[self._sites]
        return out.reshape(*q.shape[:-1], len(self.points), 3)

    def grasp_gap(self, qpos) -> np.ndarray:
        """``(...)`` distance (m) from the gripper to the grasped point."""
        q = as_array(qpos, "qpos")
        flat = q.reshape(-1, self.model.nq)
        m, d = self.model, self._scratch
        out = np.empty(len(flat))
        for i, row in enumerate(flat):
            d.qpos[:] = row
            mujoco.mj_kinematics(m, d)
            out[i] = np.linalg.norm(d.site_xpos[self._grip_site] - d.site_xpos[self._target_site])
        return out.reshape(q.shape[:-1])

    def error(self, qpos) -> np.ndarray:
        """Mean distance (m) of the scored keypoints to their goal positions."""
        kp = self.keypoint_positions(qpos)[..., self._err, :]
        return np.linalg.norm(kp - self.goal, axis=-1).mean(axis=-1)

    def success(self, qpos) -> bool:
        """Mean keypoint error <= ``tolerance``, every scored keypoint on the table (at most
        ``landed`` high: nothing still in flight) and the gripper released (beyond the capture
        radius of the grasped point, so the grasp exerts no force)."""
        q = as_array(qpos, "qpos", (self.model.nq,))
        kp = self.keypoint_positions(q)[self._err]
        return bool(np.linalg.norm(kp - self.goal, axis=-1).mean() <= self.tolerance
                    and kp[:, 2].max() <= self.landed and self.grasp_gap(q) >= self.capture_radius)

    # -- cost --------------------------------------------------------------------------------

    def _sensor_points(self, sensordata: np.ndarray) -> np.ndarray:
        """``(..., n, 3)`` keypoints from ``(..., nsensordata)`` readings."""
        return sensordata[..., self._s_kp[:, None] + np.arange(3)]

    def residuals(self) -> tuple[Residual, ...]:
        n = len(self._err)
        goal, scale = self.goal, self.tolerance * np.sqrt(n)

        def kp_error(s):  # (..., n, 3) -> (..., 3n): squared norm = mean squared error / tol^2
            d = self._sensor_points(s)[..., self._err, :] - goal
            return d.reshape(*d.shape[:-2], 3 * n) / scale

        def gap(s):
            grip = s[..., self._s_grip : self._s_grip + 3]
            return np.linalg.norm(grip - s[..., self._s_target : self._s_target + 3], axis=-1)

        def keypoints(t: Traj):
            return kp_error(t.sensordata[..., 1:, :])

        def final(t: Traj):
            return kp_error(t.sensordata[..., -1, :])

        def hold(t: Traj):
            # while the grasp is commanded, keep the grasped point well inside the capture radius
            lag = np.maximum(gap(t.sensordata[..., :-1, :]) - 0.5 * self.capture_radius, 0.0)
            return (t.ctrl[..., 3] * lag)[..., None] / (0.25 * self.capture_radius)

        def release(t: Traj):
            short = np.maximum(1.5 * self.capture_radius - gap(t.sensordata[..., -1, :]), 0.0)
            return short[..., None] / self.capture_radius

        def effort(t: Traj):
            return (t.ctrl[..., :3] - t.qpos[..., :-1, 0:3]) / 0.1

        w = self.weights
        return (
            Residual("keypoints", w["keypoints"], keypoints),
            Residual("final_keypoints", w["final_keypoints"], final, terminal=True),
            Residual("hold", w["hold"], hold),
            Residual("release", w["release"], release, terminal=True),
            Residual("effort", w["effort"], effort),
        )

    # -- hooks -------------------------------------------------------------------------------

    def hold_action(self, state: np.ndarray) -> np.ndarray:
        """Keep the gripper where it is and the grasp as it is."""
        s = np.asarray(state, dtype=float)
        m = self.model
        a = np.concatenate([s[0:3], s[m.nq + m.nv : m.nq + m.nv + 1]])
        return np.clip(a, self.action_low, self.action_high)

    def goal_features(self) -> np.ndarray:
        return self.goal.ravel().copy()

    def trace_points(self, qpos, sensordata) -> np.ndarray:
        """The gripper and the traced keypoints (the grasped corner's path above all)."""
        s = np.asarray(sensordata)
        grip = s[..., self._s_grip : self._s_grip + 3][..., None, :]
        return np.concatenate([grip, self._sensor_points(s)[..., self._trace, :]], axis=-2)

    def excitation(self, seed: int, kind: str = "excite"):
        """``excite``: repeatedly grasp the grasped point, carry it to a random spot (random
        height) and drop it, every 12 ticks: lifts, drags, drops and free settling that separate
        mass, stiffness, damping and friction. Other kinds: see :meth:`Task.excitation`."""
        if kind != "excite":
            return super().excitation(seed, kind)
        rng = np.random.default_rng([seed, 7])
        lo, hi = self.action_low, self.action_high
        mem: dict = {}
        grasped = [k.name for k in self.keypoints].index(self.trace_keypoints[0])  # observed

        def f(obs, k):
            g, _, _, pts, _ = self.split_obs(obs)
            ph = k % 12
            if ph == 0:
                mem["to"] = np.array([rng.uniform(-0.12, 0.12), rng.uniform(-0.12, 0.12), rng.uniform(0.02, 0.12)])
            target = pts[grasped]
            if ph < 3:
                a = [*target[:2], target[2] + 0.04, 0.0]
            elif ph < 5:
                a = [*target[:2], target[2] + 0.008, 1.0]
            elif ph < 10:
                a = [*(g + np.clip(mem["to"] - g, -0.04, 0.04)), 1.0]
            else:
                a = [*g[:2], g[2] + 0.03, 0.0]
            return np.clip(np.asarray(a, dtype=float), lo, hi)

        return f
