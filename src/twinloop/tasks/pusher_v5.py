"""pusher-v5: Gymnasium's MuJoCo ``Pusher-v5``, a 7-DoF arm pushing a puck to a goal, with a
twin built from the env's own scene.

The scene is read at run time from the installed gymnasium package
(``gymnasium/envs/mujoco/assets/pusher_v5.xml``, MIT license, Copyright (c) Farama
Foundation; not copied into twinloop). The twin adds three ``framepos`` sensors to it (the
fork's mouth ``tips_arm`` and the ``object`` at their centres of mass, as the env's
``get_body_com``, and the wrist, where the fork's crossbar is); sensors do not change the
physics. The end effector is a fork (a crossbar and two 0.1 m prongs, the only arm geoms
that collide): the puck fits between the prongs and is pushed by the crossbar.

Env facts the task follows: torque control, ``Box(-2, 2, (7,))`` N m on the seven arm hinges;
no gravity; frictionless contacts (``condim=1``), so the puck (a 5 cm radius cylinder on two
slide joints with damping 0.5 and armature 0.04) moves only when pushed; ``dt = 0.01 s x
frame_skip 5 = 0.05 s`` per step; 100 steps per episode; the goal is fixed at (0.45, -0.05).

Observation (23,): the env's own: arm qpos (7, rad), arm qvel (7, rad/s), fingertip, puck and
goal positions (3 each, m; the env reads them from the last physics substep's kinematics).
Twin state: qpos = [7 arm joints, puck y, puck x, goal y, goal x] (slide joints, in the
scene's order), qvel alike; the puck's velocity is not observed and is taken as 0 (its
damping stops it within ~0.1 s of release).
Success: puck within 5 cm of the goal (horizontally).
"""

from __future__ import annotations

from functools import cached_property
from importlib import resources
from pathlib import Path

import mujoco
import numpy as np
from scipy.optimize import least_squares

from twinloop.errors import TwinloopError, as_array
from twinloop.params import Param, ParamSpace
from twinloop.tasks.base import Residual, Task, Traj

ARM = ("r_shoulder_pan", "r_shoulder_lift", "r_upper_arm_roll", "r_elbow_flex", "r_forearm_roll",
       "r_wrist_flex", "r_wrist_roll")
PUCK_RADIUS = 0.05
TIP_RADIUS = 0.02   # the fingertip capsules' radius


def gymnasium_scene(name: str = "pusher_v5.xml") -> Path:
    """Path of a scene shipped with the installed gymnasium's MuJoCo envs."""
    try:
        path = resources.files("gymnasium") / "envs" / "mujoco" / "assets" / name
    except ModuleNotFoundError as exc:
        raise TwinloopError("task pusher-v5 builds its twin from gymnasium's own Pusher-v5 scene: "
                            "pip install 'twinloop[gym]'") from exc
    if not path.is_file():
        raise TwinloopError(f"the installed gymnasium has no {name} (Pusher-v5 needs gymnasium >= 1.0)")
    return Path(str(path))


