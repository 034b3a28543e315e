"""Serial vs Ray executor: the same evaluation sweep, wall time and identical results.

Runs one ``twinloop evaluate`` configuration (push-t, shifted world, nominal twin only so no
calibration runs) twice, serially and on a local Ray instance, checks that the summaries are
identical apart from timings, and reports wall time, the Ray start-up time and the speedup.
Run it under the CPU lock; on a 2-core machine expect little (two workers, and the serial twin
already uses both cores for its rollouts).

    python benchmarks/executor_speedup.py
    python benchmarks/executor_speedup.py --episodes 10 --address auto    # an existing cluster
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from twinloop.run.evaluate import EvaluateConfig, run_evaluation
from twinloop.run.executor import make_executor

POLICIES = ("scripted", "scripted@noise=0.1", "scripted+mppi@k=8", "scripted+mppi@k=16")


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in ("wall_time_s", "control_hz", "out")}
    return [_strip(v) for v in x] if isinstance(x, list) else x


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=6)
    p.add_argument("--address", default=None, help="a running Ray cluster (default: a local instance)")
    a = p.parse_args()
    root = tempfile.mkdtemp(prefix="executor_speedup_")
    cfg = EvaluateConfig(policies=POLICIES, episodes=a.episodes, twins=("nominal",), record=False, n_boot=200)
    t0 = time.perf_counter()
    serial = run_evaluation(EvaluateConfig(**{**cfg.__dict__, "out": f"{root}/serial"}), log=lambda m: None)
    t_serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    with make_executor("ray", a.address) as ex:
        t_start = time.perf_counter() - t0
        t1 = time.perf_counter()
        ray = run_evaluation(EvaluateConfig(**{**cfg.__dict__, "out": f"{root}/ray"}), log=lambda m: None, executor=ex)
        t_ray = time.perf_counter() - t1
    same = json.dumps(_strip(serial), sort_keys=True) == json.dumps(_strip(ray), sort_keys=True)
    n = len(POLICIES) * 2 * a.episodes
    print(json.dumps({"episodes": n, "cores": os.cpu_count(), "serial_s": round(t_serial, 1),
                      "ray_start_s": round(t_start, 1), "ray_s": round(t_ray, 1),
                      "speedup": round(t_serial / t_ray, 2), "speedup_with_start": round(t_serial / (t_ray + t_start), 2),
                      "identical": same}, indent=2))


if __name__ == "__main__":
    main()
