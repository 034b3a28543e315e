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
    horizon = 0.75
    max_ticks = 100
    cost_stride = 5
    obs_names = (*(f"{j}_angle" for j in ARM), *(f"{j}_rate" for j in ARM),
                 "tip_x", "tip_y", "tip_z", "puck_x", "puck_y", "puck_z", "goal_x", "goal_y", "goal_z")
    success_radius = 0.05
    WEIGHTS = {"puck_to_goal": 1.0, "fork_behind_puck": 0.5, "near": 0.0, "effort": 0.02, "arm_speed": 0.01,
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
        goal = self.goal_xy()
        back = ScriptedPusher.FORK_BACK

        def puck(t: Traj):
            return t.sensordata[..., 3:5]

        def to_goal(t: Traj):
            return (puck(t)[..., 1:, :] - goal) / 0.1

        def fork(t: Traj):
            # the fork around the puck, crossbar behind it on the line to the goal, at its height
            p = t.sensordata[..., 1:, 3:6]
            d = goal - p[..., :2]
            u = d / np.sqrt((d**2).sum(axis=-1, keepdims=True) + 0.02**2)
            wrist = np.concatenate([p[..., :2] - u * back, p[..., 2:3]], axis=-1)
            mouth = np.concatenate([p[..., :2] + u * (0.1 - back), p[..., 2:3]], axis=-1)
            return np.concatenate([t.sensordata[..., 1:, 6:9] - wrist, t.sensordata[..., 1:, 0:3] - mouth], axis=-1) / 0.1

        def near(t: Traj):
            # the fork's mouth at the puck (the env's own reward_near term)
            return (t.sensordata[..., 1:, 0:3] - t.sensordata[..., 1:, 3:6]) / 0.1

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
            Residual("near", w["near"], near),
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
    """Reach-and-push, the script a person writes for a torque-driven arm.

    The end effector is a fork: a crossbar (the wrist) and two prongs 0.1 m long, the puck
    fits between them; ``tips_arm`` is the fork's mouth. Each tick the script picks targets
    for the wrist and the mouth on the line from the goal through the puck: the wrist
    ``FORK_BACK`` behind the puck centre, the mouth 0.1 m ahead of it (so the crossbar pushes
    the puck toward the goal). Phases: *reach* (targets raised ``LIFT`` above the puck while
    the wrist is still far, so the prongs pass over it), *lower*, *push* (targets moved
    ``PUSH`` further along the line). A third point on a prong keeps the fork level. Torques
    are spring-dampers on the three points through their Jacobians (see :meth:`torque`). The
    chunk is that law played forward in the nominal scene for ``H`` ticks.
    """

    kp, kd, kq = 60.0, 3.0, 0.1
    H = 20
    FORK_BACK = PUCK_RADIUS + TIP_RADIUS + 0.01
    LIFT, PUSH, NEAR, IN_PLACE = 0.12, 0.15, 0.05, 0.02
    PRONG = np.array([0.05, 0.1, 0.0])  # a prong's middle in the wrist frame
    POINT_WEIGHTS = np.array([1.0, 0.5, 0.2])  # wrist, mouth, prong: position first, then heading, then roll

    def __init__(self, task: PusherV5):
        self.task = task
        self.model = task.model
        self.data = mujoco.MjData(self.model)
        self.jac = np.zeros((9, self.model.nv))
        self.goal = task.goal_xy()
        lay = task._layout
        self.tip, self.wrist, self.puck = lay["tip"], lay["wrist"], lay["object"]

    def reset(self, seed: int | None = None) -> None:
        """Stateless: nothing to reset."""

    def prong(self, d: mujoco.MjData) -> np.ndarray:
        """The middle of one prong (world, m): with the wrist and the mouth it fixes the fork's roll."""
        return d.xpos[self.wrist] + d.xmat[self.wrist].reshape(3, 3) @ self.PRONG

    def targets(self, d: mujoco.MjData) -> tuple[str, np.ndarray]:
        """``(phase, (3, 3) wrist, mouth and prong targets)`` for the state in ``d`` (the fork
        level, its prongs either side of the line to the goal)."""
        puck = d.xipos[self.puck]
        g = self.goal - puck[:2]
        u = np.array([*(g / max(np.linalg.norm(g), 1e-6)), 0.0])
        wrist = puck - u * self.FORK_BACK
        rel = d.xpos[self.wrist] - wrist
        along, across = float(rel[:2] @ u[:2]), float(abs(rel[0] * u[1] - rel[1] * u[0]))
        if across < self.IN_PLACE and -self.NEAR < along < self.PUSH and abs(rel[2]) < 2 * self.IN_PLACE:
            phase, wrist = "push", wrist + u * self.PUSH
        elif np.linalg.norm(rel[:2]) < self.NEAR:
            phase = "lower"
        else:
            phase, wrist = "reach", wrist + np.array([0.0, 0.0, self.LIFT])
        v = np.array([-u[1], u[0], 0.0])
        side = 1.0 if (self.prong(d) - d.xpos[self.wrist]) @ v >= 0 else -1.0
        return phase, np.stack([wrist, wrist + 0.1 * u, wrist + 0.05 * u + 0.1 * side * v])

    def torque(self, d: mujoco.MjData, target: np.ndarray) -> np.ndarray:
        """``(7,)`` torques pulling the wrist, the mouth and the prong toward ``target (3, 3)``:
        a spring-damper on each point through its Jacobian, plus joint damping (passive, so
        stable without gravity), clipped to the actuators' range."""
        m = self.model
        prong = self.prong(d)
        mujoco.mj_jacBody(m, d, self.jac[:3], None, self.wrist)
        mujoco.mj_jacBodyCom(m, d, self.jac[3:6], None, self.tip)
        mujoco.mj_jac(m, d, self.jac[6:], None, prong, self.wrist)
        J = self.jac[:, :7]
        e = np.concatenate([target[0] - d.xpos[self.wrist], target[1] - d.xipos[self.tip], target[2] - prong])
        w = np.repeat(self.POINT_WEIGHTS, 3)
        tau = J.T @ (w * (self.kp * e - self.kd * (J @ d.qvel[:7]))) - self.kq * d.qvel[:7]
        return np.clip(tau, self.task.action_low, self.task.action_high)

    def propose(self, obs, state) -> np.ndarray:
        """``(H, 7)`` torques: the script played forward from ``state``."""
        m, d = self.model, self.data
        s = as_array(state, "state", (self.task.nstate,))
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = s[: m.nq], s[m.nq : m.nq + m.nv]
        mujoco.mj_forward(m, d)
        out = np.empty((self.H, m.nu))
        for k in range(self.H):
            mujoco.mj_comPos(m, d)
            out[k] = d.ctrl[:] = self.torque(d, self.targets(d)[1])
            mujoco.mj_step(m, d, nstep=self.task.substeps)
        return out
