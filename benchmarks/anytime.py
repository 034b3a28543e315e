"""Anytime planning in real time: the default (each cycle's refine bounded by one world tick)
against the old behaviour (every cycle refines all K samples, however long it takes).

Rows: the deformables planned in their fast coarse twins (rope-shape: a twin rope of 4 links at a
20 ms step; cloth-fold: a twin towel of 3x3 vertices at 40 ms), the scripted base and the
held-out recipes' planner (K=64, 1 s horizon, exact prior, accept always, the repair; the
recipes' commit and keypoint observer cannot run in real time), and push-t with its task
defaults; all in the shifted world (severity 2, world seed 0) under ``--realtime`` at world
rates each cannot fully plan at. The two modes run the same seeds, interleaved episode by
episode, so both see the same machine load.

Per row: successes (Wilson 95%), deadline misses (world ticks that held the previous action),
planning cycles, cycles cut by the deadline and cycles longer than a world tick, and what the
cycles spent (median deadline, iterations and samples; the fewest samples).

Real-time runs are wall-clock bound: run under the shared CPU lock.

    python benchmarks/anytime.py --episodes 10 --seed 910 \\
        --out results/tables/anytime-realtime.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from twinloop.run.build import controller_in_world, episode_seeds
from twinloop.run.compare import RunConfig, realtime_summary, world_ticks
from twinloop.run.config import configure
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson
from twinloop.tasks import task_defaults

#: task -> world rates (Hz) it is run at in real time
RATES = {"cloth-fold": (5.0, 10.0), "rope-shape": (10.0, 20.0), "push-t": (50.0,)}
#: the planner of each task: its defaults, and for the deformables the fast recipes' twin and grasp settings
PLANNER = {
    "rope-shape": {"planner.twin_timestep": 0.02, "planner.refiner.accept": "always", "grasp.repair": True,
                   "grasp.reach": 0.3, "grasp.regrasp_reach": 1.0, "grasp.twin_resolution": 4},
    "cloth-fold": {"planner.twin_timestep": 0.04, "planner.refiner.accept": "always", "grasp.repair": True,
                   "grasp.push": 1, "grasp.reach": 0.3, "grasp.twin_resolution": 3},
    "push-t": {},
}
MODES = {"anytime": True, "off": False}


def settings(task: str, rate: float, anytime: bool, episodes: int, seed: int) -> dict:
    """The ``--set`` paths of one row (the task's defaults fill the rest)."""
    return {"experiment.task": task, "experiment.world": "shifted", "experiment.severity": 2,
            "experiment.world_seed": 0, "experiment.seed": seed, "experiment.episodes": episodes,
            "realtime": True, "rate": rate, "async_control.anytime": anytime, **PLANNER[task]}


def command(cli: dict) -> str:
    """The ``twinloop run`` command line of a row's refined controller."""
    flags = " ".join(f"--set {k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in cli.items())
    return f"twinloop run --proposer scripted {flags} --no-video --no-record"


def run_rate(task: str, rate: float, episodes: int, seed: int) -> dict[str, dict]:
    """Both modes at one rate, interleaved episode by episode: ``{mode: row}``."""
    cells = {}
    for mode, on in MODES.items():
        cli = settings(task, rate, on, episodes, seed)
        cfg = configure(RunConfig, task_defaults(task), cli=cli)[0]
        world, ctl = controller_in_world(cfg, "refined")
        cells[mode] = {"cli": cli, "cfg": cfg, "world": world, "ctl": ctl, "ok": [], "stats": [],
                       "ticks": world_ticks(cfg, ctl.task, world)}
    t0 = time.perf_counter()
    try:
        for s in episode_seeds(next(iter(cells.values()))["cfg"]):
            for c in cells.values():
                r = run_episode(c["world"], c["ctl"], s, max_ticks=c["ticks"], record=False)
                c["world"].close()  # stops the clock until the next reset: the other mode runs alone
                c["ok"].append(r.success)
                c["stats"].append({**c["world"].stats(), **c["ctl"].stats()})
    finally:
        for c in cells.values():
            c["world"].close()
    return {mode: row(c, time.perf_counter() - t0) for mode, c in cells.items()}


def row(cell: dict, wall: float) -> dict:
    k, n = sum(cell["ok"]), len(cell["ok"])
    lo, hi = wilson(k, n)
    rt = realtime_summary(cell["stats"])
    return {"command": command(cell["cli"]), "episodes": n, "refined_successes": k, "wilson95": [lo, hi],
            **{f: rt[f] for f in ("ticks", "misses", "miss_rate", "cycles", "overruns", "cycle_median", "cycle_max",
                                  "cut_cycles", "late_cycles", "deadline_median", "iterations_median",
                                  "samples_median", "samples_min")},
            "num_samples": cell["cfg"].planner.refiner.num_samples, "wall_s_both_modes": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=list(RATES), choices=list(RATES))
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=910)
    ap.add_argument("--out", default="results/tables/anytime-realtime.json")
    ap.add_argument("--rates", nargs="*", type=float, default=None, help="only these world rates (Hz); rows already "
                    "in --out are kept")
    a = ap.parse_args()
    out = Path(a.out)
    table = json.loads(out.read_text()) if out.is_file() else {"rows": {}}
    table["rule"] = "anytime default vs the old behaviour in real time (see .rule.txt)"
    table["note"] = ("Rows: refined controller only (the scripted base), in real time at the world rate named; "
                     "'anytime' sets async_control.anytime=true (the default since these rows), 'off' sets it false "
                     "(every cycle refines all K). "
                     "Each row's JSON also holds deadline misses, cycles cut and the samples spent per cycle.")
    print(f"{'row':<30} {'success':>8} {'95% CI':>12} {'misses':>10} {'cut/cycles':>11} {'late':>5} "
          f"{'samples med/min':>16} {'iters':>5} {'deadline ms':>11} {'cycle ms':>9}")
    for task in a.tasks:
        for rate in (r for r in RATES[task] if a.rates is None or r in a.rates):
            for mode, r in run_rate(task, rate, a.episodes, a.seed).items():
                name = f"{task} {rate:g} Hz, {mode}"
                table["rows"][f"{name} | shifted s2, world seed 0, seed {a.seed}"] = r
                print(f"{name:<30} {r['refined_successes']:>3}/{r['episodes']:<4} "
                      f"[{100 * r['wilson95'][0]:3.0f}%, {100 * r['wilson95'][1]:3.0f}%] "
                      f"{r['misses']:>4}/{r['ticks']:<5} {r['cut_cycles']:>4}/{r['cycles']:<6} {r['late_cycles']:>5} "
                      f"{r['samples_median']:>8.0f}/{r['samples_min']:<7.0f} {r['iterations_median']:>5.0f} "
                      f"{1000 * r['deadline_median']:>11.1f} {1000 * r['cycle_median']:>9.1f}", flush=True)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
