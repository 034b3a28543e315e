"""How the deformable tasks' scripted proposers were tuned: on the nominal world, or over worlds.

A grid over the swing's arc_time, release, arc_height and arc_radius, 10 episodes each in the
nominal world (seeds 90000-90009, never an evaluation seed), ranked by successes, then mean
ticks, then mean final error; prints the best rows. The winners are ``FOLD`` in
``tasks/cloth_fold.py``, ``QUICK_SWING`` in ``tasks/rope_shape.py`` (its ``SWING`` is chosen
over worlds, below) and ``FOLD2`` in ``tasks/cloth_fold_2.py`` (cloth-fold-2: both grippers
swing with the same knobs at once, the rule and the grid the same, chosen before any
cloth-fold-2 episode in a shifted world ran).

    python benchmarks/deformable_script_grid.py cloth-fold
    python benchmarks/deformable_script_grid.py cloth-fold-2 --top 10

With ``--over-worlds S ...`` each script instead runs the episodes of ``twinloop run --world
shifted --world-per-episode --seed S --episodes 20`` for each run seed S (base alone, each
episode in its own world, judged by the run's own episode: success held for its dwell), ranked
by successes, then the shorter arc_time, then fewer mean ticks; ``--json`` writes every row.
Either way ``--only`` runs the listed scripts instead of the grid
(``arc_time,release,arc_height,arc_radius`` each).

    python benchmarks/deformable_script_grid.py rope-shape --over-worlds 20 21 22 23 24
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np

from twinloop.control import Controller
from twinloop.run.compare import RunConfig, build, episode_seeds
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson
from twinloop.tasks import make_task
from twinloop.tasks.deformable import SwingConfig, SwingScript
from twinloop.tasks.two_grasp import TwoArmScript
from twinloop.worlds import SimWorld

GRID = {"arc_time": (0.6, 0.8, 1.0, 1.2, 1.6), "release": (0.6, 0.8, 1.0), "arc_height": (0.1, 0.15, 0.2),
        "arc_radius": (0.8, 0.9, 0.95)}
#: over worlds: slower swings too (the 5 s episode still fits the approach and a 2 s arc)
OVER_WORLDS = {**GRID, "arc_time": (0.8, 1.2, 1.6, 2.0)}


def make_script(task, cfg: SwingConfig):
    """The task's scripted base with the swing knobs ``cfg``."""
    if task.name == "cloth-fold-2":
        return TwoArmScript(task.swing(0, cfg), task.swing(1, cfg))
    base = task.default_proposer()
    start, goal = base.centre + base.out * base.reach, base.centre - base.out * base.reach
    return SwingScript(task, base.point, start, goal, cfg)


def over_worlds(args, grid) -> None:
    """Each script of ``grid`` alone on the worlds of ``args.over_worlds`` (one world an episode)."""
    runs = []
    for seed in args.over_worlds:  # one build per run seed: the scripts differ in knobs alone
        cfg = RunConfig(task=args.task, severity=2, seed=seed, episodes=20, world_per_episode=True,
                        video=False, record=False)
        task, world, proposer, refiner = build(cfg)
        runs.append((world, Controller(refiner, proposer, refine=False), proposer, episode_seeds(cfg)))
    rows = []
    for values in grid:
        knobs = dict(zip(GRID, values, strict=True))
        ok, ticks, n = 0, [], 0
        for world, ctl, proposer, seeds in runs:
            proposer.config = SwingConfig(**knobs)
            for s in seeds:
                r = run_episode(world, ctl, s, record=False)
                ok, n = ok + r.success, n + 1
                ticks.append(r.ticks)
        rows.append({**knobs, "successes": ok, "episodes": n, "mean_ticks": float(np.mean(ticks))})
        print(f"  {ok}/{n}  {np.mean(ticks):5.1f}  {values}", flush=True)
    rows.sort(key=lambda r: (-r["successes"], r["arc_time"], r["mean_ticks"]))
    print(f"{args.task} over the worlds of run seeds {args.over_worlds}: best of {len(rows)} scripts alone")
    for r in rows[: args.top]:
        lo, hi = wilson(r["successes"], r["episodes"])
        print(f"  {r['successes']}/{r['episodes']} [{100 * lo:.0f}, {100 * hi:.0f}]%  {r['mean_ticks']:5.1f} ticks  "
              f"{tuple(r[k] for k in GRID)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"task": args.task, "run_seeds": args.over_worlds, "rows": rows}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", choices=("cloth-fold", "rope-shape", "cloth-fold-2"))
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--over-worlds", type=int, nargs="+", metavar="SEED", help="run seeds, a world per episode")
    ap.add_argument("--only", nargs="+", metavar="KNOBS", help="arc_time,release,arc_height,arc_radius")
    ap.add_argument("--json", help="write the rows here (with --over-worlds)")
    args = ap.parse_args()
    grid = list(itertools.product(*(OVER_WORLDS if args.over_worlds else GRID).values()))
    if args.only:
        grid = [tuple(float(v) for v in k.split(",")) for k in args.only]
    if args.over_worlds:
        return over_worlds(args, grid)
    task = make_task(args.task)
    world = SimWorld(task)
    rows = []
    for values in grid:
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
