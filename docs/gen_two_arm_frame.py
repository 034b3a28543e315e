"""Regenerate docs/assets/two-arm-frame.png: one frame of a refined cloth-fold-2 episode in the
shifted world (world seed 0, episode seed 0, the task's defaults), each gripper's candidate
rollouts drawn as ghost traces (the traces of :meth:`TwoGraspTask.trace_points`: both grippers
and their corners).

    python docs/gen_two_arm_frame.py [--frame N]

The frame shown is the first one whose tick rehearsed candidates (the refined plan's ghosts),
after ``--frame`` ticks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import imageio.v2 as imageio

from twinloop.run.build import build, episode_seeds, refined_controller
from twinloop.run.compare import RunConfig, ghost_traces
from twinloop.run.config import configure
from twinloop.run.experiment import run_episode
from twinloop.tasks import task_defaults
from twinloop.viz.video import render_frames

OUT = Path(__file__).parent / "assets" / "two-arm-frame.png"


def main(first: int = 3, task_name: str = "cloth-fold-2") -> Path:
    cli = {"experiment.task": task_name, "experiment.world": "shifted", "experiment.episodes": 1,
           "experiment.video": False, "experiment.record": False}
    cfg, _ = configure(RunConfig, task_defaults(task_name), cli=cli)
    task, world, proposer, refiner = build(cfg, keep_rollouts=True)
    ctl = refined_controller(cfg, task, proposer, refiner, None)
    r = run_episode(world, ctl, episode_seeds(cfg)[0], max_ticks=cfg.experiment.max_ticks, record=False,
                    ghosts=ghost_traces(task))
    pick = next((i for i, g in enumerate(r.ghosts) if i >= first and g is not None), None)
    if pick is None:
        raise SystemExit(f"no tick after {first} rehearsed candidates ({len(r.ghosts)} ticks)")
    frames = render_frames(task, world.model, r.qpos[pick : pick + 1], ghosts=r.ghosts[pick : pick + 1],
                           camera=task.camera, width=640, height=480)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    imageio.imwrite(OUT, next(iter(frames)))
    print(f"{OUT}: tick {pick} of {len(r.ghosts)}, success {r.success}")
    return OUT


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frame", type=int, default=3)
    p.add_argument("--task", default="cloth-fold-2")
    a = p.parse_args()
    main(a.frame, a.task)
