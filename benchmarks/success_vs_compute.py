"""Success against compute for the rigid tasks: rollout steps per tick = K x horizon / twin step.

For each task, in the shifted world (severity 2, world seed 0), the task's own refined
controller (its planner defaults, the scripted base) at the library's default budget and a few
below it, 10 episodes each: successes (Wilson 95%), control rate and the budget in rollout
steps per tick; the row at the task's own planner default (:attr:`Task.defaults`) is marked DEFAULT
(``--mark-defaults`` re-marks the rows of ``--out`` after a default moved, running nothing).
The deformables' sweep (with the twin's mesh resolution) is ``benchmarks/coarse_twin.py``.

    python benchmarks/success_vs_compute.py --tasks push-t --out results/tables/success-vs-compute.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from coarse_twin import measure

from twinloop.run.compare import RunConfig
from twinloop.run.config import configure
from twinloop.tasks import make_task, task_defaults

RIGID = ("push-t", "block-push", "push-upright", "pivot", "peg-insert", "pusher-v5")
#: (K, horizon s, twin step s): the library's default (32, 0.5 s, 10 ms), then 1/2, 1/4, 1/8 of its steps
BUDGETS = ((32, 0.5, 0.01), (16, 0.5, 0.01), (16, 0.5, 0.02), (16, 0.25, 0.02))


def divides(step: float, period: float) -> float:
    """``step``, or the nearest coarser step that divides the control ``period`` (pusher-v5's 50 ms
    takes 25 ms where the others take 20)."""
    if abs(period / step - round(period / step)) < 1e-9:
        return step
    return period / max(1, int(period / step))


def is_default(task: str, k: int, horizon: float, step: float) -> bool:
    """Whether budget ``(k, horizon, step)`` is task ``task``'s planner default."""
    d = task_defaults(task)
    want = (d.get("planner.refiner.num_samples"), d.get("planner.refiner.horizon"), d.get("planner.twin_timestep"))
    return all(w is not None and abs(float(w) - v) < 1e-9 for w, v in zip(want, (k, horizon, step), strict=True))


def row_key(task: str, k: int, horizon: float, step: float, seed: int) -> str:
    steps = round(k * horizon / step)
    return (f"{task}, K={k}, {horizon:g} s, step {1000 * step:.0f} ms ({steps} steps/tick)"
            f"{' DEFAULT' if is_default(task, k, horizon, step) else ''} | shifted s2, world seed 0, seed {seed}")


KEY = re.compile(r"^(?P<task>[^,]+), K=(?P<k>\d+), (?P<h>[\d.]+) s, step (?P<ms>[\d.]+) ms \(\d+ steps/tick\)"
                 r"(?: DEFAULT)? \| shifted s2, world seed 0, seed (?P<seed>\d+)$")


def mark_defaults(rows: dict) -> dict:
    """``rows`` (in order) with DEFAULT and ``"default"`` on the rows at each task's planner
    default now, and on no other."""
    out = {}
    for key, row in rows.items():
        m = KEY.match(key)
        if m is None:
            raise SystemExit(f"not a success-vs-compute row: {key!r}")
        budget = (m["task"], int(m["k"]), float(m["h"]), float(m["ms"]) / 1000)
        out[row_key(*budget, int(m["seed"]))] = {**row, "default": is_default(*budget)}
    return out


def config(task: str, k: int, horizon: float, step: float, episodes: int, seed: int) -> RunConfig:
    step = divides(step, make_task(task).control_period)
    cli = {"experiment.task": task, "experiment.world": "shifted", "experiment.severity": 2,
           "experiment.world_seed": 0, "experiment.seed": seed, "experiment.episodes": episodes,
           "planner.twin_timestep": step, "planner.refiner.num_samples": k, "planner.refiner.horizon": horizon}
    return configure(RunConfig, task_defaults(task), cli=cli)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=900)
    ap.add_argument("--tasks", nargs="*", default=list(RIGID))
    ap.add_argument("--rows", nargs="*", type=int, default=list(range(len(BUDGETS))), help="which budgets")
    ap.add_argument("--out", type=Path, default=None, help="a results/tables JSON (rows added to what is there)")
    ap.add_argument("--mark-defaults", action="store_true",
                    help="re-mark the rows of --out at each task's planner default now; run nothing")
    args = ap.parse_args()
    data = json.loads(args.out.read_text()) if args.out and args.out.is_file() else {"rows": {}}
    if args.mark_defaults:
        if not args.out:
            raise SystemExit("--mark-defaults needs --out")
        args.out.write_text(json.dumps({**data, "rows": mark_defaults(data["rows"])}, indent=1) + "\n")
        return
    data["rule"] = "the cheapest budget inside the default's Wilson interval, at most 2 below it (see .rule.txt)"
    for task in args.tasks:
        base = measure(config(task, *BUDGETS[0], args.episodes, args.seed), "base")
        for i, (k, horizon, step) in enumerate(BUDGETS):
            if i not in args.rows:
                continue
            step = divides(step, make_task(task).control_period)
            r = measure(config(task, k, horizon, step, args.episodes, args.seed))
            steps = round(k * horizon / step)
            key = row_key(task, k, horizon, step, args.seed)
            data["rows"][key] = {"command": f"python benchmarks/success_vs_compute.py --tasks {task} --episodes "
                                            f"{args.episodes} --seed {args.seed}",
                                 "episodes": r["episodes"], "base_successes": base["successes"],
                                 "refined_successes": r["successes"], "refined_control_hz": round(r["control_hz"], 2),
                                 "rollout_steps_per_tick": steps, "default": is_default(task, k, horizon, step),
                                 "wall_s": r["wall_s"]}
            print(f"{key}: {r['successes']}/{r['episodes']} (base {base['successes']})  {r['control_hz']:.1f} Hz",
                  flush=True)
            if args.out:
                args.out.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
