"""Refinement when the world does not wait: push-t's shifted world at 10 Hz in real time.

The world (push-t, shifted severity 2, world seed 0) runs in its own thread at 100 Hz of
real time (a ``RealtimeWorld`` over a ``ShiftedWorld`` stepped 10 ms at a time), applying
the latest action as it arrives. The refined controller is an ``AsyncController``: planning
in its own thread, actuation at the world's rate. Each planning cycle takes ``budget`` of the
100 ms control period (the refine itself, then a wait: a stand-in for a slower planner or a
bigger model), from 20% to 120%, without latency compensation (``off``), with it (``on``:
the nominal twin predicts through the actions in flight) and with it modelling the world's
known actuation delay too (``delay``: the shifted world's 20 ms). Reported per cell:
success with its 95% Wilson interval, deadline misses (world ticks that held the previous
action because none arrived in time), planning cycles longer than the control period, and
the median lead the compensation predicted ahead.

Real-time runs are wall-clock bound: run under the shared CPU lock.

    python benchmarks/realtime.py [--episodes 8] [--budgets 0.2 0.4 ...]
        [--modes on off delay]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from twinloop.control import AsyncConfig, AsyncController, RefinerConfig
from twinloop.run.compare import RunConfig, build, episode_seeds, realtime_summary, world_ticks
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson
from twinloop.tasks import make_task
from twinloop.worlds.shifted import ShiftedWorld


def run_cell(budget: float, mode: str, episodes: int, base: dict) -> dict:
    cfg = RunConfig(episodes=episodes, video=False, record=False, realtime=True, **base,
                    async_control=AsyncConfig(latency_comp=mode != "off", budget=budget, anytime=False))
    if mode == "delay":  # the world's own actuation delay, known as a robot's would be
        delay = ShiftedWorld(make_task(cfg.task), cfg.severity, cfg.seed).describe()["delay_s"]
        cfg = replace(cfg, refiner=replace(cfg.refiner, actuation_delay=delay))
    task, world, proposer, refiner = build(cfg)
    ctl = AsyncController(refiner, proposer, cfg.async_control)
    n = world_ticks(cfg, task, world)
    res, rt = [], []
    t0 = time.perf_counter()
    try:
        for s in episode_seeds(cfg):
            res.append(run_episode(world, ctl, s, max_ticks=n, record=False))
            rt.append({**world.stats(), **ctl.stats()})
    finally:
        world.close()
    k = sum(r.success for r in res)
    lo, hi = wilson(k, len(res))
    return {"budget_fraction": budget / task.control_period, "mode": mode, "latency_comp": mode != "off",
            "actuation_delay": cfg.refiner.actuation_delay, "episodes": len(res),
            "successes": k, "ci": [lo, hi], **realtime_summary(rt), "wall_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.2, 0.4, 0.6, 0.8, 1.0, 1.2],
                    help="planning cycle as a fraction of the 100 ms control period")
    ap.add_argument("--modes", nargs="+", default=["on", "off"], choices=["on", "off", "delay"],
                    help="latency compensation: on, off, or on with the world's actuation delay modelled")
    ap.add_argument("--num-samples", type=int, default=32)
    ap.add_argument("--horizon", type=float, default=0.5)
    ap.add_argument("--twin-timestep", type=float, default=0.01)
    ap.add_argument("--out", default="benchmarks/results/realtime.json")
    a = ap.parse_args()
    base = {"refiner": RefinerConfig(num_samples=a.num_samples, horizon=a.horizon), "twin_timestep": a.twin_timestep}
    rows = []
    print(f"push-t shifted (severity 2, world seed 0), world at 100 Hz real time, control 10 Hz, "
          f"K={a.num_samples}, {a.horizon:g} s horizon, twin step {1000 * a.twin_timestep:g} ms")
    print(f"{'budget':>7} {'comp':>5} {'success':>8} {'95% CI':>12} {'misses':>12} {'cycles>period':>14} {'lead ms':>8}")
    for b in a.budgets:
        for mode in a.modes:
            r = run_cell(b * 0.1, mode, a.episodes, base)
            rows.append(r)
            print(f"{100 * b:>6.0f}% {mode:>5} {r['successes']:>3}/{r['episodes']:<4} "
                  f"[{100 * r['ci'][0]:3.0f}%, {100 * r['ci'][1]:3.0f}%] {r['misses']:>5}/{r['ticks']:<6} "
                  f"{r['overruns']:>6}/{r['cycles']:<7} {1000 * r['lead_median']:>8.0f}", flush=True)
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