class PusherV5(Task):
    """Gymnasium's Pusher-v5: a 7-DoF arm pushes a puck onto a goal with joint torques.

    Args:
        weights: overrides of :attr:`WEIGHTS` by residual name.
    """

    name = "pusher-v5"
    gym_id = "Pusher-v5"
    control_period = 0.05
    max_ticks = 100
    cost_stride = 5
    obs_names = (*(f"{j}_angle" for j in ARM), *(f"{j}_rate" for j in ARM),
                 "tip_x", "tip_y", "tip_z", "puck_x", "puck_y", "puck_z", "goal_x", "goal_y", "goal_z")
    success_radius = 0.05
    WEIGHTS = {"puck_to_goal": 1.0, "fork_behind_puck": 0.3, "effort": 0.02, "arm_speed": 0.01,
               "final_puck": 1.0}

    def __init__(self, weights: dict | None = None):
        unknown = sorted(set(weights or {}) - set(self.WEIGHTS))
        if unknown:
            raise TwinloopError(f"unknown pusher-v5 cost term(s) {unknown}; terms: {', '.join(self.WEIGHTS)}")
        self.weights = {**self.WEIGHTS, **{k: float(v) for k, v in (weights or {}).items()}}

    @property
    def xml_path(self) -> Path:
        return gymnasium_scene()

    def spec(self) -> mujoco.MjSpec:
        spec = mujoco.MjSpec.from_file(str(self.xml_path))
        for body in ("tips_arm", "object"):
            spec.add_sensor(name=body, type=mujoco.mjtSensor.mjSENS_FRAMEPOS, objtype=mujoco.mjtObj.mjOBJ_BODY,
                            objname=body)
        spec.add_sensor(name="wrist", type=mujoco.mjtSensor.mjSENS_FRAMEPOS, objtype=mujoco.mjtObj.mjOBJ_XBODY,
                        objname="r_wrist_roll_link")
        return spec

    @cached_property
    def model(self) -> mujoco.MjModel:
        return self.spec().compile()

    @cached_property
    def _layout(self) -> dict:
        m = self.model

        def body(n):
            return m.body_pos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n)].copy()

        def adr(n):
            return int(m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n)])

        return {"puck0": body("object"), "goal0": body("goal"),
                "puck": [adr("obj_slidex"), adr("obj_slidey")], "goal": [adr("goal_slidex"), adr("goal_slidey")],
                "tip": mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "tips_arm"),
                "wrist": mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "r_wrist_roll_link"),
                "object": mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "object"),
                "goal_body": mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "goal")}

    # -- geometry ---------------------------------------------------------------------------

    def puck_xy(self, qpos) -> np.ndarray:
        """``(..., 2)`` puck centre (m) from ``(..., nq)`` positions."""
        q = np.asarray(qpos, dtype=float)
        return self._layout["puck0"][:2] + q[..., self._layout["puck"]]

    def goal_xy(self, qpos=None) -> np.ndarray:
        q = np.zeros(self.model.nq) if qpos is None else np.asarray(qpos, dtype=float)
        return self._layout["goal0"][:2] + q[..., self._layout["goal"]]

    def error(self, qpos) -> np.ndarray:
        """Horizontal puck-to-goal distance (m)."""
        return np.linalg.norm(self.puck_xy(qpos) - self.goal_xy(qpos), axis=-1)

    def success(self, qpos) -> bool:
        return bool(self.error(as_array(qpos, "qpos", (self.model.nq,))) < self.success_radius)

    # -- cost --------------------------------------------------------------------------------

    def residuals(self) -> tuple[Residual, ...]:
        """MuJoCo MPC style: the puck to the goal (running and at the end), the fork's crossbar
        behind the puck on its line to the goal at the puck's height (where pushing starts;
        it pulls plans that do not touch the puck yet toward ones that do), torque and arm
        speed (effort)."""
        goal = self.goal_xy()
        back = TIP_RADIUS + PUCK_RADIUS + 0.01

        def puck(t: Traj):
            return t.sensordata[..., 3:5]

        def to_goal(t: Traj):
            return (puck(t)[..., 1:, :] - goal) / 0.1

        def fork(t: Traj):
            p = t.sensordata[..., 1:, 3:6]
            d = goal - p[..., :2]
            u = d / np.sqrt((d**2).sum(axis=-1, keepdims=True) + 0.02**2)
            behind = np.concatenate([p[..., :2] - u * back, p[..., 2:3]], axis=-1)
            return (t.sensordata[..., 1:, 6:9] - behind) / 0.1

        def effort(t: Traj):
            return t.ctrl / 2.0

        def arm_speed(t: Traj):
            return t.qvel[..., 1:, :7] / 5.0

        def final(t: Traj):
            return (puck(t)[..., -1, :] - goal) / 0.05

        w = self.weights
        return (
            Residual("puck_to_goal", w["puck_to_goal"], to_goal),
            Residual("fork_behind_puck", w["fork_behind_puck"], fork),
            Residual("effort", w["effort"], effort),
            Residual("arm_speed", w["arm_speed"], arm_speed),
            Residual("final_puck", w["final_puck"], final, terminal=True),
        )

    # -- episodes ----------------------------------------------------------------------------

    def initial_state(self, rng: np.random.Generator) -> np.ndarray:
        """Pusher-v5's reset distribution: arm at zero, puck offset ``(y, x)`` uniform in
        ``[-0.3, 0] x [-0.2, 0.2]`` until more than 0.17 m from the goal, joint speeds
        uniform in +-0.005 (the puck and goal still)."""
        m = self.model
        qpos = m.qpos0.copy()
        while True:
            c = np.array([rng.uniform(-0.3, 0.0), rng.uniform(-0.2, 0.2)])
            if np.linalg.norm(c) > 0.17:
                break
        qpos[-4:-2] = c
        qpos[-2:] = 0.0
        qvel = rng.uniform(-0.005, 0.005, m.nv)
        qvel[-4:] = 0.0
        return np.concatenate([qpos, qvel, np.zeros(m.na)])

    def obs_from_data(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        lay = self._layout
        return np.concatenate([data.qpos[:7], data.qvel[:7], data.xipos[lay["tip"]], data.xipos[lay["object"]],
                               data.xipos[lay["goal_body"]]])

    def state_from_obs(self, obs) -> np.ndarray:
        o = self.check_obs(obs)
        m, lay = self.model, self._layout
        qpos = np.zeros(m.nq)
        qpos[:7] = o[:7]
        qpos[lay["puck"]] = o[17:19] - lay["puck0"][:2]
        qpos[lay["goal"]] = o[20:22] - lay["goal0"][:2]
        qvel = np.zeros(m.nv)
        qvel[:7] = o[7:14]
        return np.concatenate([qpos, qvel])

    def obs_units(self) -> tuple[str, ...]:
        return ("rad",) * 7 + ("rad/s",) * 7 + ("m",) * 9

    def param_space(self) -> ParamSpace:
        """Puck damping (N s/m, both slides), puck armature (kg, both slides: its effective
        mass) and the arm's joint damping (N m s/rad, shoulder and elbow)."""
        return ParamSpace((
            Param("puck_damping", ("dof:obj_slidex/damping", "dof:obj_slidey/damping"), 0.05, 2.0, 0.5, 0.2),
            Param("puck_armature", ("dof:obj_slidex/armature", "dof:obj_slidey/armature"), 0.005, 0.2, 0.04, 0.02),
            Param("arm_damping", ("dof:r_shoulder_pan_joint/damping", "dof:r_shoulder_lift_joint/damping"),
                  0.2, 3.0, 1.0, 0.3),
        ))

    def default_proposer(self) -> ScriptedPusher:
        return ScriptedPusher(self)

    def trace_points(self, qpos, sensordata) -> np.ndarray:
        """The fork's mouth and the puck."""
        s = np.asarray(sensordata)
        return np.stack([s[..., 0:3], s[..., 3:6]], axis=-2)


class ScriptedPusher:
    """Reach over the puck, lower the fork behind it, push it into the goal with the fork's
    inner corner: joint targets by inverse kinematics, torques by a joint-space PD law.

    Why this shape (what the scene allows): the puck's contacts are soft in this scene, so the
    force on the puck grows with how deep the fork presses into it (about 0.4 N/m of depth,
    see ``DEPTH``), and it is frictionless, so a straight edge pushes only along its normal.
    The fork pushes with its crossbar and one prong at once (the inner corner), each pressed
    ``DEPTH`` into the puck, with its heading turned ``CORNER`` from the push line so the two
    normals add up along the line to the goal; the side (which prong) is the one that keeps
    the heading nearer the arm's radial direction, which the arm reaches more easily at table
    height. Phases, read from the state at every tick: *reach* (the corner ``LIFT`` above its
    place ``BACK`` behind the puck, so the prongs pass over it), *lower* (once above that
    place), *push* (once the puck is between the prongs at table height: the corner's target
    moves with the puck, ``DEPTH`` into it), *hold* (the puck within ``HOLD`` of the goal: the
corner touches it without pressing). Each phase's target is a pose of the fork (a
    point of the fork at a place, its heading, level within limits), solved by bounded least
    squares from the last solution (:meth:`ik`; from a few fixed postures when that fails).
    Torques: ``M(q) (kp (q* - q) - kd qd) + bias - passive``, scaled down as a whole to the
    2 N m limit. The chunk is that law played forward in the nominal scene for ``H`` ticks.
    """

    kp, kd = 200.0, 28.0          # 1/s^2, 1/s: the joint-space PD law's gains
    H = 10                        # ticks played forward per proposal
    Z = -0.275                    # the puck's centre height (m): the fork pushes there
    LIFT, BACK = 0.09, 0.02       # m: over the puck while reaching (prongs clear its top); behind it
    DEPTH = 0.06                  # m: how far the crossbar and the prong press into the puck (0.07: through)
    CORNER = np.radians(45.0)     # the fork's heading, turned from the push line
    HOLD = 0.02                   # m: the puck this near the goal is left there (pushing on overshoots)
    SHOULDER = np.array([0.1, -0.6])   # the shoulder lift joint (xy, m): the radial direction
    PRONG_GAP = 0.1 - TIP_RADIUS - PUCK_RADIUS   # puck centre to the fork's axis, touching a prong

    def __init__(self, task: PusherV5):
        self.task = task
        self.model = task.model
        self.data = mujoco.MjData(self.model)
        self._kin = mujoco.MjData(self.model)
        self.goal = task.goal_xy()
        self.wrist = task._layout["wrist"]
        self.low, self.high = self.model.jnt_range[:7, 0], self.model.jnt_range[:7, 1]
        self.postures = np.random.default_rng(0).uniform(self.low, self.high, (8, 7))
        self._M = np.zeros((self.model.nv, self.model.nv))

    def reset(self, seed: int | None = None) -> None:
        """Stateless: nothing to reset."""

    def fork(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(wrist position (3,), wrist frame (3, 3))`` of arm joints ``q (7,)``: the frame's
        x axis is the prongs' direction, its y axis the crossbar's."""
        d = self._kin
        d.qpos[:7] = q
        mujoco.mj_kinematics(self.model, d)
        return d.xpos[self.wrist].copy(), d.xmat[self.wrist].reshape(3, 3).copy()

    def targets(self, q: np.ndarray, puck: np.ndarray) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
        """``(phase, fork point (3,) in the wrist frame, its target (3,), heading (2,))`` for
        arm joints ``q`` and the puck's centre ``puck (2,)``."""
        g = self.goal - puck
        u = g / max(float(np.linalg.norm(g)), 1e-9)
        radial = puck - self.SHOULDER
        side = 1.0 if u[0] * radial[1] - u[1] * radial[0] > 0 else -1.0
        c, s = np.cos(side * self.CORNER), np.sin(side * self.CORNER)
        heading = np.array([c * u[0] - s * u[1], s * u[0] + c * u[1]])
        touch = np.array([TIP_RADIUS + PUCK_RADIUS, side * self.PRONG_GAP, 0.0])  # puck in the corner
        x, R = self.fork(q)
        local = R.T @ np.array([*(puck - x[:2]), self.Z - x[2]])
        between = -0.02 < local[0] < 0.13 and abs(local[1]) < 0.1 and abs(x[2] - self.Z) < 0.04
        behind = np.array([*(puck - u * self.BACK), self.Z])
        if between and np.linalg.norm(g) < self.HOLD:
            return "hold", touch, np.array([*puck, self.Z]), heading   # there: touch, do not press
        if between:
            pressed = touch + np.array([-self.DEPTH, side * self.DEPTH, 0.0])
            return "push", pressed, np.array([*puck, self.Z]), heading
        if np.linalg.norm((x + R @ touch)[:2] - behind[:2]) < 0.03 and x[2] > self.Z - 0.02:
            return "lower", touch, behind, heading
        return "reach", touch, behind + np.array([0.0, 0.0, self.LIFT]), heading

    def _pose_error(self, q, point, target, heading, q0):
        x, R = self.fork(q)
        h = R[:2, 0] / max(float(np.linalg.norm(R[:2, 0])), 1e-9)
        pitch, roll, up = R[2, 0], R[2, 1], R[2, 2]
        return np.concatenate([
            (x + R @ point - target) / 0.01,                       # the point at its place (1 cm)
            0.3 * (h - heading),                                   # heading, second to place
            # level enough, and upright: upside down, the corner's prong is the other one
            3 * np.array([max(pitch - 0.6, 0), min(pitch + 0.25, 0), max(abs(roll) - 0.25, 0), min(up - 0.5, 0)]),
            0.01 * (q - q0),                                       # the nearest such posture
        ])

    def ik(self, q0: np.ndarray, point: np.ndarray, target: np.ndarray, heading: np.ndarray) -> tuple[np.ndarray, float]:
        """``(joints (7,), place error m)`` putting the fork ``point`` (wrist frame) at
        ``target`` with ``heading``: bounded least squares (joint limits) from ``q0``, then,
        if that misses by more than 5 mm, from fixed postures too (the best kept)."""
        best, err = None, np.inf
        for start in (q0, *self.postures):
            sol = least_squares(self._pose_error, np.clip(start, self.low + 1e-9, self.high - 1e-9),
                                bounds=(self.low, self.high), args=(point, target, heading, q0),
                                ftol=1e-4, xtol=1e-4, max_nfev=50)
            x, R = self.fork(sol.x)
            e = float(np.linalg.norm(x + R @ point - target))
            if e < err - 1e-4:
                best, err = sol.x, e
            if err < 0.005:
                break
        return best, err

    def torque(self, d: mujoco.MjData, q_target: np.ndarray) -> np.ndarray:
        """``(7,)`` torques of the PD law toward ``q_target`` through the model's inertia,
        with the joints' damping and the bias forces compensated, scaled to the limit."""
        m = self.model
        mujoco.mj_forward(m, d)
        mujoco.mj_fullM(m, d, self._M)
        acc = self.kp * (q_target - d.qpos[:7]) - self.kd * d.qvel[:7]
        tau = self._M[:7, :7] @ acc + d.qfrc_bias[:7] - d.qfrc_passive[:7]
        return tau / max(1.0, float(np.abs(tau).max()) / float(self.task.action_high[0]))

    def propose(self, obs, state) -> np.ndarray:
        """``(H, 7)`` torques: the script played forward from ``state``."""
        m, d = self.model, self.data
        s = as_array(state, "state", (self.task.nstate,))
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = s[: m.nq], s[m.nq : m.nq + m.nv]
        out = np.empty((self.H, m.nu))
        q_target = d.qpos[:7].copy()
        for k in range(self.H):
            _, point, target, heading = self.targets(d.qpos[:7], self.task.puck_xy(d.qpos))
            q_target, _ = self.ik(q_target, point, target, heading)
            out[k] = d.ctrl[:] = np.clip(self.torque(d, q_target), self.task.action_low, self.task.action_high)
            mujoco.mj_step(m, d, nstep=self.task.substeps)
        return out
