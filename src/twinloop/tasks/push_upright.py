"""push-upright: push a tall box (5 x 5 x 16 cm, 0.4 kg) to a goal pose without toppling it.

The goal is a position and a heading (the box is square in plan: its four headings are the same
pose), 12-18 cm away and turned up to 45 degrees: the arm must turn the box with off-centre
pushes while moving it, keeping it upright. A box pushed by a fingertip at height ``h`` tips
over its leading bottom edge once the friction it drags along the table, ``mu m g``, has a
larger moment than its weight about that edge: ``mu h > w / 2`` (``w`` = 5 cm). The nominal
table (``mu`` = 0.25) lets a push at up to 10 cm stay upright, a grippier one less, so the cost
asks for low pushes (``push_height``) and gentle ones (``box_speed``: a knocked box slides free
and tips when ``mu > w / (2 h_com)``, 0.42 with its centre of mass 2 cm below its middle).
A terminal ``push_pose`` term asks the fingertips to end each horizon behind the box (seen
from the goal): the cost-to-go a short horizon cannot see, without which a refiner that once
let the box drift sideways stalls rather than start the detour round it.

Frame: metres, table top at z = 0, arm base at (-0.40, 0, 0). The arm (``arm.xml``, see
:mod:`twinloop.tasks.arm`) holds the tool pointing down and the fingers closed; the action
is the tcp target (x, y, z) plus the held tool rotation and grip (7 in all).
Twin state: ``qpos = [j1..j7, fingers (2), box position (3), box quaternion (4)]``.
Success: box centre within 2 cm of the goal, heading within 0.15 rad, tilted less than
0.1 rad. Failure: ``toppled`` once it tilts more than 0.5 rad (past its tipping angle of
0.30 rad).
"""

from __future__ import annotations

import numpy as np

from twinloop.params import Param, ParamSpace
from twinloop.tasks.arm import N_ARM_Q, ArmTask, quat_axis, quat_tilt, quat_yaw, yaw_quat
from twinloop.tasks.base import Residual, Traj
from twinloop.tasks.block_push import ScriptedBlockPush
from twinloop.tasks.planar import wrap
from twinloop.tasks.scripted import ScriptedConfig

BOX = slice(N_ARM_Q, N_ARM_Q + 3)  # box position in qpos
QUAT = slice(N_ARM_Q + 3, N_ARM_Q + 7)  # box quaternion in qpos


