"""What the live view costs the control loop, and how often it updates the page.

Push-t's refined controller (the run's defaults: K = 32, 0.5 s horizon, 10 ms twin steps) in the
shifted world, the same seeds with and without the view, interleaved episode by episode in one
process (so a machine's load drifts over both alike):

- **control rate**: ticks per second of ``act`` time, with the view / without (goal: >= 0.95);
- **view update rate**: page updates per second while a viewed episode runs (goal: >= 10 Hz);
- the same seed gives the same episode with and without the view (final errors compared).

Measured twice: with no page open, and with a headless Chromium showing the page all along
(its rendering loads the machine during both arms alike; the ratio is the view's own cost).

    python benchmarks/view_overhead.py [--seeds 4] [--ticks 40] [--max-rate 30] [--out benchmarks/view_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from twinloop.run.build import controller_in_world
from twinloop.run.compare import RunConfig
from twinloop.run.experiment import run_episode
from twinloop.tasks import make_task
from twinloop.viz.browser import Browser, chromium
from twinloop.viz.live import open_view


def arm(world, ctl, seed: int, ticks: int):
    r = run_episode(world, ctl, seed, max_ticks=ticks, record=False, stop_on_success=False)
    return r.ticks, r.ticks / r.control_hz, r.final_error


def measure(seeds: list[int], ticks: int, browser: bool, max_rate: float = 30.0) -> dict:
    cfg = RunConfig(task="push-t", episodes=1, video=False, record=False)
    view = open_view(make_task("push-t"), "127.0.0.1", 0, max_rate)
    page = Browser(view.url) if browser else None
    try:
        plain_world, plain = controller_in_world(cfg, "refined")
        view_world, viewed = controller_in_world(cfg, "refined", None, view)
        arm(plain_world, plain, 10**6, 3)  # warm both up (imports, first rollouts)
        arm(view_world, viewed, 10**6, 3)
        rows = []
        for seed in seeds:
            n0, s0, e0 = arm(plain_world, plain, seed, ticks)
            view.draw_times.clear()
            d0, p0 = view.drawn, view.published
            n1, s1, e1 = arm(view_world, viewed, seed, ticks)
            time.sleep(0.2)  # the last tick's frame
            rows.append({"seed": seed, "ticks": [n0, n1], "act_s": [s0, s1], "hz": [n0 / s0, n1 / s1],
                         "ratio": (n1 / s1) / (n0 / s0), "same_episode": bool(e0 == e1 and n0 == n1),
                         "view_updates": view.drawn - d0, "view_ticks": view.published - p0,
                         "view_rate_hz": view.update_rate()})
        assert not view.error, view.error
    finally:
        if page is not None:
            page.close()
        view.close()
    hz0 = sum(r["ticks"][0] for r in rows) / sum(r["act_s"][0] for r in rows)
    hz1 = sum(r["ticks"][1] for r in rows) / sum(r["act_s"][1] for r in rows)
    return {"browser": browser, "max_rate_hz": max_rate, "control_hz_without": hz0, "control_hz_with": hz1, "ratio": hz1 / hz0,
            "ratio_per_episode_median": float(np.median([r["ratio"] for r in rows])),
            "view_rate_hz_median": float(np.nanmedian([r["view_rate_hz"] for r in rows])),
            "view_rate_hz_min": float(np.nanmin([r["view_rate_hz"] for r in rows])),
            "frames_dropped": int(sum(r["view_ticks"] - r["view_updates"] for r in rows)),
            "same_episodes": all(r["same_episode"] for r in rows), "episodes": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--ticks", type=int, default=40)
    ap.add_argument("--max-rate", type=float, default=30.0, help="most page updates a second (LiveView's default 30)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "view_overhead.json"))
    a = ap.parse_args()
    seeds = list(range(a.seeds))
    runs = [measure(seeds, a.ticks, False, a.max_rate)]
    if chromium() is not None:
        runs.append(measure(seeds, a.ticks, True, a.max_rate))
    cmd = f"python benchmarks/view_overhead.py --seeds {a.seeds} --ticks {a.ticks}"
    out = {"command": cmd + (f" --max-rate {a.max_rate:g}" if a.max_rate != 30.0 else ""),
           "task": "push-t", "world": "shifted (severity 2)", "K": 32, "seeds": seeds, "ticks": a.ticks,
           "goals": {"ratio": ">= 0.95", "view_rate_hz": ">= 10"}, "machine": platform.platform(),
           "cpus": os.cpu_count(), "runs": runs}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for r in runs:
        print(f"browser={r['browser']}: control {r['control_hz_without']:.1f} Hz without, {r['control_hz_with']:.1f} "
              f"Hz with the view (ratio {r['ratio']:.3f}, per-episode median {r['ratio_per_episode_median']:.3f}); "
              f"view {r['view_rate_hz_median']:.1f} Hz (min {r['view_rate_hz_min']:.1f}); same episodes: "
              f"{r['same_episodes']}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
