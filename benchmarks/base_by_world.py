"""Success of a controller across ShiftedWorld draws: how much one world's luck matters.

For each world seed, runs the demo's episodes (same episode seeds as ``twinloop run --seed``)
with the base proposer alone (default) or with refinement, and prints the success rate with
its 95% Wilson interval.

    python benchmarks/base_by_world.py --world-seeds 0 1 2 --episodes 20 [--refined]

With ``--world-per-episode`` each seed is a run seed whose episodes each meet their own world
(as ``twinloop run --world-per-episode --seed S``); it prints one line per episode (outcome,
final error, whether the world's simulation went unstable, the hidden values) and the rate.

    python benchmarks/base_by_world.py --task rope-shape --world-per-episode --world-seeds 0 1
"""

from __future__ import annotations

import argparse

import mujoco

from twinloop.control import Controller
from twinloop.run.compare import RunConfig, build, episode_seeds
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="push-t")
    ap.add_argument("--proposer", default="scripted")
    ap.add_argument("--severity", type=int, default=2)
    ap.add_argument("--world-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--world-per-episode", action="store_true", help="each episode in its own world")
    ap.add_argument("--refined", action="store_true", help="refine the proposal (slow) instead of the base alone")
    a = ap.parse_args()
    print(f"{a.task}, shifted world severity {a.severity}, {'refined' if a.refined else 'base proposer alone'} "
          f"({a.proposer}){', a world per episode' if a.world_per_episode else ''}")
    if not a.world_per_episode:
        print(f"{'world seed':>10} {'success':>10} {'95% CI':>14}  hidden params")
    for ws in a.world_seeds:
        cfg = RunConfig(task=a.task, severity=a.severity, seed=ws, episodes=a.episodes, proposer=a.proposer,
                        world_per_episode=a.world_per_episode, video=False, record=False)
        task, world, proposer, refiner = build(cfg)
        ctl = Controller(refiner, proposer, refine=a.refined)
        k = unstable = 0
        for s in episode_seeds(cfg):
            r = run_episode(world, ctl, s, record=False)
            k += r.success
            if a.world_per_episode:
                # MuJoCo resets a simulation whose accelerations blow up and counts it as a warning
                bad = world.world.data.warning[mujoco.mjtWarning.mjWARN_BADQACC].number > 0
                unstable += bad
                params = ", ".join(f"{n}={v:.3g}" for n, v in world.drawn()["world_params"].items())
                print(f"  episode {s:>7} {'success' if r.success else 'failure'} {1000 * r.final_error:6.1f} mm"
                      f"{' UNSTABLE' if bad else '         '}  {params}")
        lo, hi = wilson(k, a.episodes)
        if a.world_per_episode:
            print(f"seed {ws}: {k}/{a.episodes} [{100 * lo:3.0f}%, {100 * hi:3.0f}%], {unstable} worlds unstable")
        else:
            params = ", ".join(f"{n}={v:.3g}" for n, v in world.describe()["params"].items())
            print(f"{ws:>10} {k:>4}/{a.episodes:<5} [{100 * lo:3.0f}%, {100 * hi:3.0f}%]  {params}")


if __name__ == "__main__":
    main()
