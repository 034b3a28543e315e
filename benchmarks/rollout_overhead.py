"""Overhead of one twinloop refine iteration over a bare ``mujoco.rollout`` call.

For the same K x T batch from the same start state, times (median of repeats, same process,
same thread count):

- raw:      ``mujoco.rollout.Rollout(nthread).rollout(...)`` with preallocated outputs,
- refine:   one ``Refiner.refine`` iteration (sample, spline -> controls, rollout, cost, update).

Prints the ratio refine/raw (goal: <= 1.10) and the control rate a one-iteration refiner
reaches at each K over a 1 s horizon (goal: >= 10 Hz at K >= 64), or over ``--horizon`` with
the twin at ``--twin-timestep`` (as ``twinloop run --set planner.twin_timestep=S`` builds it;
default: the scene's step).

The start state is the task's first start state, or (``--warmup-ticks N``) where its scripted
proposer has brought the nominal world after N ticks: in contact, for the contact-rich arm
scenes, whose speed depends on how many contacts are active.

    python benchmarks/rollout_overhead.py [--task block-push] [--ks 64 256] [--repeats 30]
    python benchmarks/rollout_overhead.py --task peg-insert --ks 32 64 128 --warmup-ticks 15 \
        --optimizer predictive --noise 0.05 [--horizon 0.5 --twin-timestep 0.01]
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
from twinloop.twin import make_twin
from twinloop.worlds import SimWorld


def median_time(fn, repeats: int) -> float:
    fn()  # warm up (buffers, pools, caches)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def start_state(task, warmup_ticks: int) -> np.ndarray:
    """The task's first start state, after ``warmup_ticks`` of its scripted proposer."""
    world = SimWorld(task)
    obs = world.reset(0)
    proposer = task.default_proposer() if warmup_ticks else None
    for _ in range(warmup_ticks):
        obs, _ = world.step(proposer.propose(obs, task.state_from_obs(obs))[0])
    return world.true_state()


def bench(task_name: str, K: int, repeats: int, nthread: int, optimizer: str, warmup_ticks: int = 0,
          options: dict | None = None, horizon: float = 1.0, timestep: float | None = None) -> dict:
    task = make_task(task_name)
    twin = make_twin("mujoco", task.model, timestep=timestep, nthread=nthread)
    m = twin.model  # the twin's copy at its own timestep: the bare call simulates the same steps
    ref = Refiner(task, twin, make_optimizer(optimizer, **(options or {})), RefinerConfig(num_samples=K, horizon=horizon, iterations=1))
    state = start_state(task, warmup_ticks)
    T = ref.spec.horizon_ticks * ref.spec.substeps

    # the bare engine call on the same batch
    pool = mj_rollout.Rollout(nthread=nthread)
    datas = [mujoco.MjData(m) for _ in range(nthread)]
    full = twin.full_state(state)
    init = np.tile(full, (K, 1))
    hold = ref.hold_plan(task.hold_action(state))  # both start from keeping the actuators where they are
    ctrl = ref.basis.controls(np.tile(hold.knots, (K, 1, 1)))
    # 1 cm (or 0.01 rad) of noise on every planned action; a held action (equal bounds) stays
    free = task.action_low < task.action_high
    ctrl = np.ascontiguousarray(ctrl + np.random.default_rng(1).normal(0, 0.01, ctrl.shape) * free)
    out_s = np.empty((K, T, mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
    out_d = np.empty((K, T, m.nsensordata))
    models = [m] * K

    def raw():
        pool.rollout(models, datas, init, ctrl, control_spec=mujoco.mjtState.mjSTATE_CTRL.value,
                     skip_checks=True, nstep=T, state=out_s, sensordata=out_d)

    def refine():
        ref.refine(state, warm=hold)

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
    ap.add_argument("--noise", type=float, default=0.0, help="optimizer noise (0: its default)")
    ap.add_argument("--warmup-ticks", type=int, default=0)
    ap.add_argument("--horizon", type=float, default=1.0, help="planning horizon (s)")
    ap.add_argument("--twin-timestep", type=float, default=0.0, help="twin physics step (s; 0: the scene's)")
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, {a.nthread} rollout threads, mujoco {mujoco.__version__}")
    print(f"{'task':<11}{'K':>6}{'T':>5}{'raw ms':>9}{'refine ms':>11}{'ratio':>7}{'Msteps/s':>10}{'ctrl Hz':>9}")
    for K in a.ks:
        r = bench(a.task, K, a.repeats, a.nthread, a.optimizer, a.warmup_ticks, {"noise": a.noise} if a.noise else {},
                  a.horizon, a.twin_timestep or None)
        print(f"{r['task']:<11}{r['K']:>6}{r['T']:>5}{r['raw_ms']:>9.1f}{r['refine_ms']:>11.1f}"
              f"{r['ratio']:>7.3f}{r['steps_per_s'] / 1e6:>10.3f}{r['control_hz']:>9.1f}")


if __name__ == "__main__":
    main()
