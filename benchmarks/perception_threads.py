"""Milliseconds per frame of the shipped push-t perception model on one and on two PyTorch
threads, reading each image alone and in four shifted copies, on an idle machine and beside a
busy process (a camera run's other controller, or the physics).

    python benchmarks/perception_threads.py [--frames 200] [--out benchmarks/perception_threads.json]

Ratios are against one thread, one copy, measured in the same run under the same load.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import time

import numpy as np

from twinloop.perception import load_perception


def _burn(stop) -> None:
    x = 0.0
    while not stop.is_set():
        for i in range(100_000):
            x += i * 1e-9


def per_frame(model, images, frames: int) -> float:
    model.predict({"top": images[0]})
    t0 = time.perf_counter()
    for i in range(frames):
        model.predict({"top": images[i % len(images)]})
    return 1000 * (time.perf_counter() - t0) / frames


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--out", default="benchmarks/perception_threads.json")
    a = p.parse_args()
    images = np.random.default_rng(0).integers(0, 255, (16, 96, 96, 3), dtype=np.uint8)
    rows = {}
    for load in ("idle", "busy"):
        stop = mp.Event()
        burner = mp.Process(target=_burn, args=(stop,)) if load == "busy" else None
        if burner:
            burner.start()
        try:
            for shifts in (1, 4):
                model = load_perception("push-t", "push-t", shifts=shifts)
                for threads in (1, 2):
                    model.threads = threads
                    ms = per_frame(model, images, a.frames)
                    rows[f"{load}, {shifts} cop{'y' if shifts == 1 else 'ies'}, {threads} thread{'s' * (threads > 1)}"] = ms
                    print(f"{load}: {shifts} copies, {threads} threads: {ms:.2f} ms a frame", flush=True)
        finally:
            if burner:
                stop.set()
                burner.join()
    base = {load: rows[f"{load}, 1 copy, 1 thread"] for load in ("idle", "busy")}
    out = {"command": f"python benchmarks/perception_threads.py --frames {a.frames}", "cpus": os.cpu_count(),
           "machine": platform.platform(), "ms_per_frame": {k: round(v, 2) for k, v in rows.items()},
           "ratio_to_one_copy_one_thread": {k: round(v / base[k.split(",")[0]], 2) for k, v in rows.items()}}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
