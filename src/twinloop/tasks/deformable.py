"""What the deformable tasks share: a pinch gripper, keypoint observations, a keypoint cost.

The gripper is a small sphere on an XYZ stage (slide joints ``gripper_x/y/z``, PD position
actuators, gravity compensated). Its grasp is a spatial tendon from the gripper to one point of
the object (``grasp_target``), pulled by an actuator whose activation, a first-order filter of
the grasp command, lives in ``act`` and so in the twin state ``[qpos, qvel, act]``: a rollout
that starts mid-grasp continues the grasp exactly. The actuator's gain is affine in the tendon
length ``L`` and velocity, clamped to pull only::

    force = clamp(act * (-F + k L - d dL/dt), -F, 0)      capture radius  L_c = F / k

so the grasp holds only a point the gripper is at (within ``L_c``), pressed against the finger,
and slips when that point lags too far behind: a corner whipped around too fast, or too heavy,
is dropped. The actuator force is applied explicitly; on a point of a few grams the velocity
term with the clamp is what keeps it stable: a point rushing toward the finger is not pulled.

Observation (``7 + 6 n``): gripper x, y, z (m), its velocity (m/s), the grasp activation (0-1,
exact: the robot commands it), then each keypoint's x, y, z and its velocity. Action (4,):
gripper target x, y, z (m) and grasp command (0-1). The state comes from the keypoints through
:class:`~twinloop.tasks.keypoints.KeypointEstimator` (a task supplies the interpolation).

Cost: keypoint distance to the goal (running and final), a hold term that keeps a grasped point
close while the grasp is commanded, a terminal release term (end clear of the object, weighted
in only as the shape nears its goal) and effort.
Success: mean keypoint distance to the goal <= ``tolerance``, the scored keypoints on the table
(none in flight) and the gripper released (farther than the capture radius from the grasped
point, where the grasp can exert no force).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array
from twinloop.modifiers import record_flex_materials
from twinloop.tasks.base import Residual, Task, Traj
from twinloop.tasks.keypoints import (
    Keypoint,
    KeypointEstimator,
    KeypointObserver,
    add_keypoint_sites,
)
from twinloop.tasks.repair import PlaceRepair, RepairConfig, repair_source, sample_keys

GRIPPER_JOINTS = ("gripper_x", "gripper_y", "gripper_z")


def choose_resolution(task: str, resolution, allowed: tuple[int, ...]) -> int:
    """``resolution`` checked against the ``allowed`` ones of ``task``'s deformable."""
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)) or int(resolution) not in allowed:
        raise TwinloopError(f"{task}: resolution must be one of {list(allowed)}, got {resolution!r}")
    return int(resolution)


