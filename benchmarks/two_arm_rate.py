"""What a second gripper costs in refine rate: cloth-fold-2 against cloth-fold, same machine, same load.

Each setting builds the task's refiner (its own defaults, as ``twinloop run`` applies them,
with ``num_samples`` / ``n_knots`` overridden where the setting says) and times ``refine`` from the first tick of
episode seed 0 in the shifted world of world seed 0 (the base's chunk as the prior), the
settings interleaved round by round so that a change of load falls on all of them alike. Reports
the median refine time, the rollout steps per refine and each setting's time as a ratio to
cloth-fold's at its defaults (the action dimension doubles from 4 to 8; the towel, and so the
cost of a physics step, is the same).

    python benchmarks/two_arm_rate.py [--rounds 5] [--out benchmarks/results/two_arm_rate.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from twinloop.run.compare import RunConfig, build
from twinloop.run.config import configure
from twinloop.tasks import task_defaults

#: name -> (task, refiner overrides)
SETTINGS = {
    "cloth-fold defaults": ("cloth-fold", {}),
    "cloth-fold-2 defaults": ("cloth-fold-2", {}),
    "cloth-fold K=32": ("cloth-fold", {"num_samples": 32}),
    "cloth-fold-2 K=32": ("cloth-fold-2", {"num_samples": 32}),
    "cloth-fold-2 K=128": ("cloth-fold-2", {"num_samples": 128}),
    "cloth-fold-2 knots=8": ("cloth-fold-2", {"n_knots": 8}),
}


def setup(task_name: str, overrides: dict):
    """``(refiner, state, prior)`` at the first tick of episode seed 0, the task's defaults
    applied as ``twinloop run`` applies them, then ``overrides``."""
    cli = {"experiment.task": task_name, "experiment.world": "shifted", "experiment.video": False,
           "experiment.record": False, **{f"planner.refiner.{k}": v for k, v in overrides.items()}}
    cfg, _ = configure(RunConfig, task_defaults(task_name), cli=cli)
    task, world, proposer, refiner = build(cfg, check_twin=False)
    obs = world.reset(0)
    state = task.state_from_obs(obs)
    prior = refiner.plan_from_actions(proposer.propose(obs, state))
    return refiner, state, prior


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default="benchmarks/results/two_arm_rate.json")
    a = ap.parse_args()
    built = {name: setup(*spec) for name, spec in SETTINGS.items()}
    seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    steps: dict[str, int] = {}
    for _ in range(a.rounds):
        for name, (refiner, state, prior) in built.items():
            t0 = time.perf_counter()
            res = refiner.refine(state, prior)
            seconds[name].append(time.perf_counter() - t0)
            steps[name] = int(res.n_steps)
    ref = float(np.median(seconds["cloth-fold defaults"]))
    rows = []
    print(f"{'setting':<24} {'refine ms':>9} {'steps':>8} {'x cloth-fold':>12}")
    for name in SETTINGS:
        med = float(np.median(seconds[name]))
        rows.append({"setting": name, "task": SETTINGS[name][0], "overrides": SETTINGS[name][1],
                     "refine_ms_median": 1000 * med, "steps_per_refine": steps[name], "time_ratio": med / ref,
                     "rounds": a.rounds})
        print(f"{name:<24} {1000 * med:>9.0f} {steps[name]:>8} {med / ref:>12.2f}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
