"""cloth-fold: fold a 30 cm towel along its diagonal, one corner onto the opposite one.

Frame: metres, table centre at the origin, z up. The towel is a 5x5 flex grid (see
``cloth_fold.xml``); vertex ``(i, j)`` (body ``cloth_{5i+j}``) rests at
``(-0.15 + 0.075 i, -0.15 + 0.075 j)``. Its triangles are split along ``x = y``, the fold line
through corners ``b = (-0.15, -0.15)`` and ``d = (0.15, 0.15)``. The gripper grasps corner
``a = (0.15, -0.15)`` and lays it on corner ``c = (-0.15, 0.15)``: the goal is the towel reflected
across ``x = y`` on the side of ``a``, ``(x, y) -> (y, x)``, unchanged on the other.

Keypoints (observed, noisy): the 3x3 grid of corners, edge midpoints and centre. Error: mean
distance of the 4 corners and 4 edge midpoints to their goal positions; success at <= 2 cm with
the gripper released (see :mod:`twinloop.tasks.deformable` for the gripper, the grasp, the
observation and the cost).

Start: the towel flat, shifted by up to 4 mm and turned by up to 1.5 degrees; the gripper
anywhere above the towel's half near ``a`` (5-12 cm up), grasp open.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twinloop.errors import TwinloopError, as_array
from twinloop.params import Param, ParamSpace
from twinloop.tasks.base import Task
from twinloop.tasks.deformable import GraspTask
from twinloop.tasks.keypoints import Keypoint

N = 5  # vertices per side
SPACING = 0.075
HALF = SPACING * (N - 1) / 2
REST_Z = 0.003
# keypoints on the 3x3 grid of vertex indices (0, 2, 4)^2, named by role in the fold
KEYPOINT_GRID = {
    "corner_b": (0, 0), "mid_bc": (0, 2), "corner_c": (0, 4),
    "mid_ab": (2, 0), "centre": (2, 2), "mid_cd": (2, 4),
    "corner_a": (4, 0), "mid_ad": (4, 2), "corner_d": (4, 4),
}
SCORED = ("corner_a", "corner_b", "corner_c", "corner_d", "mid_ab", "mid_bc", "mid_cd", "mid_ad")
KEYPOINTS = tuple(Keypoint(n, f"cloth_{N * i + j}") for n, (i, j) in KEYPOINT_GRID.items())


def vertex_rest() -> np.ndarray:
    """``(25, 3)`` rest positions of the towel's vertices, index ``5 i + j``."""
    i, j = np.divmod(np.arange(N * N), N)
    return np.stack([-HALF + SPACING * i, -HALF + SPACING * j, np.full(N * N, REST_Z)], axis=1)


def fold(points) -> np.ndarray:
    """The diagonal fold of ``(..., 3)`` points: those with ``x > y`` reflected across ``x = y``."""
    p = np.array(points, dtype=float)
    flip = p[..., 0] > p[..., 1] + 1e-9
    p[flip, 0], p[flip, 1] = p[flip, 1].copy(), p[flip, 0].copy()
    return p


