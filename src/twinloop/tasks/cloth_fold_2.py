"""cloth-fold-2: fold the 30 cm towel in half with two grippers, the near corners onto the far ones.

Frame: metres, table centre at the origin, z up. The towel is cloth-fold's 5x5 flex grid (see
:mod:`twinloop.tasks.cloth_fold`): vertex ``(i, j)`` (body ``cloth_{5i+j}``) rests at
``(-0.15 + 0.075 i, -0.15 + 0.075 j)``. The left gripper grasps near corner
``b = (-0.15, -0.15)``, the right one near corner ``a = (0.15, -0.15)``; together they lay them
on the far corners ``c = (-0.15, 0.15)`` and ``d = (0.15, 0.15)``: the goal is the towel
reflected across ``y = 0`` (a row of mesh edges, where it creases) on the near side,
``(x, y) -> (x, -y)``, unchanged on the far side.

Keypoints, error and success as cloth-fold's (the 3x3 grid observed; the 4 corners and 4 edge
midpoints scored; success at <= 2 cm mean error), with both grippers released (see
:mod:`twinloop.tasks.two_grasp` for the two grippers, their grasps, the observation and cost).

Start: the towel flat, shifted by up to 4 mm and turned by up to 1.5 degrees; each gripper
anywhere above its own near quarter of the towel (5-12 cm up), both grasps open.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from twinloop.errors import TwinloopError
from twinloop.tasks.cloth_fold import (
    KEYPOINT_GRID,
    KEYPOINTS,
    SCORED,
    ClothFold,
    N,
    interpolation,
    vertex_rest,
)
from twinloop.tasks.deformable import SwingConfig, SwingScript
from twinloop.tasks.two_grasp import TwoArmScript, TwoGraspTask

# The scripted fold, chosen on the nominal towel alone (benchmarks/deformable_script_grid.py
# cloth-fold-2; the rule and the grid are in its docstring): 10/10 nominal episodes (seeds
# 90000-90009), 10.4 ticks, 8.4 mm mean final error; the next best 9/10.
FOLD2 = SwingConfig(arc_time=1.6, release=1.0, arc_height=0.15, arc_radius=0.9)


def fold_in_half(points) -> np.ndarray:
    """The fold of ``(..., 3)`` points across ``y = 0``: those with ``y < 0`` reflected."""
    p = np.array(points, dtype=float)
    flip = p[..., 1] < -1e-9
    p[flip, 1] = -p[flip, 1]
    return p


class ClothFold2(TwoGraspTask):
    """Fold cloth-fold's towel in half with two pinch grippers: the near corners onto the far ones.

    Args:
        weights: overrides of :attr:`WEIGHTS` by residual name.
        settle_steps: relaxation steps of the keypoint -> state estimate (0: interpolation alone).
    """

    name = "cloth-fold-2"
    xml = "cloth_fold_2.xml"
    control_period = 0.2
    max_ticks = 20
    cost_stride = 5
    max_body_speed = 5.0  # m/s: as cloth-fold (the same towel, swung the same way)
    success_dwell = 0.4
    keypoints = KEYPOINTS
    scored = tuple(k for k in KEYPOINTS if k.name in SCORED)
    trace_keypoints = ("corner_a", "corner_b", "mid_ab")
    grasp_bodies = ("cloth_0", f"cloth_{N * (N - 1)}")
    grasp_offsets = ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    grasp_points = ("corner_b", "corner_a")
    binary_actions = (3, 7)  # both grasp commands
    defaults = MappingProxyType({**TwoGraspTask.defaults})

    # the towel's interpolation, vertex map and physical parameters are cloth-fold's
    guess = ClothFold.guess
    vertices = ClothFold.vertices
    param_space = ClothFold.param_space

    def __init__(self, weights: dict | None = None, settle_steps: int = 10):
        super().__init__(weights, settle_steps)
        self.action_low = np.tile([-0.3, -0.3, 0.005, 0.0], 2)
        self.action_high = np.tile([0.3, 0.3, 0.3, 1.0], 2)
        m = self.model
        bodies = [m.body(f"cloth_{v}").id for v in range(N * N)]
        self._vq = np.array([m.jnt_qposadr[m.body_jntadr[b]] for b in bodies])
        self._vv = np.array([m.jnt_dofadr[m.body_jntadr[b]] for b in bodies])
        self.rest = m.body_pos[bodies].copy()
        if not np.allclose(self.rest, vertex_rest()):
            raise TwinloopError("cloth-fold-2: the scene's towel is not the 5x5 grid this module assumes")
        rest_kp = self.rest[[N * i + j for i, j in KEYPOINT_GRID.values()]]
        self.goal = fold_in_half(rest_kp[[list(KEYPOINT_GRID).index(k.name) for k in self.scored]])
        self._W = interpolation()

    def initial_state(self, rng: np.random.Generator) -> np.ndarray:
        m = self.model
        yaw = np.deg2rad(rng.uniform(-1.5, 1.5))
        shift = rng.uniform(-0.004, 0.004, 2)
        c, s = np.cos(yaw), np.sin(yaw)
        xy = self.rest[:, :2] @ np.array([[c, s], [-s, c]]) + shift
        qpos = np.zeros(m.nq)
        qpos[self._vq[:, None] + np.arange(2)] = xy - self.rest[:, :2]
        qpos[0:3] = [rng.uniform(-0.15, 0.0), rng.uniform(-0.15, 0.0), rng.uniform(0.05, 0.12)]
        qpos[3:6] = [rng.uniform(0.0, 0.15), rng.uniform(-0.15, 0.0), rng.uniform(0.05, 0.12)]
        return np.concatenate([qpos, np.zeros(m.nv + m.na)])

    def default_proposer(self) -> TwoArmScript:
        """Both near corners swung onto the far ones at once, one
        :class:`~twinloop.tasks.deformable.SwingScript` per gripper with :data:`FOLD2`."""
        return TwoArmScript(*(self.swing(arm, FOLD2) for arm in (0, 1)))

    def swing(self, arm: int, config: SwingConfig) -> SwingScript:
        """The swing of gripper ``arm`` (0 left, 1 right) under ``config``."""
        name = self.grasp_points[arm]
        vertex = (0, N * (N - 1))[arm]
        return SwingScript(self, self.point_index(name), self.rest[vertex], self.goal_of(name), config, arm=arm)
