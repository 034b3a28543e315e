"""What the live view's page costs the browser that shows it, without a controller running.

The refined push-t controller's ticks (K = 32, 0.5 s horizon, shifted world) are recorded once
(``--record-ticks`` of one episode, through the same tick hook the live view uses) and then
replayed to a live view at the controller's rate (``--rate`` ticks a second), looped, while a
headless Chromium (software WebGL, as in the tests) shows the page. Over ``--seconds`` of the
stream, and over as long a window with the page open and nothing arriving, it reads:

- the browser's CPU seconds per wall second, over all its processes and split by Chromium's
  process type (the page's renderer, the GPU process that runs SwiftShader, the rest), from
  ``/proc`` -- the quantity the live view's cost on a controller sharing the cores comes from;
- the WebGL frames the page drew (``clear`` calls) and its draw calls (``draw*`` calls), counted
  by wrapping the page's WebGL context, and the main thread's script, layout and style time
  (DevTools ``Performance.getMetrics``);
- the page updates the view sent.

Two pages alternate, ``--repeats`` times each, each measured idle and then streaming: viser's
page as it is, and the live view's page, which draws at most ``--max-fps`` frames a second
(:mod:`twinloop.viz.frames`).

    python benchmarks/view_page_cost.py [--seconds 15] [--rate 25] [--repeats 2] [--max-fps 15] [--out FILE]

Software WebGL is a stand-in for the worst case (a robot computer without a GPU opening the
page on its own cores); a browser with a GPU draws the frames there instead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import threading
import time
from dataclasses import fields, replace

from twinloop.run.build import controller_in_world
from twinloop.run.compare import RunConfig
from twinloop.run.experiment import run_episode
from twinloop.tasks import make_task
from twinloop.viz.browser import Browser, chromium
from twinloop.viz.frames import FRAME_CAP
from twinloop.viz.live import History, ViewHook, open_view
from twinloop.viz.tuning import Tuning

METRICS = ("ScriptDuration", "LayoutDuration", "RecalcStyleDuration", "TaskDuration")


class Recorder:
    """Stands in for a :class:`~twinloop.viz.live.LiveView`: keeps each tick's snapshot, its
    history cut at that tick (the hook shares one history object across ticks)."""

    def __init__(self):
        self.tuning, self.snaps = Tuning(), []

    def hook(self, label: str) -> ViewHook:
        return ViewHook(self, label)

    def show_settings(self, values: dict) -> None:
        pass

    def publish(self, snap) -> None:
        h = snap.history
        n = len(h.t)
        self.snaps.append(replace(snap, history=History(*(list(getattr(h, f.name)[:n]) for f in fields(History)))))


def record(ticks: int, seed: int) -> list:
    """One refined push-t episode's tick snapshots (``ticks`` of them)."""
    rec = Recorder()
    cfg = RunConfig(task="push-t", episodes=1, video=False, record=False)
    world, ctl = controller_in_world(cfg, "refined", None, rec)
    run_episode(world, ctl, seed, max_ticks=ticks, record=False, stop_on_success=False)
    return rec.snaps


def processes(root: int) -> dict[int, str]:
    """``root`` and its descendants: pid -> Chromium's process type (``browser`` for the root)."""
    parents: dict[int, list[int]] = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        parents.setdefault(int(s[s.rfind(")") + 2:].split()[1]), []).append(int(p))
    out, todo = {}, [root]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        m = re.search(r"--type=(\S+)", cmd)  # Chromium's children rewrite their command line
        kind = m.group(1) if m else "browser"
        if kind == "utility":
            m = re.search(r"--utility-sub-type=(\S+)", cmd)
            kind = f"utility {m.group(1).split('.')[-1]}" if m else kind
        out[p] = kind
        todo += parents.get(p, [])
    return out


