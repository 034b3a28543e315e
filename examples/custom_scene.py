"""Your own MJCF scene and a cost in a few lines: refine a two-link arm's reach to a point.

    python examples/custom_scene.py

No subclass: :class:`twinloop.tasks.SceneTask` takes the scene, the cost as named residuals
(read from the rollout's sensors here: the tip's ``framepos``), the error and a tolerance.
The start state is the scene's keyframe; actions are bounded by the actuators' ctrlrange.
"""

from pathlib import Path

import numpy as np

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.plan import make_optimizer
from twinloop.run.experiment import run_episode
from twinloop.tasks import Residual, SceneTask
from twinloop.twin import make_twin
from twinloop.worlds import SimWorld

GOAL = np.array([-0.12, 0.16])  # where the tip should go (m, in the plane)


def tip_error(qpos: np.ndarray) -> np.ndarray:
    """Tip distance to GOAL (m) from joint angles, by the arm's forward kinematics."""
    a, b = qpos[..., 0], qpos[..., 0] + qpos[..., 1]
    tip = np.stack([0.15 * np.cos(a) + 0.12 * np.cos(b), 0.15 * np.sin(a) + 0.12 * np.sin(b)], axis=-1)
    return np.linalg.norm(tip - GOAL, axis=-1)


def make_reach_task() -> SceneTask:
    return SceneTask(
        Path(__file__).with_name("reach.xml"),
        name="reach",
        residuals=[
            Residual("tip", 1.0, lambda t: (t.sensordata[..., 1:, 0:2] - GOAL) / 0.05),
            Residual("final_tip", 2.0, lambda t: (t.sensordata[..., -1, 0:2] - GOAL) / 0.02, terminal=True),
            # joint speeds (rad/s): a reach ends at rest, since success must hold for the task's dwell
            Residual("still", 0.05, lambda t: t.qvel[..., 1:, :]),
        ],
        error=tip_error,
        tolerance=0.01,
        control_period=0.05,
        horizon=0.5,
        max_ticks=60,
    )


def main(episodes: int = 2, num_samples: int = 32) -> list:
    task = make_reach_task()
    twin = make_twin("mujoco", task.model)
    refiner = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=num_samples, horizon=task.horizon))
    results = [run_episode(SimWorld(task), Controller(refiner), seed=s, record=False) for s in range(episodes)]
    for r in results:
        print(f"seed {r.seed}: success={r.success} ticks={r.ticks} error={r.final_error:.4f} m")
    return results


if __name__ == "__main__":
    main()
