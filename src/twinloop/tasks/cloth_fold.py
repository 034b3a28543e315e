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

Camera (``seen``, for ``observe='rgb'``): the nine keypoints' x, y and z from one oblique image
(:data:`SEEN`); the training states beyond the flat reset are folds the scripted fold makes
when perturbed (:meth:`ClothFold.near_goal_state`).
"""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.errors import TwinloopError
from twinloop.params import Param, ParamSpace
from twinloop.tasks.deformable import GraspTask, SwingConfig, SwingScript, choose_resolution
from twinloop.tasks.keypoints import Keypoint
from twinloop.tasks.seen import Seen

N = 5  # vertices per side of the scene's towel
SPACING = 0.075  # between the scene's vertices (m)
SIZE = SPACING * (N - 1)  # side (m)
HALF = SIZE / 2
RESOLUTIONS = (3, 5, 7, 9)  # vertices per side a towel may be built with (odd: keypoints on vertices)
REST_Z = 0.003
# keypoints on the 3x3 grid of vertex indices (0, 2, 4)^2, named by role in the fold
KEYPOINT_GRID = {
    "corner_b": (0, 0), "mid_bc": (0, 2), "corner_c": (0, 4),
    "mid_ab": (2, 0), "centre": (2, 2), "mid_cd": (2, 4),
    "corner_a": (4, 0), "mid_ad": (4, 2), "corner_d": (4, 4),
}
SCORED = ("corner_a", "corner_b", "corner_c", "corner_d", "mid_ab", "mid_bc", "mid_cd", "mid_ad")
KEYPOINTS = tuple(Keypoint(n, f"cloth_{N * i + j}") for n, (i, j) in KEYPOINT_GRID.items())
# The scripted fold, chosen on the nominal towel alone: a grid over arc_time (0.6-1.6 s),
# release (0.6-1), arc_height (0.1-0.2 m) and arc_radius (0.8-0.95), 10 episodes each (seeds
# 90000-90009), keeping the most successes, then the fewest ticks, then the lowest error.
FOLD = SwingConfig(arc_time=1.6, release=0.8, arc_height=0.2, arc_radius=0.9)
#: what a camera sees: every keypoint's x, y and z (heights included: a lifted corner, a folded
#: layer) and their rates, from one oblique 96 px camera behind corner b looking across the
#: towel toward d, 50 degrees down, 0.75 m from a point 4 cm above the table and 3 cm from its
#: centre toward c (where a fold drags the towel). The fold's arc lies in the vertical plane
#: through a and c, across the line of sight, so a lifted corner's height moves it up the image
#: (by cos 50 of it); straight above, a height only scales a point's offset from the image centre.
#: The robot knows what it holds (``held``): a corner its grasp holds is placed under the fingers
#: (:func:`~twinloop.tasks.seen.held_seen`), where the image misreads it most.
SEEN = Seen(tuple(f"{k}_{c}" for k in KEYPOINT_GRID for c in "xyz"),
            {f"{k}_v{c}": f"{k}_{c}" for k in KEYPOINT_GRID for c in "xyz"},
            ({"lookat": (-0.02, 0.02, 0.04), "distance": 0.75, "azimuth": 45.0, "elevation": -50.0},),
            held=True)


def vertex_rest(n: int = N) -> np.ndarray:
    """``(n n, 3)`` rest positions of an ``n x n`` towel's vertices, index ``n i + j``."""
    i, j = np.divmod(np.arange(n * n), n)
    spacing = SIZE / (n - 1)
    return np.stack([-SIZE / 2 + spacing * i, -SIZE / 2 + spacing * j, np.full(n * n, REST_Z)], axis=1)


