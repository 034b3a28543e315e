"""Deformables planned in a coarser twin: control rate and success against the world's mesh.

For rope-shape and cloth-fold in the shifted world (severity 2, world seed 0), the refined
controller of the held-out recipes' planner (K=64, 1 s horizon, exact prior, the repair) with
the scripted base (the recipes' distilled bases are not built here), at each twin resolution (rope
links; towel vertices per side) and twin step: successes (Wilson 95% interval), episodes,
and the control rate (ticks per second of controller compute, the mean over episodes of each
episode's ticks / compute) on this machine's cores.

    python benchmarks/coarse_twin.py --episodes 4 --out results/tables/coarse-twin-rates.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from twinloop.run.build import controller_in_world, episode_seeds
from twinloop.run.compare import RunConfig
from twinloop.run.config import configure
from twinloop.run.experiment import run_episodes
from twinloop.stats import wilson
from twinloop.tasks import task_defaults

#: (task, twin resolution, twin step s): the world's mesh first
GRID = {
    "rope-shape": [(8, 0.01), (8, 0.02), (4, 0.01), (4, 0.02), (4, 0.04)],
    "cloth-fold": [(5, 0.01), (5, 0.02), (3, 0.01), (3, 0.02), (3, 0.04)],
}
UNIT = {"rope-shape": "links", "cloth-fold": "vertices per side"}
WORLD_RES = {"rope-shape": 8, "cloth-fold": 5}
GRASP = {"rope-shape": {"grasp.repair": True, "grasp.reach": 0.3, "grasp.commit": 0.2, "grasp.regrasp_reach": 1.0},
         "cloth-fold": {"grasp.repair": True, "grasp.push": 1, "grasp.reach": 0.3, "grasp.commit": 0.2,
                        "grasp.observer": True}}


def config(task: str, res: int, step: float, episodes: int, seed: int, extra: dict) -> RunConfig:
    cli = {"experiment.task": task, "experiment.world": "shifted", "experiment.severity": 2,
           "experiment.world_seed": 0, "experiment.seed": seed, "experiment.episodes": episodes,
           "planner.twin_timestep": step, "planner.refiner.accept": "always", **GRASP[task], **extra,
           "grasp.twin_resolution": None if res == WORLD_RES[task] else res}
    return configure(RunConfig, task_defaults(task), cli=cli)[0]


def measure(cfg: RunConfig, name: str = "refined") -> dict:
    world, ctl = controller_in_world(cfg, name)
    t0 = time.perf_counter()
    eps = run_episodes(world, ctl, episode_seeds(cfg), record=False)
    wall = time.perf_counter() - t0
    ok = sum(e.success for e in eps)
    lo, hi = wilson(ok, len(eps))
    return {"successes": ok, "episodes": len(eps), "wilson95": [lo, hi],
            "control_hz": float(np.mean([e.control_hz for e in eps])), "ticks": int(sum(e.ticks for e in eps)),
            "final_error_mean": float(np.mean([e.final_error for e in eps])), "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--seed", type=int, default=900)
    ap.add_argument("--tasks", nargs="*", default=list(GRID))
    ap.add_argument("--out", type=Path, default=None, help="a results/tables JSON (rows added to what is there)")
    args = ap.parse_args()
    data = json.loads(args.out.read_text()) if args.out and args.out.is_file() else {"rows": {}}
    data["rule"] = "the coarsest twin whose successes stay inside the world mesh's Wilson interval (see .rule.txt)"
    for task in args.tasks:
        base = measure(config(task, WORLD_RES[task], 0.01, args.episodes, args.seed, {}), "base")
        for res, step in GRID[task]:
            r = measure(config(task, res, step, args.episodes, args.seed, {}))
            command = (f"python benchmarks/coarse_twin.py --tasks {task} --episodes {args.episodes} --seed {args.seed}")
            key = f"{task}, twin {res} {UNIT[task]}, step {1000 * step:.0f} ms | shifted s2, world seed 0, seed {args.seed}"
            data["rows"][key] = {"command": command, "episodes": r["episodes"], "base_successes": base["successes"],
                                 "refined_successes": r["successes"], "refined_control_hz": round(r["control_hz"], 2),
                                 "twin_resolution": res, "world_resolution": WORLD_RES[task], "twin_timestep": step,
                                 "final_error_mean": r["final_error_mean"], "ticks": r["ticks"], "wall_s": r["wall_s"]}
            print(f"{key}: {r['successes']}/{r['episodes']} (base {base['successes']})  {r['control_hz']:6.2f} Hz",
                  flush=True)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
