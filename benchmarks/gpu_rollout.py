"""Rollout throughput and refine latency of each twin backend against its bare engine.

For push-t (block-push if push-t is missing), a 1 s horizon and K candidates, per backend:

- raw:      the bare engine on the same batch, the ceiling: ``mujoco.rollout`` (CPU), a
            ``jit(vmap(scan(mjx.step)))`` with controls already on the device and only final
            positions returned (MJX), a ``mujoco_warp.step`` loop (graph-captured on CUDA) with
            controls already on the device (Warp);
- rollout:  ``twin.rollout(state, ctrl)``: NumPy in, ``(1, K, T+1, ...)`` trajectories out;
- refine:   one ``Refiner.refine`` iteration (sample, spline -> controls, rollout, cost, MPPI).

Prints simulated steps per second, latencies (median of repeats after a warm-up that also
compiles) and the ratios rollout/raw and refine/raw of time (1.0 = no overhead). Goal on an
H200 at K=4096: refine < 20 ms, rollout within 20% of raw (ratio <= 1.25).

    python benchmarks/gpu_rollout.py [--task push-t] [--ks 256 1024 4096 16384]
        [--backends mujoco mjx warp] [--horizon 1.0] [--repeats 10] [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import tempfile
import time

import mujoco
import numpy as np

from twinloop.control import Refiner, RefinerConfig
from twinloop.plan import make_optimizer
from twinloop.tasks import TASKS, make_task
from twinloop.twin import make_twin


def timed(fn, repeats: int) -> tuple[float, float]:
    """(first-call seconds, median seconds of ``repeats`` further calls)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, float(np.median(times))


# -- bare engines ------------------------------------------------------------------------------

