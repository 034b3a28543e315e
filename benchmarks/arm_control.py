"""Cartesian impedance vs joint position servos for the arm: rollout speed and planning efficiency.

The same scene (push-upright's table, box parked out of reach) with either actuator set of
:mod:`twinloop.tasks.arm`:

- ``cartesian``: six ``position`` actuators on the tool centre point (site transmission with a
  reference site), planned in x, y, z (tool rotation and grip held): 3 planned actions;
- ``joint``: seven joint position servos (:func:`joint_servo_model`), planned in joint space
  (grip held): 7 planned actions.

Measured in one process:

1. **rollout speed**: a bare ``mujoco.rollout`` of K x T steps from the same start state,
   steps per second (median of repeats, interleaved), and the ratio joint / cartesian;
2. **planning efficiency**: a reach from the arm's start pose to a tool goal 12 cm away
   (random direction, seeded), refined from nothing (no proposer) with predictive sampling
   at K = 32 over a 1 s horizon for 20 control ticks (2 s), in the nominal scene; the final
   tool error (mm, median and worst over the seeds) at each noise level. Bounds: +-0.2 m
   around the start for the tool target, +-0.8 rad around the start posture for the joints
   (same noise fractions then move the tool by comparable amounts).

    python benchmarks/arm_control.py [--seeds 5] [--noise 0.05 0.1 0.3]
"""

from __future__ import annotations

import argparse
import os
import time

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.plan import make_optimizer
from twinloop.run.experiment import run_episode
from twinloop.tasks import Residual, Task, make_task
from twinloop.tasks.arm import N_ARM_Q, joint_servo_model
from twinloop.twin import MujocoTwin
from twinloop.worlds import SimWorld


class Reach(Task):
    """Bring the tool centre point to ``goal`` (m); the tcp sensor is the cost's input."""

    name = "reach"
    control_period = 0.1
    max_ticks = 20
    cost_stride = 5

    def __init__(self, model: mujoco.MjModel, start: np.ndarray, goal: np.ndarray, low, high, tcp):
        self.model = model  # replaces the cached scene model: the benchmark builds its own
        self.start, self.goal, self.tcp = start, goal, tcp
        self.action_low, self.action_high = np.asarray(low, float), np.asarray(high, float)

    def residuals(self):
        adr = self.tcp
        return (Residual("tcp", 1.0, lambda t: (t.sensordata[..., 1:, adr : adr + 3] - self.goal) / 0.05),
                Residual("final_tcp", 1.0, lambda t: (t.sensordata[..., -1, adr : adr + 3] - self.goal) / 0.01, terminal=True))

    def initial_state(self, rng):
        return self.start.copy()

    def hold_action(self, state):
        d = mujoco.MjData(self.model)
        d.qpos[:] = state[: self.model.nq]
        mujoco.mj_forward(self.model, d)
        return np.clip(d.actuator_length, self.action_low, self.action_high)

    def error(self, qpos):
        d = mujoco.MjData(self.model)
        d.qpos[:] = qpos
        mujoco.mj_forward(self.model, d)
        return float(np.linalg.norm(d.sensordata[self.tcp : self.tcp + 3] - self.goal))

    def success(self, qpos):
        return False  # run the full 2 s: the final error is the measure


def variants():
    """(name, model, start state, action low, high) for both actuator sets."""
    task = make_task("push-upright")
    start = task.settle_arm(np.array([-0.05, 0.0, 0.10]), task.model.qpos0[N_ARM_Q:])
    tcp0 = task.tcp_from_qpos(start[: task.model.nq])
    out = []
    m = task.model
    low = np.concatenate([tcp0 - 0.2, np.zeros(4)])
    high = np.concatenate([tcp0 + 0.2, np.zeros(4)])
    out.append(("cartesian", m, start, low, high))
    j = joint_servo_model(task)
    q0 = start[:7]
    lo_j = np.concatenate([np.maximum(q0 - 0.8, j.actuator_ctrlrange[:7, 0]), [0.0]])
    hi_j = np.concatenate([np.minimum(q0 + 0.8, j.actuator_ctrlrange[:7, 1]), [0.0]])
    out.append(("joint", j, start, lo_j, hi_j))
    return out, int(m.sensor_adr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, "tcp_pos")])


