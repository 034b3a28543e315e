"""Base vs sampling-only vs language model + sampling, when the base proposal is on the wrong side.

The base proposer is the task's scripted pusher aimed at the wrong goal, so it approaches the
block from the wrong face: on block-push it pushes the cube away from the goal (its goal is
mirrored to x = -0.3 m), on push-t it turns the T the wrong way round (goal yaw + pi). Three
controllers run the same episode seeds (those of ``twinloop run --seed``) in the nominal world:

- ``base``: the wrong proposer alone;
- ``<optimizer>``: the sampling optimizer refining around it (K candidates, ``--iterations``);
- ``llm+<optimizer>``: the same, with a chat model reading each tick's first batch and adding
  its plans to the next (only with ``--base-url`` or ``$TWINLOOP_LLM_BASE_URL``).

It prints success with 95% Wilson intervals, final error, control rate and, for the model,
tokens, seconds waited per tick and ticks that fell back (with their reasons), and writes
``--out`` as JSON.

    python benchmarks/llm_optimizer.py                                   # base and sampling only
    python benchmarks/llm_optimizer.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.io import write_json
from twinloop.plan import OPTIMIZERS, LLMConfig, make_optimizer
from twinloop.run.compare import RunConfig, episode_seeds
from twinloop.run.experiment import run_episode, summarize
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import SimWorld

WRONG_GOAL = {"block-push": (-0.3, 0.0, 0.0), "push-t": (0.0, 0.0, np.pi / 4 + np.pi)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="block-push", choices=sorted(WRONG_GOAL))
    ap.add_argument("--optimizer", default="mppi", choices=sorted(OPTIMIZERS))
    ap.add_argument("-k", "--num-samples", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=2, help="refine iterations per tick (>= 2: the model's plans join the 2nd)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-url", default=os.environ.get("TWINLOOP_LLM_BASE_URL"))
    ap.add_argument("--model", default=os.environ.get("TWINLOOP_LLM_MODEL"))
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--out", default="llm_optimizer.json")
    a = ap.parse_args()
    seeds = episode_seeds(RunConfig(episodes=a.episodes, seed=a.seed))
    task = make_task(a.task)
    proposer = make_task(a.task, goal=WRONG_GOAL[a.task]).default_proposer()
    twin = make_twin("mujoco", task.model, task.param_space())
    rcfg = RefinerConfig(num_samples=a.num_samples, horizon=1.0, iterations=a.iterations, seed=a.seed)  # as measured
    sampling = Refiner(task, twin, make_optimizer(a.optimizer), rcfg)
    controllers = [("base", Controller(sampling, proposer, refine=False)), (a.optimizer, Controller(sampling, proposer))]
    if a.base_url:
        llm = LLMConfig(base_url=a.base_url, model=a.model, timeout=a.timeout)
        guided = Refiner(task, twin, make_optimizer(f"llm+{a.optimizer}", llm=llm), rcfg)
        controllers.append((guided.optimizer.name, Controller(guided, proposer)))
    print(f"{a.task}, nominal world, proposer aimed at the wrong goal {WRONG_GOAL[a.task]}; K={a.num_samples}, "
          f"{a.iterations} iterations, {a.episodes} episodes (seeds {seeds[0]}..{seeds[-1]})")
    if not a.base_url:
        print("no --base-url (or $TWINLOOP_LLM_BASE_URL): the language-model row is skipped")
    rows = []
    for name, ctl in controllers:
        t0 = time.perf_counter()
        eps = [run_episode(SimWorld(task), ctl, s, record=name.startswith("llm")) for s in seeds]
        row = {**summarize(name, eps), "wall_s": time.perf_counter() - t0}
        if name.startswith("llm"):
            row["model"] = model_stats([json.loads(t) for e in eps
                                        for t in e.recorder.to_table().column("refine.optimizer_info").to_pylist()])
        rows.append(row)
        lo, hi = row["success_ci"]
        print(f"{name:>16}: {row['successes']:>3}/{row['episodes']} [{100 * lo:3.0f}%, {100 * hi:3.0f}%]  "
              f"error {1000 * row['mean_final_error']:6.1f} mm  {row['control_hz']:7.1f} Hz  {row['wall_s']:6.0f} s")
        if "model" in row:
            print("                  model:", json.dumps(row["model"]))
    write_json(Path(a.out), {"args": vars(a), "seeds": seeds, "results": rows})
    print(f"wrote {a.out}")


def model_stats(ticks: list[dict]) -> dict:
    """Per-tick means of the model's accounting, and the fallback reasons counted by kind."""
    n = max(len(ticks), 1)
    reasons = Counter(t["fallback"].split(":")[0] for t in ticks if t.get("fallback"))
    return {"ticks": len(ticks), "calls": sum(t.get("calls", 0) for t in ticks),
            "prompt_tokens_per_tick": sum(t.get("prompt_tokens", 0) for t in ticks) / n,
            "completion_tokens_per_tick": sum(t.get("completion_tokens", 0) for t in ticks) / n,
            "seconds_per_tick": sum(t.get("seconds", 0.0) for t in ticks) / n,
            "plans_per_tick": sum(t.get("plans", 0) for t in ticks) / n,
            "fallback_ticks": sum(reasons.values()), "fallback_reasons": dict(reasons)}


if __name__ == "__main__":
    main()
