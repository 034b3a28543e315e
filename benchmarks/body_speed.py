"""The fastest body of normal episodes, per task: what ``Task.max_body_speed`` is chosen from.

A simulated world keeps the fastest body centre of mass of each episode, read after every
physics step (``SimWorld.peak_speed``; each ``summary.json`` row of ``twinloop run`` carries it as
``peak_body_speed`` and ``peak_body``). This script prints, for each run's ``summary.json`` given,
per controller: the peak of each episode (``!`` marks an episode the bound ended), the largest
over the episodes not flagged, the task's bound and its margin over that peak. ``--datasets``
reads recorded runs (``twinloop run`` without ``--no-record``) and prints the peaks seen at tick
boundaries only (the recorded world states; kinematics of the task's nominal scene), the
alternative of checking once per tick. ``--cost`` times a world tick with and without the
per-step watch.

    twinloop run --task rope-shape --world shifted --episodes 20 --proposer distilled \\
        --checkpoint NS40/policy_round1.pt -k 64 --horizon 1 --exact-prior --repair ... --out R
    python benchmarks/body_speed.py --summaries R/summary.json [--datasets R/episodes/refined]
    python benchmarks/body_speed.py --cost
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mujoco
import numpy as np

from twinloop.data.dataset import Dataset
from twinloop.tasks import make_task
from twinloop.worlds import ShiftedWorld
from twinloop.worlds.base import body_speeds

TASKS = ["rope-shape", "cloth-fold", "push-t", "block-push", "pivot", "push-upright", "peg-insert"]


def summaries(paths: list[str]) -> None:
    for path in paths:
        s = json.loads(Path(path).read_text())
        task = make_task(s["task"])
        bound = task.max_body_speed
        for name, rows in s["per_episode"].items():
            flagged = ["reached" in r["failure"] for r in rows]
            normal = [r["peak_body_speed"] for r, f in zip(rows, flagged, strict=True) if not f]
            top = max(normal) if normal else float("nan")
            print(f"{path} {s['task']} {name}: peaks m/s", " ".join(
                f"{r['peak_body_speed']:.2f}{'!' if f else ''}" for r, f in zip(rows, flagged, strict=True)))
            print(f"  normal max {top:.2f} m/s ({rows[int(np.argmax([r['peak_body_speed'] for r in rows]))]['peak_body']}"
                  f" the fastest), median {np.median(normal):.2f}; flagged {sum(flagged)}/{len(rows)}; bound "
                  + (f"{bound:g} m/s = {bound / top:.1f}x the normal max" if bound else "none"))


def datasets(paths: list[str]) -> None:
    for path in paths:
        ds = Dataset(path)
        task = make_task(ds.info["twinloop"]["task"])
        m = task.model
        d = mujoco.MjData(m)
        peaks = []
        for ep in ds.episodes():
            top = 0.0
            for q, v in zip(ep.world_qpos, ep.world_qvel, strict=True):
                d.qpos[:], d.qvel[:] = q, v
                mujoco.mj_forward(m, d)
                top = max(top, float(body_speeds(m, d).max()))
            peaks.append(top)
        print(f"{path} {task.name}: tick-boundary peaks m/s", " ".join(f"{p:.2f}" for p in peaks))


def cost(repeats: int = 200) -> None:
    print("task          world tick (ms): watched  unwatched  (+%)")
    for name in TASKS:
        task = make_task(name)
        world = ShiftedWorld(task, severity=2, seed=0)
        obs = world.reset(0)
        hold = task.hold_action(task.state_from_obs(obs))
        times = {}
        for watched in (True, False):
            if not watched:
                world._watch = lambda: None  # the same world, the watch off
            world.reset(0)
            t0 = time.perf_counter()
            for _ in range(repeats):
                world.step(hold)
            times[watched] = (time.perf_counter() - t0) / repeats * 1e3
        print(f"{name:13s} {times[True]:22.3f} {times[False]:10.3f}  ({100 * (times[True] / times[False] - 1):+.0f}%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--summaries", nargs="*", default=[], help="summary.json files of twinloop run")
    ap.add_argument("--datasets", nargs="*", default=[], help="recorded episode folders (RUN/episodes/NAME)")
    ap.add_argument("--cost", action="store_true", help="time a world tick with and without the watch")
    a = ap.parse_args()
    summaries(a.summaries)
    datasets(a.datasets)
    if a.cost:
        cost()


if __name__ == "__main__":
    main()