def cpu_by_type(root: int) -> dict[str, float]:
    """CPU seconds (user + system) of ``root``'s process tree, summed by process type."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for pid, kind in processes(root).items():
        try:
            with open(f"/proc/{pid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        fl = s[s.rfind(")") + 2:].split()
        out[kind] = out.get(kind, 0.0) + (int(fl[11]) + int(fl[12])) / tick
    return out


class Stream:
    """Publishes ``snaps`` to ``view`` at ``rate`` a second, looped (each loop a new episode)."""

    def __init__(self, view, snaps: list, rate: float):
        self.view, self.snaps, self.period = view, snaps, 1.0 / rate
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        loop, nxt = 0, time.monotonic()
        while not self.stop.is_set():
            for s in self.snaps:
                if self.stop.is_set():
                    return
                self.view.publish(replace(s, episode=f"replay {loop}"))
                nxt += self.period
                time.sleep(max(0.0, nxt - time.monotonic()))
            loop += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def window(page: Browser, view, seconds: float) -> dict:
    """The browser's and the page's work over ``seconds`` from now."""
    def read():
        gl = page.gl_counts()
        m = {x["name"]: x["value"] for x in page.command("Performance.getMetrics")["metrics"]}
        return time.monotonic(), cpu_by_type(page.proc.pid), gl, m, view.drawn

    t0, c0, g0, m0, d0 = read()
    time.sleep(seconds)
    t1, c1, g1, m1, d1 = read()
    wall = t1 - t0
    cpu = {k: (c1.get(k, 0.0) - c0.get(k, 0.0)) / wall for k in sorted(set(c0) | set(c1))}
    frames = (g1["frames"] - g0["frames"]) / wall
    draws = (g1["draws"] - g0["draws"]) / wall
    return {"wall_s": wall, "browser_cores": sum(cpu.values()), "cores_by_process": cpu, "frames_hz": frames,
            "draw_calls_hz": draws, "draw_calls_per_frame": draws / frames if frames else float("nan"),
            "main_thread_s_per_s": {k: (m1[k] - m0[k]) / wall for k in METRICS}, "page_updates_hz": (d1 - d0) / wall}


def measure(snaps: list, seconds: float, rate: float, repeats: int, width: int, height: int, query: str = "",
            flags=(), init_script: str = "", max_fps: float | None = FRAME_CAP) -> list[dict]:
    """Alternating windows without and with the stream, on a page (drawing at most ``max_fps``
    frames a second; ``None``: viser's page as it is) opened at ``view.url + query`` by a
    Chromium with the further switches ``flags``."""
    view = open_view(make_task("push-t"), "127.0.0.1", 0, max_fps=max_fps)
    assert not view.frame_cap_missing, view.frame_cap_missing
    page = Browser(view.url + query, width=width, height=height, flags=flags)
    rows = []
    try:
        page.command("Performance.enable")
        if init_script:  # a diagnostic: run before the page's own scripts, from a reload on
            page.command("Page.enable")
            page.command("Page.addScriptToEvaluateOnNewDocument", source=init_script)
            page.command("Page.reload")
        view.publish(snaps[0])  # the scene and the traces exist before the first window
        time.sleep(8.0)  # the page loads and builds its scene
        page.gl_counts()  # from now on
        for r in range(repeats):
            rows.append({"repeat": r, "stream": "none", **window(page, view, seconds)})
            stream = Stream(view, snaps, rate)
            time.sleep(1.0)
            rows.append({"repeat": r, "stream": f"{rate:g} ticks/s", **window(page, view, seconds)})
            stream.close()
            time.sleep(1.0)
        assert not view.error, view.error
    finally:
        page.close()
        view.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="length of each measured window (s)")
    ap.add_argument("--rate", type=float, default=25.0, help="ticks published a second (the controller's rate)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--record-ticks", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", default="800x560", help="the browser window, WIDTHxHEIGHT (the tests' size)")
    ap.add_argument("--max-fps", type=float, default=FRAME_CAP,
                    help="the capped page's most frames a second (compared with viser's page as it is)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "view_page_cost.json"))
    a = ap.parse_args()
    if chromium() is None:
        raise SystemExit("no chromium on PATH: apt-get install chromium")
    width, height = (int(v) for v in a.size.split("x"))
    load = os.getloadavg()
    snaps = record(a.record_ticks, a.seed)
    rows = []
    for r in range(a.repeats):  # the two pages alternate
        for fps in (None, a.max_fps):
            rows += [{"page": "viser's" if fps is None else f"capped at {fps:g} frames/s", **w, "repeat": r}
                     for w in measure(snaps, a.seconds, a.rate, 1, width, height, max_fps=fps)]
    summary = {}
    for page in dict.fromkeys(w["page"] for w in rows):
        for stream in ("none", f"{a.rate:g} ticks/s"):
            sel = [w for w in rows if w["page"] == page and w["stream"] == stream]
            summary[f"{page}, stream {stream}"] = {
                k: [round(w[k], 3) for w in sel] for k in ("browser_cores", "frames_hz", "page_updates_hz")}
    out = {"command": f"python benchmarks/view_page_cost.py --seconds {a.seconds:g} --rate {a.rate:g} "
                      f"--repeats {a.repeats} --size {a.size} --max-fps {a.max_fps:g}",
           "task": "push-t", "K": 32, "browser": "headless Chromium, software WebGL (SwiftShader)",
           "machine": platform.platform(), "cpus": os.cpu_count(),
           "load_average_1_5_15_min": {"start": load, "end": os.getloadavg()}, "summary": summary, "windows": rows}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for r in rows:
        by = ", ".join(f"{k} {v:.2f}" for k, v in r["cores_by_process"].items() if v >= 0.005)
        print(f"{r['page']:>24} {r['stream']:>14}: browser {r['browser_cores']:.2f} cores ({by}); {r['frames_hz']:.1f} frames/s, "
              f"{r['draw_calls_per_frame']:.1f} draw calls/frame; page {r['page_updates_hz']:.1f} updates/s; "
              f"main thread script {r['main_thread_s_per_s']['ScriptDuration']:.2f} s/s, "
              f"task {r['main_thread_s_per_s']['TaskDuration']:.2f} s/s")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
