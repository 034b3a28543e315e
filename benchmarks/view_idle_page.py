"""What an open but idle live-view page costs: the browser's CPU while nothing is sent.

Serves push-t's live-view page (scene and panel, no ticks) and opens it in headless Chromium
(software WebGL), twice: lit as the view lights it (a hemisphere light and unshadowed default
lights, :func:`twinloop.viz.scene.light_plainly`) and lit by viser's defaults (its environment
map and shadowed lights). After the page has loaded, the browser's CPU seconds (all its
processes, from ``/proc``) over a fixed window are its idle cost, in cores. The two pages
alternate ``--repeats`` times.

    python benchmarks/view_idle_page.py [--repeats 3] [--window 8] [--out benchmarks/view_idle_page.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from view_overhead import cpu_s

from twinloop.tasks import make_task
from twinloop.viz import panels
from twinloop.viz.browser import Browser
from twinloop.viz.scene import SceneMirror, light_plainly, load_viser, look_from_above
from twinloop.viz.tuning import Tuning


def idle_cores(plain_light: bool, window: float, load_s: float = 8.0) -> float:
    """Cores the browser uses on the idle page over ``window`` seconds, after ``load_s`` to load."""
    task = make_task("push-t")
    server = load_viser().ViserServer(port=0, verbose=False)
    try:
        SceneMirror(server.scene, task.model)
        if plain_light:
            light_plainly(server)
        look_from_above(server, task.model)
        panels.TickPanel(server, task, Tuning())
        page = Browser(f"http://127.0.0.1:{server.get_port()}")
        try:
            time.sleep(load_s)
            c0, t0 = cpu_s(page.proc.pid), time.monotonic()
            time.sleep(window)
            return (cpu_s(page.proc.pid) - c0) / (time.monotonic() - t0)
        finally:
            page.close()
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--window", type=float, default=8.0, help="seconds measured per page")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "view_idle_page.json"))
    a = ap.parse_args()
    load = os.getloadavg()
    rows = {"view lighting": [], "viser default lighting": []}
    for _ in range(a.repeats):
        rows["view lighting"].append(idle_cores(True, a.window))
        rows["viser default lighting"].append(idle_cores(False, a.window))
    out = {"command": f"python benchmarks/view_idle_page.py --repeats {a.repeats} --window {a.window:g}",
           "task": "push-t", "browser": "headless Chromium, software WebGL (SwiftShader), 800 x 560",
           "idle_browser_cores": rows, "machine": platform.platform(), "cpus": os.cpu_count(),
           "load_average_1_5_15_min": {"start": load, "end": os.getloadavg()}}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for k, v in rows.items():
        print(f"{k}: idle page {', '.join(f'{c:.3f}' for c in v)} cores")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
