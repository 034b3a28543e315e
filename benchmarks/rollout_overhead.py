"""Overhead of one twinloop refine iteration over a bare ``mujoco.rollout`` call.

For the same K x T batch from the same start state, times (median of repeats, same process,
same thread count):

- raw:      ``mujoco.rollout.Rollout(nthread).rollout(...)`` with preallocated outputs,
- refine:   one ``Refiner.refine`` iteration (sample, spline -> controls, rollout, cost, update).

Prints the ratio refine/raw (goal: <= 1.10) and the control rate a one-iteration refiner
reaches at each K over a 1 s horizon (goal: >= 10 Hz at K >= 64).

    python benchmarks/rollout_overhead.py [--task block-push] [--ks 64 256] [--repeats 30]
"""

from __future__ import annotations

import argparse
import os
import time

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

from twinloop.control import Refiner, RefinerConfig
from twinloop.plan import make_optimizer
from twinloop.tasks import make_task
from twinloop.twin import MujocoTwin


def median_time(fn, repeats: int) -> float:
    fn()  # warm up (buffers, pools, caches)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def bench(task_name: str, K: int, repeats: int, nthread: int, optimizer: str) -> dict:
    task = make_task(task_name)
    m = task.model
    twin = MujocoTwin(m, nthread=nthread)
    ref = Refiner(task, twin, make_optimizer(optimizer), RefinerConfig(num_samples=K, horizon=1.0, iterations=1))
    state = task.initial_state(np.random.default_rng(0))
    T = ref.spec.horizon_ticks * ref.spec.substeps

    # the bare engine call on the same batch
    pool = mj_rollout.Rollout(nthread=nthread)
    datas = [mujoco.MjData(m) for _ in range(nthread)]
    full = twin.full_state(state)
    init = np.tile(full, (K, 1))
    ctrl = ref.basis.controls(np.tile(ref.hold_plan(state[:2]).knots, (K, 1, 1)))
    ctrl = np.ascontiguousarray(ctrl + np.random.default_rng(1).normal(0, 0.01, ctrl.shape))
    out_s = np.empty((K, T, mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
    out_d = np.empty((K, T, m.nsensordata))
    models = [m] * K

    def raw():
        pool.rollout(models, datas, init, ctrl, control_spec=mujoco.mjtState.mjSTATE_CTRL.value,
                     skip_checks=True, nstep=T, state=out_s, sensordata=out_d)

    def refine():
        ref.refine(state)

    # interleave to share the machine's noise between both
    t_raw, t_ref = [], []
    for _ in range(3):
        t_raw.append(median_time(raw, repeats // 3 or 1))
        t_ref.append(median_time(refine, repeats // 3 or 1))
    pool.close()
    twin.close()
    t_raw, t_ref = min(t_raw), min(t_ref)
    return {"task": task_name, "K": K, "T": T, "raw_ms": 1e3 * t_raw, "refine_ms": 1e3 * t_ref,
            "ratio": t_ref / t_raw, "steps_per_s": K * T / t_raw, "control_hz": 1.0 / t_ref}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="push-t")
    ap.add_argument("--ks", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--nthread", type=int, default=os.cpu_count())
    ap.add_argument("--optimizer", default="mppi")
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, {a.nthread} rollout threads, mujoco {mujoco.__version__}")
    print(f"{'task':<11}{'K':>6}{'T':>5}{'raw ms':>9}{'refine ms':>11}{'ratio':>7}{'Msteps/s':>10}{'ctrl Hz':>9}")
    for K in a.ks:
        r = bench(a.task, K, a.repeats, a.nthread, a.optimizer)
        print(f"{r['task']:<11}{r['K']:>6}{r['T']:>5}{r['raw_ms']:>9.1f}{r['refine_ms']:>11.1f}"
              f"{r['ratio']:>7.3f}{r['steps_per_s'] / 1e6:>10.3f}{r['control_hz']:>9.1f}")


if __name__ == "__main__":
    main()
