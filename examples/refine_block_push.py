"""Refinement from scratch: MPPI in the nominal twin pushes a block to its goal.

    python examples/refine_block_push.py
"""

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.plan import make_optimizer
from twinloop.run.experiment import run_episode
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import SimWorld

task = make_task("block-push")
twin = make_twin("mujoco", task.model, task.param_space())
refiner = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=64, horizon=1.0))
for seed in range(3):
    r = run_episode(SimWorld(task), Controller(refiner), seed=seed, record=False)
    print(f"seed {seed}: success={r.success} ticks={r.ticks} error={r.final_error:.4f} control={r.control_hz:.0f} Hz")