def rollout_speed(model, start, K: int, T: int, repeats: int, nthread: int) -> float:
    """Steps per second of a bare ``mujoco.rollout`` holding the start pose (median)."""
    pool = mj_rollout.Rollout(nthread=nthread)
    datas = [mujoco.MjData(model) for _ in range(nthread)]
    d = mujoco.MjData(model)
    d.qpos[:], d.qvel[:] = start[: model.nq], start[model.nq : model.nq + model.nv]
    mujoco.mj_forward(model, d)
    full = np.empty(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(model, d, full, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    ctrl = np.tile(d.actuator_length, (K, T, 1)) + np.random.default_rng(0).normal(0, 0.01, (K, T, model.nu))
    init = np.tile(full, (K, 1))
    out = np.empty((K, T, full.size))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pool.rollout([model] * K, datas, init, ctrl, control_spec=mujoco.mjtState.mjSTATE_CTRL.value,
                     skip_checks=True, nstep=T, state=out)
        times.append(time.perf_counter() - t0)
    pool.close()
    return K * T / float(np.median(times))


def reach_errors(model, start, low, high, tcp, noise: float, seeds: int, K: int) -> np.ndarray:
    """Final tool errors (m) of refined reaches to ``seeds`` goals 12 cm away."""
    d = mujoco.MjData(model)
    d.qpos[:] = start[: model.nq]
    mujoco.mj_forward(model, d)
    tcp0 = d.sensordata[tcp : tcp + 3].copy()
    errs = []
    for s in range(seeds):
        v = np.random.default_rng([s, 11]).normal(size=3)
        v[2] = abs(v[2]) * 0.5  # stay above the table
        goal = tcp0 + 0.12 * v / np.linalg.norm(v)
        task = Reach(model, start, goal, low, high, tcp)
        twin = MujocoTwin(model, nthread=os.cpu_count())
        ref = Refiner(task, twin, make_optimizer("predictive", noise=noise), RefinerConfig(num_samples=K, horizon=1.0, seed=s))
        r = run_episode(SimWorld(task), Controller(ref), s, record=False, stop_on_success=False)
        errs.append(r.final_error)
        twin.close()
    return np.array(errs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--noise", type=float, nargs="+", default=[0.05, 0.1, 0.3])
    ap.add_argument("-k", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=15)
    a = ap.parse_args()
    nthread = os.cpu_count()
    vs, tcp = variants()
    print(f"machine: {os.cpu_count()} cores, mujoco {mujoco.__version__}")
    print("1. rollout speed (K=64, T=200, bare mujoco.rollout, interleaved)")
    speeds = {n: [] for n, *_ in vs}
    for _ in range(3):
        for n, m, start, *_ in vs:
            speeds[n].append(rollout_speed(m, start, 64, 200, a.repeats // 3 or 1, nthread))
    best = {n: max(v) for n, v in speeds.items()}
    for n, v in best.items():
        print(f"   {n:<10} {v / 1e3:8.1f} k steps/s")
    print(f"   joint / cartesian: {best['joint'] / best['cartesian']:.2f}")
    print(f"2. reach 12 cm, predictive sampling K={a.k}, 20 ticks: final tool error (mm), median / worst of {a.seeds}")
    for noise in a.noise:
        row = []
        for n, m, start, lo, hi in vs:
            e = 1e3 * reach_errors(m, start, lo, hi, tcp, noise, a.seeds, a.k)
            row.append(f"{n} {np.median(e):6.1f} / {e.max():6.1f}")
        print(f"   noise {noise:<5} " + "   ".join(row))


if __name__ == "__main__":
    main()
