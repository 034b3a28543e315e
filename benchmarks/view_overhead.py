"""What the live view costs the control loop, and how often it updates the page.

Push-t's refined controller (the run's defaults: K = 32, 0.5 s horizon, 10 ms twin steps) in the
shifted world, the same seeds with and without the view, interleaved episode by episode in one
process (so a machine's load drifts over both alike):

- **control rate**: ticks per second of ``act`` time, with the view / without (goal: >= 0.95);
- **view update rate**: page updates per second while a viewed episode runs (goal: >= 10 Hz);
- the same seed gives the same episode with and without the view (final errors compared);
- where the cores went in each arm: CPU seconds of the control process, of the view's page
  process and of the browser (all its processes), from ``/proc``.

Measured three ways, one after the other in one run: with no page open; with a headless Chromium
(software WebGL) showing the page all along at the controller's priority; and with that browser
at the lowest priority (``nice -n 19``), which stands in for an operator's browser on another
machine or on spare cores: a headless Chromium on the controller's own two cores is the worst
case, not the use the view is meant for.

The page draws at most ``--max-fps`` frames a second in the browser (the live view's default;
``0``: viser's page as it is, which draws continuously while updates arrive, as the results
before the cap did).

    python benchmarks/view_overhead.py [--seeds 4] [--ticks 40] [--max-rate 30] [--max-fps 15] [--out FILE]
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
from twinloop.viz.frames import FRAME_CAP
from twinloop.viz.live import open_view

#: the pages measured: name -> the browser's nice value (None: no browser)
PAGES = {"none": None, "headless Chromium": 0, "headless Chromium at nice 19": 19}


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and all its descendants (0 when gone)."""
    tick, parents = os.sysconf("SC_CLK_TCK"), {}
    stats = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rfind(")") + 2:].split()
        parents.setdefault(int(fields[1]), []).append(int(p))
        stats[int(p)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += stats.get(p, 0.0)
        todo += parents.get(p, [])
    return total


def arm(world, ctl, seed: int, ticks: int, pids: dict) -> dict:
    cpu0 = {k: cpu_s(p) for k, p in pids.items()}
    own0 = time.process_time()
    r = run_episode(world, ctl, seed, max_ticks=ticks, record=False, stop_on_success=False)
    time.sleep(0.2)  # the last tick's frame
    cpu = {k: cpu_s(p) - cpu0[k] for k, p in pids.items()}
    return {"ticks": r.ticks, "act_s": r.ticks / r.control_hz, "final_error": r.final_error,
            "cpu_s": {"control process": time.process_time() - own0, **cpu}}


def settle(pid: int, idle_cores: float = 0.2, most_s: float = 30.0) -> None:
    """Wait until the browser has loaded the page: its CPU use over a second below
    ``idle_cores`` (at most ``most_s`` seconds)."""
    end = time.monotonic() + most_s
    while time.monotonic() < end:
        c0 = cpu_s(pid)
        time.sleep(1.0)
        if cpu_s(pid) - c0 < idle_cores:
            return


def measure(seeds: list[int], ticks: int, nice: int | None, max_rate: float = 30.0,
            max_fps: float | None = FRAME_CAP) -> dict:
    cfg = RunConfig(task="push-t", episodes=1, video=False, record=False)
    view = open_view(make_task("push-t"), "127.0.0.1", 0, max_rate, max_fps=max_fps)
    assert not view.frame_cap_missing, view.frame_cap_missing
    page = Browser(view.url, nice=nice) if nice is not None else None
    pids = {"view page process": view.process.pid, **({"browser": page.proc.pid} if page else {})}
    try:
        plain_world, plain = controller_in_world(cfg, "refined")
        view_world, viewed = controller_in_world(cfg, "refined", None, view)
        arm(plain_world, plain, 10**6, 3, pids)  # warm both up (imports, first rollouts)
        arm(view_world, viewed, 10**6, 3, pids)
        if page is not None:
            settle(page.proc.pid)
        rows = []
        for seed in seeds:
            a = arm(plain_world, plain, seed, ticks, pids)
            view.draw_times.clear()
            d0, p0 = view.drawn, view.published
            b = arm(view_world, viewed, seed, ticks, pids)
            hz = [a["ticks"] / a["act_s"], b["ticks"] / b["act_s"]]
            rows.append({"seed": seed, "ticks": [a["ticks"], b["ticks"]], "act_s": [a["act_s"], b["act_s"]], "hz": hz,
                         "ratio": hz[1] / hz[0], "cpu_s": [a["cpu_s"], b["cpu_s"]],
                         "same_episode": bool(a["final_error"] == b["final_error"] and a["ticks"] == b["ticks"]),
                         "view_updates": view.drawn - d0, "view_ticks": view.published - p0,
                         "view_rate_hz": view.update_rate()})
        assert not view.error, view.error
    finally:
        if page is not None:
            page.close()
        view.close()
    return summarize(rows, nice, max_rate)


def summarize(rows: list[dict], nice: int | None, max_rate: float) -> dict:
    hz0 = sum(r["ticks"][0] for r in rows) / sum(r["act_s"][0] for r in rows)
    hz1 = sum(r["ticks"][1] for r in rows) / sum(r["act_s"][1] for r in rows)
    cpu = [{k: sum(r["cpu_s"][i][k] for r in rows) for k in rows[0]["cpu_s"][i]} for i in (0, 1)]
    return {"page": next(k for k, v in PAGES.items() if v == nice), "browser_nice": nice, "max_rate_hz": max_rate,
            "control_hz_without": hz0, "control_hz_with": hz1, "ratio": hz1 / hz0,
            "ratio_per_episode_median": float(np.median([r["ratio"] for r in rows])),
            "view_rate_hz_median": float(np.nanmedian([r["view_rate_hz"] for r in rows])),
            "view_rate_hz_min": float(np.nanmin([r["view_rate_hz"] for r in rows])),
            "frames_dropped": int(sum(r["view_ticks"] - r["view_updates"] for r in rows)),
            "cpu_s_without": cpu[0], "cpu_s_with": cpu[1],
            "same_episodes": all(r["same_episode"] for r in rows), "episodes": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--ticks", type=int, default=40)
    ap.add_argument("--max-rate", type=float, default=30.0, help="most page updates a second (LiveView's default 30)")
    ap.add_argument("--max-fps", type=float, default=FRAME_CAP,
                    help="most frames a second the page draws (0: viser's page as it is, uncapped)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "view_overhead.json"))
    a = ap.parse_args()
    seeds = list(range(a.seeds))
    pages = [n for n in PAGES.values() if n is None or chromium() is not None]
    load = os.getloadavg()
    fps = a.max_fps or None
    runs = [measure(seeds, a.ticks, nice, a.max_rate, fps) for nice in pages]
    cmd = f"python benchmarks/view_overhead.py --seeds {a.seeds} --ticks {a.ticks}"
    cmd += (f" --max-rate {a.max_rate:g}" if a.max_rate != 30.0 else "") + (
        f" --max-fps {a.max_fps:g}" if a.max_fps != FRAME_CAP else "")
    out = {"command": cmd, "page_frame_cap_fps": fps,
           "task": "push-t", "world": "shifted (severity 2)", "K": 32, "seeds": seeds, "ticks": a.ticks,
           "goals": {"ratio": ">= 0.95", "view_rate_hz": ">= 10"}, "machine": platform.platform(),
           "cpus": os.cpu_count(), "load_average_1_5_15_min": {"start": load, "end": os.getloadavg()}, "runs": runs}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for r in runs:
        print(f"page={r['page']}: control {r['control_hz_without']:.1f} Hz without, {r['control_hz_with']:.1f} "
              f"Hz with the view (ratio {r['ratio']:.3f}, per-episode median {r['ratio_per_episode_median']:.3f}); "
              f"view {r['view_rate_hz_median']:.1f} Hz (min {r['view_rate_hz_min']:.1f}); same episodes: "
              f"{r['same_episodes']}; cpu s without {fmt(r['cpu_s_without'])}, with {fmt(r['cpu_s_with'])}")
    print(f"wrote {a.out}")


def fmt(cpu: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())


if __name__ == "__main__":
    main()
