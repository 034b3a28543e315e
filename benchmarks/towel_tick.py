"""Where the towel's refined tick spends its time, and whether the twin's options buy speed.

``profile``: runs ``twinloop run ARGS`` with wall-clock timers around the parts of each refined
tick (the state estimate, the base proposal, the repair's offers, the refine and, inside it, the
twin's rollouts and the cost), and writes milliseconds per tick per part::

    python benchmarks/towel_tick.py profile OUT.json -- --recipe cloth-fold-held-out --seed 904 --episodes 2

``options``: the cloth-fold twin's rollouts (K candidates x 1 s from 5 states along the scripted
fold, controls = the script's chunk plus noise) timed under variants of the twin's own model
options against the unchanged twin in the same run, with how far each variant moves the final
keypoints (0: the same result)::

    python benchmarks/towel_tick.py options OUT.json [--step 0.02] [--k 16] [--threads 1]

Both are wall-clock bound: run them under the shared CPU lock.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

#: twin option variants: name -> (option, value); a flag variant ORs into disableflags
VARIANTS = {
    "jacobian=dense": ("jacobian", mujoco.mjtJacobian.mjJAC_DENSE),
    "jacobian=sparse": ("jacobian", mujoco.mjtJacobian.mjJAC_SPARSE),
    "no warmstart": ("disableflags", mujoco.mjtDisableBit.mjDSBL_WARMSTART),
    "no islands": ("disableflags", mujoco.mjtDisableBit.mjDSBL_ISLAND),
    "tolerance=1e-6": ("tolerance", 1e-6),
    "tolerance=1e-4": ("tolerance", 1e-4),
    "iterations=5": ("iterations", 5),
    "solver=CG": ("solver", mujoco.mjtSolver.mjSOL_CG),
}


class TickTimers:
    """Wall-clock totals of wrapped methods, counted only inside a refined ``Controller.act``."""

    def __init__(self):
        self.total, self.calls = defaultdict(float), defaultdict(int)
        self.inside = False

    def wrap(self, cls, name: str, label: str) -> None:
        f = getattr(cls, name)

        def timed(*a, **k):
            if not self.inside:
                return f(*a, **k)
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                self.total[label] += time.perf_counter() - t0
                self.calls[label] += 1

        setattr(cls, name, timed)

    def wrap_act(self, controller_cls) -> None:
        act = controller_cls.act

        def timed_act(ctl, obs, info=None):
            self.inside = ctl.refine_enabled
            try:
                return act(ctl, obs, info)
            finally:
                self.inside = False

        controller_cls.act = timed_act


def profile(out: Path, args: list[str]) -> dict:
    """Run ``twinloop run args`` with the tick's parts timed; the parts in ms per refined tick."""
    from twinloop.cli import main
    from twinloop.control.controller import Controller
    from twinloop.control.refiner import Refiner
    from twinloop.policies.distilled.policy import DistilledPolicy
    from twinloop.tasks import base as task_base
    from twinloop.tasks.deformable import SwingScript
    from twinloop.tasks.keypoints import KeypointObserver
    from twinloop.tasks.repair import CommittedRepair
    from twinloop.twin.mujoco import MujocoTwin

    t = TickTimers()
    for cls, name, label in ((Controller, "act", "tick (act)"), (KeypointObserver, "estimate", "state estimate"),
                             (DistilledPolicy, "propose", "base proposal (distilled)"),
                             (SwingScript, "propose", "base proposal (scripted)"),
                             (Controller, "offers", "repair offers"), (Refiner, "refine", "refine"),
                             (MujocoTwin, "_simulate", "refine: twin rollouts"), (task_base.Task, "cost", "refine: cost"),
                             (CommittedRepair, "decide", "repair commit")):
        t.wrap(cls, name, label)
    t.wrap_act(Controller)
    sys.argv = ["twinloop", "run", *args]
    try:
        main()
    except SystemExit as exc:
        if exc.code:
            raise
    ticks = max(t.calls["tick (act)"], 1)
    parts = {k: {"ms_per_tick": 1e3 * t.total[k] / ticks, "calls": t.calls[k]}
             for k in sorted(t.total, key=lambda k: -t.total[k])}
    return {"command": "twinloop run " + " ".join(args), "refined_ticks": t.calls["tick (act)"], "parts": parts}


