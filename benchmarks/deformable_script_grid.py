"""How the deformable tasks' scripted proposers were tuned: on the nominal world only.

A grid over the swing's arc_time, release, arc_height and arc_radius, 10 episodes each in the
nominal world (seeds 90000-90009, never an evaluation seed), ranked by successes, then mean
ticks, then mean final error; prints the best rows. The winners are ``FOLD`` in
``tasks/cloth_fold.py``, ``SWING`` in ``tasks/rope_shape.py`` and ``FOLD2`` in
``tasks/cloth_fold_2.py`` (cloth-fold-2: both grippers swing with the same knobs at once, the
rule and the grid the same, chosen before any cloth-fold-2 episode in a shifted world ran).

    python benchmarks/deformable_script_grid.py cloth-fold
    python benchmarks/deformable_script_grid.py cloth-fold-2 --top 10
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from twinloop.tasks import make_task
from twinloop.tasks.deformable import SwingConfig, SwingScript
from twinloop.tasks.two_grasp import TwoArmScript
from twinloop.worlds import SimWorld

GRID = {"arc_time": (0.6, 0.8, 1.0, 1.2, 1.6), "release": (0.6, 0.8, 1.0), "arc_height": (0.1, 0.15, 0.2),
        "arc_radius": (0.8, 0.9, 0.95)}


def make_script(task, cfg: SwingConfig):
    """The task's scripted base with the swing knobs ``cfg``."""
    if task.name == "cloth-fold-2":
        return TwoArmScript(task.swing(0, cfg), task.swing(1, cfg))
    base = task.default_proposer()
    start, goal = base.centre + base.out * base.reach, base.centre - base.out * base.reach
    return SwingScript(task, base.point, start, goal, cfg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", choices=("cloth-fold", "rope-shape", "cloth-fold-2"))
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args()
    task = make_task(args.task)
    world = SimWorld(task)
    rows = []
    for values in itertools.product(*GRID.values()):
        cfg = SwingConfig(**dict(zip(GRID, values, strict=True)))
        script = make_script(task, cfg)
        ok, ticks, errors = 0, [], []
        for seed in range(90000, 90010):
            obs, done, n = world.reset(seed), False, 0
            while not done and n < task.max_ticks:
                obs, info = world.step(script.propose(obs, task.state_from_obs(obs))[0])
                n, done = n + 1, task.success(info["qpos"])
            ok += done
            ticks.append(n)
            errors.append(float(task.error(info["qpos"])))
        rows.append((ok, -np.mean(ticks), -np.mean(errors), values))
    print(f"{args.task}: best of {len(rows)} scripts (successes / 10, mean ticks, mean error cm, {', '.join(GRID)})")
    for ok, ticks, err, values in sorted(rows, reverse=True)[: args.top]:
        print(f"  {ok}/10  {-ticks:5.1f}  {-100 * err:4.2f}  {values}")


if __name__ == "__main__":
    main()