class PushUpright(ArmTask):
    """Push a tall box (5 x 5 x 16 cm) standing on a table to a goal position and heading with
    the closed fingertips of a 7-DoF arm, without toppling it. Actions (7,): the fingertips'
    target x, y, z (m, table frame, z up; the arm's Cartesian impedance pulls them there), then
    the tool rotation and finger opening, held fixed. The box moves only where the fingers push
    it; pushed high or hard it tips over, so push low and steadily. State positions: seven arm
    joints, two fingers (rad, m), the box's position (m) and quaternion. Success: the box within
    2 cm and 0.15 rad of the goal (it looks the same every quarter turn), upright.

    Args:
        goal: goal ``(x, y, heading)`` of the box (m, m, rad).
    """

    name = "push-upright"
    xml = "push_upright.xml"
    max_ticks = 80
    workspace_low = np.array([-0.20, -0.15, 0.0])
    workspace_high = np.array([0.20, 0.15, 0.12])
    half = 0.025  # box half-width (m)
    height = 0.16  # box height (m)
    finger_depth = 0.012  # closed fingers' half-extent along the push (m)
    pos_tol = 0.02
    yaw_tol = 0.15
    upright_tol = 0.1
    topple_tilt = 0.5
    # The arm tasks' planner as it is (K=32, 0.5 s, 10 ms): the knee of push-upright's
    # success-vs-compute curve (K=16, 20 ms) was not confirmed on episodes it was not found on
    # (results/tables/knee-confirm.json: 16/20 against 19/20).

    def __init__(self, goal=(0.12, 0.0, np.pi / 4)):
        super().__init__()
        self.goal = np.asarray(goal, dtype=float)
        self.pusher_radius = self.finger_depth  # for the point-pushing script

    # -- cost --------------------------------------------------------------------------------

    def residuals(self) -> tuple[Residual, ...]:
        return self._running_residuals() + self._terminal_residuals()

    def _running_residuals(self) -> tuple[Residual, ...]:
        """Every tick's terms: the box toward the goal and upright, the fingertips at it,
        pushing low and gently."""
        g = self.goal

        def pos(t: Traj):
            return (t.qpos[..., 1:, BOX][..., :2] - g[:2]) / 0.05

        def yaw(t: Traj):
            return self.yaw_error(t.qpos[..., 1:, :])[..., None] / 0.2

        def tilt(t: Traj):
            # sideways part of the box's z axis: sin(tilt), smooth through upright
            return quat_axis(t.qpos[..., 1:, QUAT], 2)[..., :2] / 0.05

        def reach(t: Traj):
            # fingertip distance to the box's axis (in the plane) beyond touching
            tcp = self.tcp(t.sensordata[..., 1:, :])
            d = np.linalg.norm(tcp[..., :2] - t.qpos[..., 1:, BOX][..., :2], axis=-1, keepdims=True)
            return np.maximum(d - (np.sqrt(2) * self.half + self.finger_depth + 0.01), 0.0) / 0.05

        def box_speed(t: Traj):
            # a knocked box slides free and tips at mu > w / (2 h_com): push, do not hit
            v = np.linalg.norm(t.qvel[..., 1:, N_ARM_Q : N_ARM_Q + 3], axis=-1, keepdims=True)
            return np.maximum(v - 0.05, 0.0) / 0.02

        def push_height(t: Traj):
            # the tipping moment of a push grows with its height: push low (fingertips clear
            # of the table), whatever friction the table really has
            return np.maximum(self.tcp(t.sensordata[..., 1:, :])[..., 2:3] - 0.03, 0.0) / 0.03

        def effort(t: Traj):
            # a target far from the tcp means a fast, impact-prone motion
            return (t.ctrl[..., :3] - self.tcp(t.sensordata[..., :-1, :])) / 0.1

        return (
            Residual("box_position", 1.0, pos),
            Residual("box_yaw", 0.3, yaw),
            Residual("tilt", 1.0, tilt),
            Residual("reach", 0.5, reach),
            Residual("box_speed", 1.0, box_speed),
            Residual("push_height", 1.0, push_height),
            Residual("effort", 0.05, effort),
        )

    def _terminal_residuals(self) -> tuple[Residual, ...]:
        """The horizon's last state: the box at the goal and upright, the fingertips behind it."""
        g = self.goal

        def final_pos(t: Traj):
            return (t.qpos[..., -1, BOX][..., :2] - g[:2]) / 0.02

        def final_yaw(t: Traj):
            return self.yaw_error(t.qpos[..., -1, :])[..., None] / 0.1

        def final_tilt(t: Traj):
            return quat_axis(t.qpos[..., -1, QUAT], 2)[..., :2] / 0.02

        def push_pose(t: Traj):
            # the cost-to-go a short horizon cannot see: fingertips ending the horizon behind the
            # box (seen from the goal) can push it on; beside or ahead of it they must first go
            # round it, a detour that costs more than stalling within 0.5 s. Fades out within
            # 3 cm of the goal, where "behind" loses its direction and turning pushes take over.
            box = t.qpos[..., -1, BOX][..., :2]
            to_goal = g[:2] - box
            d = np.linalg.norm(to_goal, axis=-1, keepdims=True)
            behind = box - to_goal / np.maximum(d, 1e-9) * (self.half + self.finger_depth + 0.005)
            return (self.tcp(t.sensordata[..., -1, :])[..., :2] - behind) / 0.05 * np.minimum(d / 0.03, 1.0)

        return (
            Residual("final_position", 0.2, final_pos, terminal=True),
            Residual("final_yaw", 0.2, final_yaw, terminal=True),
            Residual("final_tilt", 0.5, final_tilt, terminal=True),
            Residual("push_pose", 1.0, push_pose, terminal=True),
        )

    # -- episodes ----------------------------------------------------------------------------

    def initial_state(self, rng: np.random.Generator) -> np.ndarray:
        """Box upright 12-18 cm from the goal with a random heading; the fingertips behind it
        (seen from the goal) at 3-6 cm height, settled by the arm's own controller."""
        box = np.array([rng.uniform(-0.06, -0.02), rng.uniform(-0.06, 0.06)])
        yaw = rng.uniform(-np.pi / 4, np.pi / 4)
        away = (box - self.goal[:2]) / np.linalg.norm(box - self.goal[:2])
        side = np.array([-away[1], away[0]])
        tcp_xy = box + away * rng.uniform(0.07, 0.10) + side * rng.uniform(-0.02, 0.02)
        tcp = np.array([*tcp_xy, rng.uniform(0.03, 0.06)])
        obj = np.concatenate([[box[0], box[1], self.height / 2], yaw_quat(yaw)])
        return self.settle_arm(tcp, obj)

    def description(self) -> str:
        x, y, yaw = self.goal
        return f"{super().description()} Goal: box x = {x:.3f} m, y = {y:.3f} m, heading = {yaw:.2f} rad."

    def goal_features(self) -> np.ndarray:
        return self.goal.copy()

    def default_proposer(self) -> ScriptedPushUpright:
        return ScriptedPushUpright(self)

    def trace_points(self, qpos, sensordata) -> np.ndarray:
        """The tcp and the box's centre."""
        return np.stack([self.tcp(sensordata), np.asarray(qpos)[..., BOX]], axis=-2)

    def yaw_error(self, qpos) -> np.ndarray:
        """``(...)`` heading error (rad) of the square box, in (-pi/4, pi/4]."""
        return wrap(4 * (quat_yaw(np.asarray(qpos)[..., QUAT]) - self.goal[2])) / 4

    def error(self, qpos: np.ndarray) -> np.ndarray:
        """Box centre distance to the goal in the plane (m) plus the heading error (rad) times
        the half-width (m)."""
        q = np.asarray(qpos)
        return np.linalg.norm(q[..., BOX][..., :2] - self.goal[:2], axis=-1) + self.half * np.abs(self.yaw_error(q))

    def tilt(self, qpos) -> np.ndarray:
        """``(...)`` box tilt from upright (rad)."""
        return quat_tilt(np.asarray(qpos)[..., QUAT])

    def success(self, qpos: np.ndarray) -> bool:
        q = self.check_qpos(qpos)
        return bool(np.linalg.norm(q[BOX][:2] - self.goal[:2]) < self.pos_tol and abs(self.yaw_error(q)) < self.yaw_tol
                    and self.tilt(q) < self.upright_tol)

    def failure(self, qpos: np.ndarray) -> str:
        return "toppled" if self.tilt(qpos) > self.topple_tilt else ""

    def param_space(self) -> ParamSpace:
        """Box-table friction (both geoms, so the pair's coefficient is this value), finger
        friction, box mass (kg), box centre-of-mass offset along its x and z (m, in its frame)
        and the arm's Cartesian stiffness (N/m, x y z)."""
        return ParamSpace((
            Param("box_friction", ("geom:box/friction[0]", "geom:floor/friction[0]"), 0.05, 1.0, 0.25, 0.1),
            Param("finger_friction", ("geom:left_finger/friction[0]", "geom:right_finger/friction[0]"), 0.2, 2.0, 1.0, 0.3),
            Param("box_mass", ("body:box/mass",), 0.05, 2.0, 0.4, 0.15),
            Param("box_com_x", ("body:box/com[0]",), -0.02, 0.02, 0.0, 0.005),
            Param("box_com_z", ("body:box/com[2]",), -0.05, 0.03, -0.02, 0.01),
            Param("arm_stiffness", ("actuator:x/kp", "actuator:y/kp", "actuator:z/kp"), 150.0, 2000.0, 600.0, 150.0),
        ))


class ScriptedPushUpright(ScriptedBlockPush):
    """block-push's point-pushing script lifted to the arm: push the box's faces (a square,
    4-fold symmetric heading) with the closed fingertips at a fixed low height, targets leading
    the lagging arm. Written against the nominal physics: nothing in it knows the friction,
    the mass or where the centre of mass is."""

    def __init__(self, task: PushUpright, config: ScriptedConfig | None = None, push_height: float = 0.04):
        # the arm trails a moving target by ~kv/kp = 0.13 s; 5 cm/s keeps a tall box calm
        super().__init__(task, config or ScriptedConfig(push_speed=0.05, travel_speed=0.15, lag=0.15, lead=0.01))
        self.push_height = float(push_height)

    def pose(self, state):
        s = np.asarray(state)
        return np.array([s[BOX][0], s[BOX][1], float(quat_yaw(s[QUAT]))])

    def pusher(self, state):
        return self.task.tcp_from_qpos(np.asarray(state)[: self.task.model.nq])[:2]

    def propose(self, obs, state) -> np.ndarray:
        """``(H, 7)`` actions: the script's x, y at the push height, tool and grip held."""
        xy = super().propose(obs, state)
        return np.stack([self.task.action_at([*p, self.push_height]) for p in xy])