class GraspTask(Task):
    """Base of the gripper-and-deformable tasks (see the module docstring).

    Subclass attributes: ``keypoints`` (observed, in order), ``scored`` (points scored against
    ``goal``, an ``(n, 3)`` array set in ``__init__``; a name shared with a keypoint is the same
    point), ``trace_keypoints`` (names of points drawn as ghost paths), ``grasp_body`` and
    ``grasp_offset`` (where the grasp pulls), ``grasp_point`` (the observed keypoint there),
    ``tolerance`` (m), ``landed`` (m: how high a scored point may sit and still count as on the
    table; a task whose points rest at a hidden height sets it above the highest its parameter
    space allows, so no world is unwinnable); method ``guess(points, velocities) -> (qpos,
    qvel)`` (the estimator's interpolation).
    """

    camera = "overview"
    keypoints: tuple[Keypoint, ...] = ()
    scored: tuple[Keypoint, ...] = ()
    trace_keypoints: tuple[str, ...] = ()
    grasp_body: str = ""
    grasp_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    grasp_point: str = ""
    tolerance = 0.02
    landed = 0.01  # scored keypoints at most this high (m): the object lies on the table
    # Explicit Euler (a severity-3 world) applies the grasp's velocity gain (0.5 N s/m) to the
    # grasped point (a towel vertex of 0.9-4.4 g, a rope link of 2.2-11 g in severity-3
    # worlds); at the scenes' 10 ms that diverges (dt c / m up to 5.5 for the towels, 2.2 for
    # the ropes: a held corner thrown off the finger, a rope MuJoCo resets); at 2 ms it stays
    # under 1.3 down to the lightest point the parameter spaces allow (0.8 g, 1 g).
    euler_step = 0.002
    binary_actions = (3,)  # the grasp command: a pinch is open or closed
    # The planner a grasp-carry-place needs: a 1 s horizon (0.5 s sees the lift and not the
    # place), K=64, the base's chunk rehearsed and sent exactly (its grasp command steps between
    # ticks, which a spline fit smooths into a slipping pinch), and a refined plan sent only
    # where it beats the base under every parameter particle (the deformables' twin is wrong
    # in mass, stiffness and friction exactly where a refined carry differs from the base's).
    defaults = MappingProxyType({**Task.defaults, "planner.refiner.num_samples": 64,
                                 "planner.refiner.horizon": 1.0, "planner.refiner.exact_prior": True,
                                 "planner.refiner.accept_quantile": 1.0})
    goal: np.ndarray
    WEIGHTS = {"keypoints": 1.0, "final_keypoints": 3.0, "hold": 1.0, "release": 0.5, "effort": 0.02}

    def _index_points(self):
        """Index the scene's keypoints (observed, scored, traced; their sensors and sites) and
        return ``adr(sensor name) -> its address`` for the gripper sensors a subclass reads."""
        m = self.model
        by_name = {k.name: i for i, k in enumerate(self.points)}
        self._obs = np.arange(len(self.keypoints))
        self._err = np.array([by_name[k.name] for k in self.scored])
        self._trace = np.array([by_name[n] for n in self.trace_keypoints])
        adr = lambda s: int(m.sensor_adr[m.sensor(s).id])  # noqa: E731
        self._s_kp = np.array([adr(f"kp_{k.name}") for k in self.points])
        self._sites = np.array([m.site(f"kp_{k.name}").id for k in self.points])
        return adr

    def _options(self, weights: dict | None, settle_steps: int) -> None:
        """Check and keep the cost-weight overrides and the estimate's settle steps."""
        if isinstance(settle_steps, bool) or not isinstance(settle_steps, int) or settle_steps < 0:
            raise TwinloopError(f"settle_steps must be an integer >= 0, got {settle_steps!r}")
        self.settle_steps = settle_steps
        self._weight_overrides = dict(weights or {})
        unknown = sorted(set(weights or {}) - set(self.WEIGHTS))
        if unknown:
            raise TwinloopError(f"unknown {self.name} cost term(s) {unknown}; terms: {', '.join(self.WEIGHTS)}")
        self.weights = {**self.WEIGHTS, **{k: float(v) for k, v in (weights or {}).items()}}

    def __init__(self, weights: dict | None = None, settle_steps: int = 10):
        self._options(weights, settle_steps)
        m = self.model
        names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(3)]
        if names != list(GRIPPER_JOINTS) or m.nu != 4 or m.na != 1:
            raise TwinloopError(f"{self.name}: the scene must start with joints {GRIPPER_JOINTS} and have "
                                "4 actuators (gripper x, y, z, grasp) and one activation")
        adr = self._index_points()
        self._s_grip, self._s_target = adr("gripper"), adr("grasp_target")
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
        spec = self.scene()
        body = spec.body(self.grasp_body)
        if body is None:
            raise TwinloopError(f"{self.name}: no grasp body {self.grasp_body!r} in the scene")
        body.add_site(name="grasp_target", pos=list(self.grasp_offset), size=[0.002] * 3)
        add_keypoint_sites(spec, self.points)
        return record_flex_materials(spec)

    def scene(self) -> mujoco.MjSpec:
        """The scene file as the task builds it (a task with a coarser or finer object edits it)."""
        return super().spec()

    def at_resolution(self, resolution: int) -> GraspTask:
        """This task with its deformable at another ``resolution`` (see the subclass)."""
        raise TwinloopError(f"task {self.name!r} has no other resolution of its object")

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
        return self.estimator(g, gv, [act], pts, vel, self.settle_ctrl(g, act))

    def settle_ctrl(self, gripper, act: float) -> np.ndarray:
        """Controls that hold the gripper where it was seen and the grasp as it is while an
        estimate settles."""
        return np.concatenate([np.clip(gripper, self.action_low[:3], self.action_high[:3]), [np.clip(act, 0.0, 1.0)]])

    def observer(self, params=None) -> KeypointObserver:
        """A stateful estimate for a controller (:class:`~twinloop.tasks.keypoints.KeypointObserver`:
        the last estimate predicted a tick ahead, corrected to the keypoints), under ``params``."""
        return KeypointObserver(self, params)

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

    def point_index(self, name: str) -> int:
        """Index of the tracked point ``name`` among :attr:`points`."""
        return [k.name for k in self.points].index(name)

    def goal_of(self, name: str) -> np.ndarray:
        """``(3,)`` goal position of the scored point ``name``."""
        return self.goal[[k.name for k in self.scored].index(name)]

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
            # end clear of the grasped point, but only once the shape is nearly there: a
            # grasp held mid-task is what carries the object, not a cost
            s = t.sensordata[..., -1, :]
            short = np.maximum(1.5 * self.capture_radius - gap(s), 0.0) / self.capture_radius
            near = 1.0 / (1.0 + (np.linalg.norm(kp_error(s), axis=-1) / 2.0) ** 2)
            return (short * near)[..., None]

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

    def repair_primitive(self, push: int = 0, reach: float | None = None, commit: float | None = None,
                         regrasp_reach: float | None = None) -> PlaceRepair:
        """Re-grasp or place the grasped point where it belongs (:class:`PlaceRepair`), offered
        only near its goal (within ``reach``, default ``RepairConfig.reach``): a local
        correction of a misplaced release, not the task from its start; with ``push``
        (``RepairConfig.push``) also push the farthest other points; ``commit``,
        ``regrasp_reach``: ``RepairConfig.commit``, ``RepairConfig.regrasp_reach``."""
        cfg = RepairConfig(push=push, commit=commit, regrasp_reach=regrasp_reach,
                           **({} if reach is None else {"reach": reach}))
        return PlaceRepair(self, self.point_index(self.grasp_point), self.goal_of(self.grasp_point), cfg)

    def candidate_sources(self, options=None) -> tuple:
        """With ``options["repair"]``: the repair (:meth:`repair_primitive` with the options'
        ``repair_push``, ``repair_reach``, ``repair_commit``, ``repair_regrasp_reach``) as a
        candidate source, committing under a commit margin
        (:func:`~twinloop.tasks.repair.repair_source`); else none."""
        o = dict(options or {})
        if not o.get("repair"):
            return ()
        rep = self.repair_primitive(push=o.get("repair_push") or 0, reach=o.get("repair_reach"),
                                    commit=o.get("repair_commit"), regrasp_reach=o.get("repair_regrasp_reach"))
        return (repair_source(rep),)

    def state_estimator(self, stateful: bool = False, params=None):
        """``stateful``: the keypoint observer (:meth:`observer`) under ``params``; else the
        stateless map (:meth:`Task.state_estimator`)."""
        return self.observer(params) if stateful else super().state_estimator()

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
        grasped = [k.name for k in self.keypoints].index(self.grasp_point)

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