def _starts(task, every: int = 4) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(state, chunk)`` every ``every`` ticks along the nominal twin's scripted fold."""
    m = task.model
    d = mujoco.MjData(m)
    s0 = task.initial_state(np.random.default_rng(0))
    d.qpos[:], d.qvel[:], d.act[:] = s0[: m.nq], s0[m.nq : m.nq + m.nv], s0[m.nq + m.nv :]
    script = task.default_proposer()
    script.reset(0)
    out = []
    for tick in range(task.max_ticks):
        mujoco.mj_forward(m, d)
        state = np.concatenate([d.qpos, d.qvel, d.act])
        chunk = script.propose(task.obs_from_data(m, d), state)
        if tick % every == 0:
            out.append((state, chunk))
        d.ctrl[:] = chunk[0]
        for _ in range(int(round(task.control_period / m.opt.timestep))):
            mujoco.mj_step(m, d)
    return out


def _inputs(task, model, starts, k: int, steps: int):
    """``(init (n, nfull), ctrl (n, steps, nu))``: ``k`` noisy copies of each start's chunk."""
    m, rng = task.model, np.random.default_rng(1)
    d = mujoco.MjData(model)
    sub = int(round(task.control_period / model.opt.timestep))
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    init, ctrl = [], []
    for state, chunk in starts:
        mujoco.mj_resetData(model, d)
        d.qpos[:], d.qvel[:], d.act[:] = state[: m.nq], state[m.nq : m.nq + m.nv], state[m.nq + m.nv :]
        full = np.empty(mujoco.mj_stateSize(model, spec))
        mujoco.mj_getState(model, d, full, spec)
        u = np.repeat(chunk, sub, axis=0)[:steps]
        for _ in range(k):
            init.append(full)
            ctrl.append(np.clip(u + rng.normal(0, 0.02, u.shape) * [1, 1, 1, 0], task.action_low, task.action_high))
    return np.array(init), np.array(ctrl)


def _time(task, model, starts, k: int, threads: int, reps: int = 3):
    """(best seconds per physics step over ``reps``, final keypoints ``(n, 9, 3)``)."""
    steps = int(round(1.0 / model.opt.timestep))
    init, ctrl = _inputs(task, model, starts, k, steps)
    n = len(init)
    pool = mj_rollout.Rollout(nthread=threads)
    datas = [mujoco.MjData(model) for _ in range(threads)]
    st, sd = np.empty((n, steps, init.shape[1])), np.empty((n, steps, model.nsensordata))
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        pool.rollout([model] * n, datas, init, ctrl, control_spec=mujoco.mjtState.mjSTATE_CTRL.value,
                     skip_checks=True, nstep=steps, state=st, sensordata=sd)
        best = min(best, time.perf_counter() - t0)
    pool.close()
    q = st[:, -1, 1 : 1 + task.model.nq]
    return best / (n * steps), np.stack([task.keypoint_positions(row) for row in q])


def options(step: float, k: int, threads: int) -> dict:
    """Seconds per step of each variant against the unchanged twin, and its keypoint change."""
    from twinloop.tasks import make_task

    task = make_task("cloth-fold")
    base = copy.copy(task.model)
    base.opt.timestep = step
    starts = _starts(task)
    base_s, base_kp = _time(task, base, starts, k, threads)
    rows = {"unchanged": {"us_per_step": 1e6 * base_s, "ratio": 1.0, "keypoints_max_mm": 0.0, "keypoints_mean_mm": 0.0}}
    for name, (field, value) in VARIANTS.items():
        m = copy.copy(base)
        setattr(m.opt, field, (m.opt.disableflags | value) if field == "disableflags" else value)
        s, kp = _time(task, m, starts, k, threads)
        moved = np.abs(kp - base_kp)
        rows[name] = {"us_per_step": 1e6 * s, "ratio": s / base_s, "keypoints_max_mm": 1e3 * float(moved.max()),
                      "keypoints_mean_mm": 1e3 * float(moved.mean())}
    return {"twin_step": step, "k_per_state": k, "states": len(starts), "threads": threads, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("profile", "options"))
    ap.add_argument("out", help="the JSON to write")
    ap.add_argument("--step", type=float, default=0.02, help="options: the twin step (s)")
    ap.add_argument("--k", type=int, default=16, help="options: rollouts per start state")
    ap.add_argument("--threads", type=int, default=1, help="options: rollout threads")
    argv = sys.argv[1:]
    run_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    a = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    result = profile(Path(a.out), run_args) if a.what == "profile" else options(a.step, a.k, a.threads)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