def raw_mujoco(model, state, ctrl, nthread):
    from mujoco import rollout as mj_rollout

    K, T, _ = ctrl.shape
    pool = mj_rollout.Rollout(nthread=nthread)
    datas = [mujoco.MjData(model) for _ in range(nthread)]
    d = mujoco.MjData(model)
    d.qpos[:], d.qvel[:] = state[: model.nq], state[model.nq : model.nq + model.nv]
    full = np.empty(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(model, d, full, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    init = np.tile(full, (K, 1))
    u = np.ascontiguousarray(ctrl)
    out_s = np.empty((K, T, full.size))
    out_d = np.empty((K, T, model.nsensordata))
    models = [model] * K

    def run():
        pool.rollout(models, datas, init, u, control_spec=mujoco.mjtState.mjSTATE_CTRL.value,
                     skip_checks=True, nstep=T, state=out_s, sensordata=out_d)

    return run


def raw_mjx(model, state, ctrl):
    import jax
    from mujoco import mjx

    mx = mjx.put_model(model, impl="jax")
    d0 = mjx.make_data(mx, impl="jax").replace(qpos=state[: model.nq], qvel=state[model.nq : model.nq + model.nv])
    u = jax.device_put(ctrl.astype(np.float32))

    def roll(d0, u):
        def one(ui):
            def body(d, ut):
                return mjx.step(mx, d.replace(ctrl=ut)), None

            return jax.lax.scan(body, d0, ui)[0].qpos

        return jax.vmap(one)(u)

    with jax.default_matmul_precision("highest"):  # as the twin compiles
        compiled = jax.jit(roll).lower(d0, u).compile()
    return lambda: compiled(d0, u).block_until_ready()


def raw_warp(model, state, ctrl):
    import mujoco_warp as mjw
    import warp as wp

    wp.config.quiet, wp.config.log_level = True, wp.LOG_WARNING  # no per-module load lines
    from twinloop.twin.warp import _set_ctrl

    K, T, nu = ctrl.shape
    d = mujoco.MjData(model)
    d.qpos[:], d.qvel[:] = state[: model.nq], state[model.nq : model.nq + model.nv]
    mujoco.mj_forward(model, d)
    mw = mjw.put_model(model)
    dw = mjw.put_data(model, d, nworld=K)
    u = wp.array(ctrl.astype(np.float32), dtype=float)

    def loop():
        for t in range(T):
            wp.launch(_set_ctrl, dim=(K, nu), inputs=[u, t, 1, dw.ctrl])
            mjw.step(mw, dw)

    if wp.get_device().is_cuda:
        loop()  # load modules before capture
        with wp.ScopedCapture() as cap:
            loop()
        graph = cap.graph

        def run():
            wp.capture_launch(graph)
            wp.synchronize()

        return run

    def run_cpu():
        loop()
        wp.synchronize()

    return run_cpu


# -- one measurement ---------------------------------------------------------------------------

def bench(task, backend: str, K: int, horizon: float, repeats: int, nthread: int) -> dict:
    kw = {"nthread": nthread} if backend == "mujoco" else {}
    twin = make_twin(backend, task.model, task.param_space(), **kw)
    opt = make_optimizer("mppi")
    ref = Refiner(task, twin, opt, RefinerConfig(num_samples=K, horizon=horizon, iterations=1))
    state = task.initial_state(np.random.default_rng(0))
    # the batch a refine iteration simulates: the warm plan (hold the pusher) and K-1 samples
    # around it, so raw, rollout and refine see the same contact-rich physics
    warm = ref.hold_plan(task.hold_action(state))
    lo, hi = ref.spec.low, ref.spec.high
    samples = opt.sample(opt.init(warm.knots, None, lo, hi), np.random.default_rng(1), K - 1)
    ctrl = ref.basis.controls(np.clip(np.concatenate([warm.knots[None], samples]), lo, hi))
    T = ctrl.shape[1]
    if backend == "mujoco":
        raw = raw_mujoco(task.model, state, ctrl, nthread)
    elif backend == "mjx":
        raw = raw_mjx(task.model, state, ctrl)
    else:
        raw = raw_warp(task.model, state, ctrl)
    raw_first, t_raw = timed(raw, repeats)
    roll_first, t_roll = timed(lambda: twin.rollout(state, ctrl), repeats)
    _, t_ref = timed(lambda: ref.refine(state, warm=warm), repeats)
    if hasattr(twin, "close"):
        twin.close()
    return {
        "task": task.name, "backend": backend, "K": K, "T": T,
        "raw_ms": 1e3 * t_raw, "rollout_ms": 1e3 * t_roll, "refine_ms": 1e3 * t_ref,
        "raw_Msteps_s": K * T / t_raw / 1e6, "rollout_Msteps_s": K * T / t_roll / 1e6,
        "rollout_over_raw": t_roll / t_raw, "refine_over_raw": t_ref / t_raw,
        "first_call_s": {"raw": raw_first, "rollout": roll_first},
    }


def device_info(backends) -> dict:
    info = {"date": datetime.date.today().isoformat(), "host": platform.node(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "mujoco": mujoco.__version__}
    if "mjx" in backends:
        import jax

        info["jax"] = jax.__version__
        info["jax_device"] = str(jax.devices()[0])
    if "warp" in backends:
        import mujoco_warp
        import warp as wp

        wp.config.quiet, wp.config.log_level = True, wp.LOG_WARNING  # no per-module load lines

        info["warp"] = wp.__version__
        info["mujoco_warp"] = mujoco_warp.__version__
        info["warp_device"] = str(wp.get_preferred_device())
    return info


def available(backend: str) -> str | None:
    """``None`` if the backend's extra imports, else why not."""
    mod = {"mujoco": "mujoco", "mjx": "mujoco.mjx", "warp": "mujoco_warp"}[backend]
    try:
        __import__(mod)
    except ImportError as exc:
        return str(exc)
    return None


def write_json(path: str, obj) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="push-t" if "push-t" in TASKS else "block-push")
    ap.add_argument("--ks", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    ap.add_argument("--backends", nargs="+", default=["mujoco", "mjx", "warp"], choices=["mujoco", "mjx", "warp"])
    ap.add_argument("--horizon", type=float, default=1.0, help="planning horizon (s)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--nthread", type=int, default=os.cpu_count(), help="CPU twin threads")
    ap.add_argument("--quick", action="store_true", help="K in {16, 64}, 3 repeats (a smoke run)")
    ap.add_argument("--out", help="also write the results as JSON here")
    a = ap.parse_args()
    if a.quick:
        a.ks, a.repeats = [16, 64], 3
    backends = []
    for b in a.backends:
        why = available(b)
        if why:
            print(f"skipping {b}: its extra is not installed ({why})")
        else:
            backends.append(b)
    task = make_task(a.task)
    info = device_info(backends)
    print(" ".join(f"{k}={v}" for k, v in info.items()))
    head = (f"{'backend':<8}{'K':>7}{'T':>5}{'raw ms':>10}{'rollout ms':>12}{'refine ms':>11}"
            f"{'raw Mst/s':>11}{'roll Mst/s':>12}{'roll/raw':>10}{'ref/raw':>9}{'1st s':>8}")
    print(head)
    rows = []
    for b in backends:
        for K in a.ks:
            r = bench(task, b, K, a.horizon, a.repeats, a.nthread)
            rows.append(r)
            print(f"{b:<8}{K:>7}{r['T']:>5}{r['raw_ms']:>10.1f}{r['rollout_ms']:>12.1f}{r['refine_ms']:>11.1f}"
                  f"{r['raw_Msteps_s']:>11.3f}{r['rollout_Msteps_s']:>12.3f}{r['rollout_over_raw']:>10.2f}"
                  f"{r['refine_over_raw']:>9.2f}{r['first_call_s']['rollout']:>8.1f}", flush=True)
            if a.out:  # rewrite after every row: a run cut short keeps what it measured
                write_json(a.out, {"info": info, "task": task.name, "horizon": a.horizon, "rows": rows})


if __name__ == "__main__":
    main()