@dataclass(frozen=True)
class SwingConfig:
    """Knobs of a scripted swing (metres, seconds; see :class:`SwingScript`).

    Attributes:
        travel_speed: gripper speed when not carrying (m/s).
        arc_time: time to swing the point from its start to its goal (s).
        arc_height: peak height of the point's arc above the table (m).
        arc_radius: the arc's horizontal half-width as a fraction of half the start-goal
            distance (under 1: the object is never pulled taut).
        release: fraction of the arc at which the grasp opens (the point flies the rest).
        hover: height above the point to descend from (m).
        pinch: gripper height above the point when grasping (m).
        lag: how far (s) the PD stage trails its target; targets run this far ahead.
    """

    travel_speed: float = 0.4
    arc_time: float = 0.8
    arc_height: float = 0.15
    arc_radius: float = 0.95
    release: float = 1.0
    hover: float = 0.03
    pinch: float = 0.01
    lag: float = 0.05


class SwingScript:
    """The fold a person scripts against the nominal object: fly over the grasped point, pinch
    it, swing it over to its goal on a half ellipse (over the midpoint of start and goal) in
    ``arc_time``, let go at ``release`` of the way, then back off. Each tick it plans the whole
    rest of that sequence from the estimated state (so its chunk, the refiner's prior, reaches
    past the current phase, and a dropped point is grasped again), but it never checks where a
    released point landed: an object that drapes, slides or flies unlike the nominal one stays
    wrong.

    ``propose(obs, state) -> (H, 4)`` gripper targets and grasp commands per control tick,
    ``H = round(1 s / period)``, each target ``lag`` ahead of where the PD stage should be.

    Args:
        task: the task.
        point: index of the grasped point among ``task.points``.
        start, goal: ``(3,)`` where that point starts (nominally) and where it belongs.
        config: :class:`SwingConfig`.
        arm: which gripper swings (of a task with several: its joints ``3 arm .. 3 arm + 2``,
            its grasp activation ``arm``, its actions ``4 arm .. 4 arm + 3``).
    """

    def __init__(self, task: GraspTask, point: int, start, goal, config: SwingConfig | None = None, arm: int = 0):
        self.task, self.config, self.arm = task, config or SwingConfig(), int(arm)
        self.dt = task.control_period
        self.H = max(1, int(round(1.0 / self.dt)))
        start, goal = np.asarray(start, dtype=float), np.asarray(goal, dtype=float)
        self.point = int(point)
        self.centre = (start + goal) / 2
        self.out = (start - self.centre) / np.linalg.norm(start - self.centre)
        self.reach = float(np.linalg.norm(start[:2] - self.centre[:2]))

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset: the script reads everything from the state."""

    def propose(self, obs, state) -> np.ndarray:
        """``(H, 4)`` actions per control tick."""
        t, cfg = self.task, self.config
        s = as_array(state, "state", (t.nstate,))
        m = t.model
        grip, act = s[3 * self.arm : 3 * self.arm + 3], float(s[m.nq + m.nv + self.arm])
        p = t.keypoint_positions(s[: m.nq])[self.point]
        if act > 0.5 and np.linalg.norm(grip - p) < t.capture_radius:  # held: swing on
            keys = self._swing(self._angle(p), 0.0)
        elif (p - self.centre) @ self.out < 0:  # past the middle, let go: done, back off
            keys = [(0.0, grip, 0.0), (0.08 / cfg.travel_speed, grip + [0, 0, 0.08], 0.0)]
        else:  # over the point, down, close (one tick for the grasp to build up), swing
            above, at = p + [0, 0, cfg.hover], p + [0, 0, cfg.pinch]
            t1 = np.linalg.norm(above - grip) / cfg.travel_speed
            t2 = t1 + (cfg.hover - cfg.pinch) / cfg.travel_speed
            keys = [(0.0, grip, 0.0), (t1, above, 0.0), (t2, at, 1.0), *self._swing(0.0, t2 + self.dt)]
        return self._sample(keys)

    def _angle(self, p: np.ndarray) -> float:
        """The point's angle on the swing (0: start, pi: goal)."""
        cfg = self.config
        rel = p - self.centre
        return float(np.clip(np.arctan2(rel[2] / cfg.arc_height, (rel @ self.out) / (cfg.arc_radius * self.reach)), 0.0, np.pi))

    def _swing(self, theta: float, t0: float) -> list:
        """Keys ``(time, target, grasp)`` of the swing from angle ``theta`` starting at ``t0``,
        opening at ``release``, then backing off."""
        cfg = self.config
        th = np.linspace(theta, np.pi, 9)
        times = t0 + (th - theta) * cfg.arc_time / np.pi
        arc = self.centre + cfg.arc_radius * self.reach * np.cos(th)[:, None] * self.out
        arc = arc + np.array([0, 0, 1.0]) * (cfg.arc_height * np.sin(th) + cfg.pinch)[:, None]
        keys = [(ti, a, float(x < cfg.release * np.pi)) for ti, a, x in zip(times, arc, th, strict=True)]
        return keys + [(times[-1] + 0.08 / cfg.travel_speed, arc[-1] + [0, 0, 0.08], 0.0)]

    def _sample(self, keys: list) -> np.ndarray:
        return sample_keys(self.task, keys, self.H, self.config.lag, self.arm)
