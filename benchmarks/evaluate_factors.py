"""Which difference between the world and the calibrated twin moves a policy's success?

Runs one policy in twin-worlds that differ from a shifted world by one factor at a time: its
hidden parameters or the calibrated ones, with or without its actuation delay, with its own
observation noise, the estimated one or none (``TwinWorld``; the world with all three of its
own is the world itself, episode for episode). Seeds are the pooled evaluation's (``--seeds``
ranges; the defaults are those of ``twinloop evaluate --seed 0/1/2`` with 20/30/50 episodes).

    python benchmarks/evaluate_factors.py "none+mppi@k=16" truth,truth+delay,cal+delay+noise \\
        --calibration /tmp/eval_main/summary.json --json factors.json

Variant names join ``truth`` | ``cal`` (parameters), ``+delay`` (the world's delay) and
``+noise`` (the calibration's estimated noise) | ``+truenoise`` (the world's); a
``-NAME`` after ``truth``/``cal`` takes parameter NAME from the other side
(``truth-block_damping+delay+truenoise``: the world with the calibrated damping).
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial

import numpy as np

from twinloop.run.evaluate import policy_in_world
from twinloop.run.executor import EpisodeBatch, make_executor
from twinloop.run.policy import PolicySpec
from twinloop.tasks import make_task
from twinloop.worlds import make_world
from twinloop.worlds.twin import TwinWorld

SEEDS = "0:20,100000:100030,200000:200050"


def variant(name: str, world, cal: dict) -> partial:
    """The twin-world factory of a variant name (see the module docstring)."""
    parts = name.split("+")
    head, *swaps = parts[0].split("-")
    names = world.param_space.names
    est = np.array([cal["estimate"][n] for n in names])
    own, other = (world.hidden_params, est) if head == "truth" else (est, world.hidden_params)
    params = own.copy()
    for s in swaps:
        params[names.index(s)] = other[names.index(s)]
    kw = {}
    if "delay" in parts[1:]:
        kw["delay_steps"] = world.delay_steps
    if "noise" in parts[1:]:
        kw["obs_noise"] = np.array([cal["obs_noise"][n] for n in world.task.obs_names])
    if "truenoise" in parts[1:]:
        kw["obs_noise"] = world.obs_noise
    return partial(TwinWorld, params=params, **kw)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("policy")
    p.add_argument("variants", help="comma-separated variant names")
    p.add_argument("--calibration", required=True, help="a twinloop evaluate summary.json (its calibration record)")
    p.add_argument("--seeds", default=SEEDS, help="comma-separated start:stop ranges")
    p.add_argument("--task", default="push-t")
    p.add_argument("--severity", type=int, default=2)
    p.add_argument("--world-seed", type=int, default=0)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    seeds = [s for r in a.seeds.split(",") for s in range(*map(int, r.split(":")))]
    task = make_task(a.task)
    world = make_world(task, "shifted", severity=a.severity, seed=a.world_seed)
    cal = json.loads(open(a.calibration).read())["evaluation"]["calibration"]
    names = a.variants.split(",")
    spec = PolicySpec.parse(a.policy)
    batches = [EpisodeBatch(partial(policy_in_world, a.task, variant(v, world, cal), spec), seeds,
                            options={"record": False}) for v in names]
    t0 = time.perf_counter()
    with make_executor("ray") as ex:
        res = ex.run(batches)
    rows = {v: [bool(e.success) for e in r] for v, r in zip(names, res, strict=True)}
    for v in names:
        print(f"{a.policy} in {v}: {sum(rows[v])}/{len(seeds)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"policy": a.policy, "seeds": seeds, "success": rows, "wall_s": time.perf_counter() - t0}, f)


if __name__ == "__main__":
    main()