def _interpolation() -> np.ndarray:
    """``(25, 9)`` W with vertex positions = W @ keypoint positions: piecewise linear over the
    keypoint grid's cells, each split along the same diagonal as the mesh (so a fold along
    ``x = y`` is represented exactly)."""
    W = np.zeros((N * N, 9))
    col = {ij: c for c, ij in enumerate(KEYPOINT_GRID.values())}
    for v in range(N * N):
        i, j = divmod(v, N)
        ci, cj = min(i // 2, 1), min(j // 2, 1)
        a, b = (i - 2 * ci) / 2, (j - 2 * cj) / 2
        k00, k01 = col[(2 * ci, 2 * cj)], col[(2 * ci, 2 * cj + 2)]
        k10, k11 = col[(2 * ci + 2, 2 * cj)], col[(2 * ci + 2, 2 * cj + 2)]
        if a >= b:  # triangle (0,0) (1,0) (1,1)
            W[v, [k00, k10, k11]] += (1 - a, a - b, b)
        else:  # triangle (0,0) (0,1) (1,1)
            W[v, [k00, k01, k11]] += (1 - b, b - a, a)
    return W


class ClothFold(GraspTask):
    """Fold a 30 cm towel along its diagonal with a pinch gripper: lay corner a on corner c.

    Args:
        weights: overrides of :attr:`WEIGHTS` by residual name.
    """

    name = "cloth-fold"
    xml = "cloth_fold.xml"
    control_period = 0.2
    horizon = 1.0
    max_ticks = 20
    cost_stride = 5
    keypoints = KEYPOINTS
    scored = tuple(k for k in KEYPOINTS if k.name in SCORED)
    trace_keypoints = ("corner_a", "mid_ab", "mid_ad")
    grasp_body = f"cloth_{N * (N - 1)}"  # corner a

    def __init__(self, weights: dict | None = None):
        super().__init__(weights)
        self.action_low = np.array([-0.3, -0.3, 0.005, 0.0])
        self.action_high = np.array([0.3, 0.3, 0.3, 1.0])
        m = self.model
        bodies = [m.body(f"cloth_{v}").id for v in range(N * N)]
        self._vq = np.array([m.jnt_qposadr[m.body_jntadr[b]] for b in bodies])  # x of each vertex
        self._vv = np.array([m.jnt_dofadr[m.body_jntadr[b]] for b in bodies])
        self.rest = m.body_pos[bodies].copy()
        if not np.allclose(self.rest, vertex_rest()):
            raise TwinloopError("cloth-fold: the scene's towel is not the 5x5 grid this module assumes")
        rest_kp = self.rest[[N * i + j for i, j in KEYPOINT_GRID.values()]]
        self.goal = fold(rest_kp[[list(KEYPOINT_GRID).index(k.name) for k in self.scored]])
        self._W = _interpolation()

    def guess(self, points, velocities):
        """Vertices piecewise linear over the keypoint grid (exact for a flat or folded towel)."""
        m = self.model
        qpos, qvel = np.zeros(m.nq), np.zeros(m.nv)
        idx = self._vq[:, None] + np.arange(3)
        qpos[idx] = self._W @ points - self.rest
        qvel[self._vv[:, None] + np.arange(3)] = self._W @ velocities
        return qpos, qvel

    def vertices(self, qpos) -> np.ndarray:
        """``(..., 25, 3)`` vertex positions (m) of ``(..., nq)`` positions."""
        q = np.asarray(qpos, dtype=float)
        return self.rest + q[..., self._vq[:, None] + np.arange(3)]

    def initial_state(self, rng: np.random.Generator) -> np.ndarray:
        m = self.model
        yaw = np.deg2rad(rng.uniform(-1.5, 1.5))
        shift = rng.uniform(-0.004, 0.004, 2)
        c, s = np.cos(yaw), np.sin(yaw)
        xy = self.rest[:, :2] @ np.array([[c, s], [-s, c]]) + shift
        qpos = np.zeros(m.nq)
        qpos[self._vq[:, None] + np.arange(2)] = xy - self.rest[:, :2]
        qpos[0:3] = [rng.uniform(0.0, 0.15), rng.uniform(-0.15, 0.0), rng.uniform(0.05, 0.12)]
        return np.concatenate([qpos, np.zeros(m.nv + m.na)])

    def param_space(self) -> ParamSpace:
        """The towel's Young's modulus (Pa) and thickness (m) (bending stiffness goes as
        ``E t^3``), its Rayleigh damping (s), friction (towel on table, and on the gripper) and
        total mass (kg)."""
        return ParamSpace((
            Param("cloth_young", ("flex:cloth/young",), 1e4, 2.5e5, 5e4, 2.5e4),
            Param("cloth_thickness", ("flex:cloth/thickness",), 0.001, 0.004, 0.002, 0.0007),
            Param("cloth_damping", ("flex:cloth/damping",), 0.0, 0.02, 0.002, 0.002),
            Param("cloth_friction", ("flex:cloth/friction[0]",), 0.1, 1.5, 0.4, 0.15),
            Param("cloth_mass", ("flex:cloth/mass",), 0.02, 0.15, 0.05, 0.02),
        ))

    def default_proposer(self) -> ScriptedFold:
        return ScriptedFold(self)


@dataclass(frozen=True)
class FoldConfig:
    """Knobs of the scripted fold (metres, seconds), tuned on the nominal towel.

    Attributes:
        travel_speed: gripper speed when not carrying (m/s).
        arc_time: time to swing the corner over the fold line (s).
        arc_height: peak height of the corner's arc above the table (m).
        arc_radius: the arc's horizontal half-width as a fraction of the corner's distance to
            the fold line (under 1, so the towel is never stretched).
        release: fraction of the arc at which the grasp opens (the corner flies the rest).
        hover: height above the corner to descend from (m).
        pinch: gripper height above the corner when grasping (m).
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


class ScriptedFold:
    """The fold a person scripts against the nominal towel: fly to corner a, pinch it, swing it
    over the fold line on a half ellipse in ``arc_time`` and let go at ``release`` of the way,
    so the corner's momentum lays it on corner c; then back off. Re-planned every tick from the
    estimated state (it re-grasps a dropped corner), but it never checks where a released
    corner landed: a towel that drapes, slides or flies unlike the nominal one stays wrong.

    ``propose(obs, state) -> (H, 4)`` actions per control tick, ``H = round(1 s / period)``.
    """

    def __init__(self, task: Task, config: FoldConfig | None = None):
        if not isinstance(task, ClothFold):
            raise TwinloopError(f"ScriptedFold folds cloth-fold, got task {task.name!r}")
        self.task, self.config = task, config or FoldConfig()
        self.dt = task.control_period
        self.H = max(1, int(round(1.0 / self.dt)))
        ka = list(KEYPOINT_GRID).index("corner_a")
        start = task.rest[N * (N - 1)]
        self.goal_a = task.goal[[k.name for k in task.scored].index("corner_a")]
        self.centre = (start + self.goal_a) / 2  # the fold line's point nearest corner a
        self.out = (start - self.centre) / np.linalg.norm(start - self.centre)
        self.reach = float(np.linalg.norm(start[:2] - self.centre[:2]))
        self._ka = ka

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset: the script reads everything from the state."""

    def propose(self, obs, state) -> np.ndarray:
        t, cfg = self.task, self.config
        s = as_array(state, "state", (t.nstate,))
        m = t.model
        grip, act = s[0:3], s[m.nq + m.nv]
        corner = t.keypoint_positions(s[: m.nq])[self._ka]
        gap = float(np.linalg.norm(grip - corner))
        held = act > 0.5 and gap < t.capture_radius
        if held:
            return self._swing(corner)
        if (corner - self.centre) @ self.out < 0:
            return self._walk(grip, [grip + [0, 0, 0.08]], 0.0)  # over the fold line: done, back off
        above = corner + [0, 0, cfg.hover]
        pinch = corner + [0, 0, cfg.pinch]
        if np.linalg.norm(grip[:2] - corner[:2]) > 0.01 or grip[2] > corner[2] + cfg.hover + 0.01:
            return self._walk(grip, [above, pinch], 0.0, close_at_end=True)
        return self._walk(grip, [pinch], 1.0)

    # -- the script --------------------------------------------------------------------------

    def _arc(self, theta) -> np.ndarray:
        """Gripper target for the corner at arc angle ``theta`` (0: start, pi: on corner c)."""
        cfg = self.config
        r = cfg.arc_radius * self.reach
        th = np.asarray(theta, dtype=float)[..., None]
        p = self.centre + r * np.cos(th) * self.out + np.array([0, 0, 1.0]) * cfg.arc_height * np.sin(th)
        return p + [0, 0, self.config.pinch]

    def _swing(self, corner: np.ndarray) -> np.ndarray:
        """Continue the swing from the corner's current angle; open at ``release``."""
        cfg = self.config
        rel = corner - self.centre
        theta = float(np.arctan2(rel[2] / cfg.arc_height, (rel @ self.out) / (cfg.arc_radius * self.reach)))
        theta = float(np.clip(theta, 0.0, np.pi))
        w = np.pi / cfg.arc_time
        ticks = theta + w * (self.dt * np.arange(1, self.H + 1) + cfg.lag)
        targets = self._arc(np.minimum(ticks, np.pi))
        grasp = (ticks < cfg.release * np.pi).astype(float)
        out = np.column_stack([targets, grasp])
        return np.clip(out, self.task.action_low, self.task.action_high)

    def _walk(self, start, path, grasp: float, close_at_end: bool = False) -> np.ndarray:
        """Targets moving along ``path`` at ``travel_speed`` (held at its end), grasp command
        ``grasp`` (or closing once the path's end is reached)."""
        cfg = self.config
        out = np.empty((self.H, 4))
        pos, seg = np.asarray(start, float), 0
        budget = cfg.lag
        for k in range(self.H):
            budget += self.dt
            while seg < len(path):
                gap = float(np.linalg.norm(path[seg] - pos))
                if gap > cfg.travel_speed * budget:
                    pos = pos + (path[seg] - pos) * (cfg.travel_speed * budget / gap)
                    budget = 0.0
                    break
                pos, budget, seg = np.asarray(path[seg], float), budget - gap / cfg.travel_speed, seg + 1
            out[k, :3] = pos
            out[k, 3] = 1.0 if (close_at_end and seg >= len(path)) else grasp
        return np.clip(out, self.task.action_low, self.task.action_high)
