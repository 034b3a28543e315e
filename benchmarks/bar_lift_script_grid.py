"""How bar-lift's scripted base was tuned: on the nominal world only.

A grid over the finger opening target ``grip`` (m; the bar is 4 cm wide, so a smaller target
squeezes harder) and the ``lift`` (m the hands rise above where they closed), 10 episodes
each in the nominal world (seeds 90000-90009, never an evaluation seed), ranked by successes,
then mean ticks, then the gentlest grip (the largest target: the least squeeze that lifts the
nominal bar, as for a fragile object), then the smallest lift. The rule was written before any
bar-lift episode ran in a shifted world; the winner is ``LIFT`` in ``tasks/bar_lift.py``.

    python benchmarks/bar_lift_script_grid.py
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from twinloop.tasks import make_task
from twinloop.tasks.bar_lift import LiftScript
from twinloop.worlds import SimWorld

GRID = {"grip": (0.0, 0.01, 0.02, 0.025, 0.03, 0.035), "lift": (0.09, 0.1, 0.11, 0.13)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    task = make_task("bar-lift")
    world = SimWorld(task)
    rows = []
    for values in itertools.product(*GRID.values()):
        script = LiftScript(task, **dict(zip(GRID, values, strict=True)))
        ok, ticks = 0, []
        for seed in range(90000, 90010):
            obs, done, n = world.reset(seed), False, 0
            while not done and n < task.max_ticks:
                obs, info = world.step(script.propose(obs, task.state_from_obs(obs))[0])
                n, done = n + 1, task.success(info["qpos"])
            ok += done
            ticks.append(n)
        rows.append((ok, -np.mean(ticks), values[0], -values[1]))
    print(f"bar-lift: best of {len(rows)} scripts (successes / 10, mean ticks, grip m, lift m)")
    for ok, ticks, grip, lift in sorted(rows, reverse=True)[: args.top]:
        print(f"  {ok}/10  {-ticks:5.1f}  {grip:.3f}  {-lift:.2f}")


if __name__ == "__main__":
    main()
