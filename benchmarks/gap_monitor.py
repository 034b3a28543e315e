"""The live gap monitor on push-t with a mid-episode physics change.

The world (:class:`~twinloop.worlds.ChangingWorld`) is push-t's nominal scene with 0.3 mm /
0.003 rad observation noise until tick ``--change-at``; then the block's friction and mass
change by ``--friction`` and ``--mass`` times. The refined controller (MPPI, K=64, scripted
proposer, nominal twin) runs the standard seeds of ``run_comparison`` without a monitor
(a ``flag`` monitor watches but changes nothing: it measures false alarms before the change
and detection delay after it) and with a monitor that acts (``--actions``: ``refit``,
``widen``, ``fallback``). The monitor's threshold comes from nominal excitation episodes.

    python benchmarks/gap_monitor.py                       # 20 episodes per arm
    python benchmarks/gap_monitor.py --episodes 5 --actions refit
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from twinloop.calib import GapMonitor, MonitorConfig, record_trajectory
from twinloop.control import Controller, GapWatch, Refiner, RefinerConfig
from twinloop.plan import make_optimizer
from twinloop.run.compare import RunConfig, episode_seeds
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import ChangingWorld


def arm(task, world, monitor_cfg, threshold_eps, seeds, change_at) -> dict:
    twin = make_twin("mujoco", task.model, task.param_space())
    monitor = GapMonitor.from_nominal(task, twin, threshold_eps, monitor_cfg)
    refiner = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=64, horizon=1.0))
    ctl = Controller(refiner, task.default_proposer(), hooks=[GapWatch(monitor)])
    rows = []
    for s in seeds:
        r = run_episode(world, ctl, s, record=False)
        ticks = [a.tick for a in monitor.alarms]
        rows.append({"seed": s, "success": r.success, "ticks": r.ticks, "alarms": ticks,
                     "false_alarm": any(t <= change_at for t in ticks),
                     "detected": any(t > change_at for t in ticks),
                     "delay": min((t - change_at for t in ticks if t > change_at), default=None),
                     "reached_change": r.ticks > change_at})
    monitor.close()
    k = sum(r["success"] for r in rows)
    lo, hi = wilson(k, len(rows))
    reached = [r for r in rows if r["reached_change"]]
    delays = [r["delay"] for r in reached if r["delay"] is not None]
    return {"action": monitor_cfg.action, "threshold": monitor.threshold, "successes": k, "episodes": len(rows),
            "ci": [lo, hi], "false_alarms": sum(r["false_alarm"] for r in rows),
            "reached_change": len(reached), "detected": sum(r["detected"] for r in reached),
            "median_delay": float(np.median(delays)) if delays else None, "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="push-t")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--change-at", type=int, default=30)
    p.add_argument("--friction", type=float, default=2.5)
    p.add_argument("--mass", type=float, default=2.0)
    p.add_argument("--actions", nargs="+", default=["refit"])
    p.add_argument("--json", default="")
    args = p.parse_args()
    task = make_task(args.task)
    factors = {"block_friction": args.friction, "block_mass": args.mass}
    world = ChangingWorld(task, change_at=args.change_at, factors=factors, noise=1)
    nominal = ChangingWorld(task, change_at=None, noise=1)
    threshold_eps = [record_trajectory(nominal, task.excitation(5000 + s), 5000 + s, 60) for s in range(6)]
    seeds = episode_seeds(RunConfig(task=args.task, episodes=args.episodes))
    out = []
    for action in ["flag", *args.actions]:
        t0 = time.perf_counter()
        r = arm(task, world, MonitorConfig(action=action), threshold_eps, seeds, args.change_at)
        r["seconds"] = time.perf_counter() - t0
        out.append(r)
        print(f"{action}: {r['successes']}/{r['episodes']} [{r['ci'][0]:.0%}, {r['ci'][1]:.0%}], false alarms "
              f"{r['false_alarms']}, detected {r['detected']}/{r['reached_change']}, delay {r['median_delay']}, "
              f"{r['seconds']:.0f} s", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "arms": out}, f, indent=2)
    print(f"\n{args.task}, change at tick {args.change_at}: friction x{args.friction}, mass x{args.mass}\n"
          "| monitor | success [95% CI] | false alarms before the change | detected after it | median delay (ticks) |\n"
          "|---|---|---|---|---|")
    for r in out:
        label = "none (flag only: watches, never acts)" if r["action"] == "flag" else r["action"]
        print(f"| {label} | {r['successes']}/{r['episodes']} [{r['ci'][0]:.0%}, {r['ci'][1]:.0%}] | "
              f"{r['false_alarms']}/{r['episodes']} | {r['detected']}/{r['reached_change']} | {r['median_delay']} |")


if __name__ == "__main__":
    main()
