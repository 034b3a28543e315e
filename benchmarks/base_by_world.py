"""Success of a controller across ShiftedWorld draws: how much one world's luck matters.

For each world seed, runs the demo's episodes (same episode seeds as ``twinloop run --seed``)
with the base proposer alone (default) or with refinement, and prints the success rate with
its 95% Wilson interval.

    python benchmarks/base_by_world.py --world-seeds 0 1 2 --episodes 20 [--refined]
"""

from __future__ import annotations

import argparse

from twinloop.control import Controller
from twinloop.run.compare import RunConfig, build, episode_seeds
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="push-t")
    ap.add_argument("--severity", type=int, default=2)
    ap.add_argument("--world-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--refined", action="store_true", help="refine the proposal (slow) instead of the base alone")
    a = ap.parse_args()
    print(f"{a.task}, shifted world severity {a.severity}, {'refined' if a.refined else 'base proposer alone'}")
    print(f"{'world seed':>10} {'success':>10} {'95% CI':>14}  hidden params")
    for ws in a.world_seeds:
        cfg = RunConfig(task=a.task, severity=a.severity, seed=ws, episodes=a.episodes, video=False, record=False)
        task, world, proposer, refiner = build(cfg)
        ctl = Controller(refiner, proposer, refine=a.refined)
        k = sum(run_episode(world, ctl, s, record=False).success for s in episode_seeds(cfg))
        lo, hi = wilson(k, a.episodes)
        params = ", ".join(f"{n}={v:.3g}" for n, v in world.describe()["params"].items())
        print(f"{ws:>10} {k:>4}/{a.episodes:<5} [{100 * lo:3.0f}%, {100 * hi:3.0f}%]  {params}")


if __name__ == "__main__":
    main()