def keypoint_vertex(name: str, n: int = N) -> int:
    """Index of the vertex of an ``n x n`` towel that keypoint ``name`` sits on."""
    h = (n - 1) // 2
    i, j = KEYPOINT_GRID[name]
    return n * (i // 2 * h) + j // 2 * h


def fold(points) -> np.ndarray:
    """The diagonal fold of ``(..., 3)`` points: those with ``x > y`` reflected across ``x = y``."""
    p = np.array(points, dtype=float)
    flip = p[..., 0] > p[..., 1] + 1e-9
    p[flip, 0], p[flip, 1] = p[flip, 1].copy(), p[flip, 0].copy()
    return p


def interpolation(n: int = N) -> np.ndarray:
    """``(n n, 9)`` W with vertex positions = W @ keypoint positions: piecewise linear over the
    keypoint grid's cells, each split along the same diagonal as the mesh (so a fold along
    ``x = y`` is represented exactly). Also the map from the keypoints of one resolution to the
    vertices of another (:mod:`twinloop.tasks.resolution`)."""
    h = (n - 1) // 2
    W = np.zeros((n * n, 9))
    col = {ij: c for c, ij in enumerate(KEYPOINT_GRID.values())}
    for v in range(n * n):
        i, j = divmod(v, n)
        ci, cj = min(i // h, 1), min(j // h, 1)
        a, b = (i - h * ci) / h, (j - h * cj) / h
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
        settle_steps: relaxation steps of the keypoint -> state estimate (0: interpolation alone).
    """

    name = "cloth-fold"
    xml = "cloth_fold.xml"
    control_period = 0.2
    max_ticks = 20
    cost_stride = 5
    max_body_speed = 5.0  # m/s: normal episodes peak at 1.0-3.3 (benchmarks/body_speed.py, RESULTS.md)
    success_dwell = 0.4  # s: two 0.2 s ticks (the success test already asks every point to have landed)
    keypoints = KEYPOINTS
    scored = tuple(k for k in KEYPOINTS if k.name in SCORED)
    trace_keypoints = ("corner_a", "mid_ab", "mid_ad")
    grasp_body = f"cloth_{N * (N - 1)}"
    grasp_point = "corner_a"
    seen = SEEN
    #: folds (:meth:`near_goal_state`): the scripted fold's goal moved by up to this (m, x and
    #: y), its arc height, release and arc time drawn in these ranges (m, of the way, s)
    FOLDS = (0.06, (0.05, 0.22), (0.5, 1.0), (0.8, 2.0))

    def __init__(self, weights: dict | None = None, settle_steps: int = 10, resolution: int = N):
        self.resolution = n = choose_resolution("cloth-fold", resolution, RESOLUTIONS)
        if n != N:  # a towel of another mesh: the keypoints sit on other vertices
            self.keypoints = tuple(Keypoint(k.name, f"cloth_{keypoint_vertex(k.name, n)}") for k in KEYPOINTS)
            self.scored = tuple(k for k in self.keypoints if k.name in SCORED)
            self.grasp_body = f"cloth_{n * (n - 1)}"
        super().__init__(weights, settle_steps)
        self.action_low = np.array([-0.3, -0.3, 0.005, 0.0])
        self.action_high = np.array([0.3, 0.3, 0.3, 1.0])
        m = self.model
        bodies = [m.body(f"cloth_{v}").id for v in range(n * n)]
        self._vq = np.array([m.jnt_qposadr[m.body_jntadr[b]] for b in bodies])  # x of each vertex
        self._vv = np.array([m.jnt_dofadr[m.body_jntadr[b]] for b in bodies])
        self.rest = m.body_pos[bodies].copy()
        if not np.allclose(self.rest, vertex_rest(n)):
            raise TwinloopError(f"cloth-fold: the scene's towel is not the {n}x{n} grid this module assumes")
        rest_kp = self.rest[[keypoint_vertex(name, n) for name in KEYPOINT_GRID]]
        self.goal = fold(rest_kp[[list(KEYPOINT_GRID).index(k.name) for k in self.scored]])
        self._W = interpolation(n)

    def scene(self) -> mujoco.MjSpec:
        """The scene file, its towel at :attr:`resolution` vertices per side (the same size,
        total mass and material)."""
        n = self.resolution
        if n == N:
            return super().scene()
        text = self.xml_path.read_text()
        old = f'count="{N} {N} 1" spacing="{SPACING} {SPACING} {SPACING}"'
        if old not in text:
            raise TwinloopError(f"cloth-fold: the scene's flexcomp does not read {old}")
        step = SIZE / (n - 1)
        return mujoco.MjSpec.from_string(text.replace(old, f'count="{n} {n} 1" spacing="{step!r} {step!r} {step!r}"'))

    def at_resolution(self, resolution: int) -> ClothFold:
        """This task (its class, cost weights and settle steps) with a towel of ``resolution``
        vertices per side: a subclass plans with its own variant."""
        return type(self)(weights=self._weight_overrides, settle_steps=self.settle_steps, resolution=resolution)

    def guess(self, points, velocities):
        """Vertices piecewise linear over the keypoint grid (exact for a flat or folded towel)."""
        m = self.model
        qpos, qvel = np.zeros(m.nq), np.zeros(m.nv)
        idx = self._vq[:, None] + np.arange(3)
        qpos[idx] = self._W @ points - self.rest
        qvel[self._vv[:, None] + np.arange(3)] = self._W @ velocities
        return qpos, qvel

    def vertices(self, qpos) -> np.ndarray:
        """``(..., n n, 3)`` vertex positions (m) of ``(..., nq)`` positions."""
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

    def near_goal_state(self, rng: np.random.Generator) -> np.ndarray:
        """A towel as a fold leaves it: a reset state rolled in the twin under the scripted fold
        (:class:`~twinloop.tasks.deformable.SwingScript`, :data:`FOLD`) whose goal is moved
        uniformly within :attr:`FOLDS` ``[0]`` in x and y and whose arc height, release and arc
        time are drawn uniformly in :attr:`FOLDS` ``[1:]``, for a uniformly drawn 1 to
        :attr:`max_ticks` ticks: flat, pinched, lifted, swung, dropped short of, on and beyond
        the fold, with the gripper where it holds or leaves the corner."""
        move, heights, releases, times = self.FOLDS
        state = self.initial_state(rng)
        a = self.grasp_point
        goal = self.goal_of(a) + np.array([*rng.uniform(-move, move, 2), 0.0])
        cfg = SwingConfig(arc_time=float(rng.uniform(*times)), release=float(rng.uniform(*releases)),
                          arc_height=float(rng.uniform(*heights)), arc_radius=FOLD.arc_radius)
        script = SwingScript(self, self.point_index(a), self.rest[self.resolution * (self.resolution - 1)], goal, cfg)
        return self.rolled_under(state, script, int(rng.integers(1, self.max_ticks + 1)))

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

    def default_proposer(self) -> SwingScript:
        """Swing corner a onto corner c (:class:`~twinloop.tasks.deformable.SwingScript`) with
        :data:`FOLD`."""
        a = self.grasp_point
        return SwingScript(self, self.point_index(a), self.rest[self.resolution * (self.resolution - 1)], self.goal_of(a), FOLD)
