"""pusher-v5: the scripted reach-and-push alone vs refined by MPPI, on Gymnasium's own
Pusher-v5 env, in this process and served from another one.

``--where in-process`` acts on ``GymWorld("Pusher-v5")`` here; ``--where remote`` starts
``twinloop serve-world --task pusher-v5 --world gym`` with ``--python`` (another virtual
environment, e.g. ``.ci-venv2/bin/python``) and acts through ``RemoteWorld``. Same episode
seeds (0..n-1: the env's own reset distribution). Success: the puck within 5 cm of the goal
within the env's own 100 steps of 0.05 s (gymnasium truncates there); episodes run all 100
steps and two verdicts are kept: *reached* (within 5 cm at some step) and *at the end*
(within 5 cm after step 100). ``--steps N`` (in-process only) makes the env with
``max_episode_steps=N`` instead: a diagnostic of what more time would give, not Pusher-v5's
episode.

    python benchmarks/pusher_v5.py --where in-process remote [--episodes 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.plan import make_optimizer
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import make_world
from twinloop.worlds.remote import RemoteWorld


def serve(python: str) -> tuple[subprocess.Popen, str]:
    env = {k: v for k, v in os.environ.items() if python == sys.executable or k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.Popen([python, "-m", "twinloop", "serve-world", "--task", "pusher-v5", "--world", "gym",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        if "listening on" in line:
            return proc, line.split("listening on", 1)[1].strip()
    raise RuntimeError("serve-world did not start")


class Watched:
    """A world that remembers the puck's distance to the goal after every step."""

    def __init__(self, world, task):
        self.world, self.task, self.errors = world, task, []

    def reset(self, seed):
        self.errors = []
        return self.world.reset(seed)

    def step(self, action):
        obs, info = self.world.step(action)
        self.errors.append(float(self.task.error(self.task.state_from_obs(obs)[: self.task.model.nq])))
        return obs, info

    def info(self):
        return self.world.info()

    def close(self):
        self.world.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--where", nargs="+", default=["in-process", "remote"], choices=["in-process", "remote"])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + episodes - 1")
    ap.add_argument("--num-samples", type=int, default=32)
    ap.add_argument("--horizon", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=100, help="episode length (in-process only when not 100)")
    ap.add_argument("--python", default=str(Path(".ci-venv2/bin/python")), help="interpreter of the remote server")
    ap.add_argument("--out", default="benchmarks/results/pusher_v5.json")
    a = ap.parse_args()
    task = make_task("pusher-v5")
    ref = Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi"),
                  RefinerConfig(num_samples=a.num_samples, horizon=a.horizon))
    rows = []
    if a.steps != 100 and "remote" in a.where:
        ap.error("--steps other than 100 runs in-process only (the served env keeps its own 100)")
    print(f"pusher-v5 on gymnasium's Pusher-v5, seeds {a.first_seed}-{a.first_seed + a.episodes - 1}, {a.steps} steps, refined: MPPI "
          f"K={a.num_samples}, {a.horizon:g} s horizon")
    print(f"{'where':<11} {'controller':<8} {'reached':>8} {'95% CI':>12} {'at end':>8} {'95% CI':>12} "
          f"{'final dist':>10} {'wall s':>7}")
    for where in a.where:
        proc = None
        if where == "remote":
            proc, address = serve(a.python if Path(a.python).is_file() else sys.executable)
            world = RemoteWorld(address, task=task, timeout=30)
        else:
            world = make_world(task, "gym", **({} if a.steps == 100 else {"max_episode_steps": a.steps}))
        world = Watched(world, task)
        try:
            for name, refine in (("base", False), ("refined", True)):
                ctl = Controller(ref, task.default_proposer(), refine=refine)
                t0 = time.perf_counter()
                res, reached = [], []
                for s in range(a.first_seed, a.first_seed + a.episodes):
                    res.append(run_episode(world, ctl, s, record=False, stop_on_success=False, max_ticks=a.steps))
                    reached.append(min(world.errors) < task.success_radius)
                k, n = sum(reached), len(res)
                k_end = sum(r.success for r in res)
                lo, hi = wilson(k, n)
                lo_end, hi_end = wilson(k_end, n)
                row = {"where": where, "controller": name, "steps": a.steps, "episodes": n, "reached": k,
                       "reached_ci": [lo, hi], "at_end": k_end, "at_end_ci": [lo_end, hi_end],
                       "mean_final_distance": float(np.mean([r.final_error for r in res])),
                       "per_episode": [[r.seed, bool(hit), bool(r.success), r.final_error]
                                       for r, hit in zip(res, reached)],
                       "wall_s": time.perf_counter() - t0}
                rows.append(row)
                print(f"{where:<11} {name:<8} {k:>3}/{n:<4} [{100 * lo:3.0f}%, {100 * hi:3.0f}%] {k_end:>3}/{n:<4} "
                      f"[{100 * lo_end:3.0f}%, {100 * hi_end:3.0f}%] {100 * row['mean_final_distance']:>8.1f}cm "
                      f"{row['wall_s']:>7.0f}", flush=True)
                Path(a.out).parent.mkdir(parents=True, exist_ok=True)
                Path(a.out).write_text(json.dumps(rows, indent=1))
        finally:
            world.close()
            if proc is not None:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
