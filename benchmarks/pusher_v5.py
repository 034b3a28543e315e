"""pusher-v5: the scripted reach-and-push alone vs refined by MPPI, on Gymnasium's own
Pusher-v5 env, in this process and served from another one.

``--where in-process`` acts on ``GymWorld("Pusher-v5")`` here; ``--where remote`` starts
``twinloop serve-world --task pusher-v5 --world gym`` with ``--python`` (another virtual
environment, e.g. ``.ci-venv2/bin/python``) and acts through ``RemoteWorld``. Same episode
seeds (0..n-1: the env's own reset distribution). Success: the puck within 5 cm of the goal
(the episode stops when reached), 100 steps of 0.05 s at most.

    flock /tmp/twinloop-cpu.lock python benchmarks/pusher_v5.py --where in-process remote [--episodes 20]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--where", nargs="+", default=["in-process", "remote"], choices=["in-process", "remote"])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--num-samples", type=int, default=64)
    ap.add_argument("--horizon", type=float, default=1.0)
    ap.add_argument("--python", default=str(Path(".ci-venv2/bin/python")), help="interpreter of the remote server")
    ap.add_argument("--out", default="benchmarks/results/pusher_v5.json")
    a = ap.parse_args()
    task = make_task("pusher-v5")
    ref = Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi"),
                  RefinerConfig(num_samples=a.num_samples, horizon=a.horizon))
    rows = []
    print(f"pusher-v5 on gymnasium's Pusher-v5, {a.episodes} episodes, refined: MPPI K={a.num_samples}, "
          f"{a.horizon:g} s horizon")
    print(f"{'where':<11} {'controller':<8} {'success':>8} {'95% CI':>12} {'final dist':>10} {'wall s':>7}")
    for where in a.where:
        proc = None
        if where == "remote":
            proc, address = serve(a.python if Path(a.python).is_file() else sys.executable)
            world = RemoteWorld(address, task=task, timeout=30)
        else:
            world = make_world(task, "gym")
        try:
            for name, refine in (("base", False), ("refined", True)):
                ctl = Controller(ref, task.default_proposer(), refine=refine)
                t0 = time.perf_counter()
                res = [run_episode(world, ctl, s, record=False) for s in range(a.episodes)]
                k = sum(r.success for r in res)
                lo, hi = wilson(k, len(res))
                row = {"where": where, "controller": name, "episodes": len(res), "successes": k, "ci": [lo, hi],
                       "mean_final_distance": float(np.mean([r.final_error for r in res])),
                       "per_episode": [[r.seed, bool(r.success), r.final_error] for r in res],
                       "wall_s": time.perf_counter() - t0}
                rows.append(row)
                print(f"{where:<11} {name:<8} {k:>3}/{len(res):<4} [{100 * lo:3.0f}%, {100 * hi:3.0f}%] "
                      f"{100 * row['mean_final_distance']:>8.1f}cm {row['wall_s']:>7.0f}", flush=True)
                Path(a.out).parent.mkdir(parents=True, exist_ok=True)
                Path(a.out).write_text(json.dumps(rows, indent=1))
        finally:
            world.close()
            if proc is not None:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
