"""quadruped-walk calibration: the actuation delay judged at the starting point vs profiled.

For each world seed (severity 2: every such world delays the actuators by 4 physics steps,
20 ms), the robot walks 10 episodes refined in the nominal twin (``twinloop run --world-seed W
--seed 7 --episodes 10``: episode seeds 700000-700009, the findings' walking data), and
``twinloop calibrate``'s fit (its defaults: delay estimated, errors in variables, noise from
the data, 20% of the episodes held out) recovers the five parameters twice:

- ``delay_profile=0`` (the library's default): the delay with the smallest objective at the
  nominal parameters, judged again at the half-budget fit, and the parameters fitted at it;
- ``delay_profile=1``: that fit, and fits with the delay held at one step either side of its
  delay, keeping the one that predicts the held-out episodes best.

Reported per world and setting: the delay chosen, each parameter's estimate and relative error,
whether its 95% interval holds the truth.

Selection rule, fixed before any run of this script: the tuning worlds are seeds 5 and 6 (not
the recipe's world 3). The setting whose largest relative error over trunk mass and motor
strength, averaged over the two tuning worlds, is smaller becomes the quadruped's default
(``QuadrupedWalk.defaults``); a tie keeps 0. Its numbers are then reported on world 3 (the
recipe's) and world 7, on which nothing was tuned.

    python benchmarks/quadruped_calibration.py --worlds 5 6 --out bench-quad
    python benchmarks/quadruped_calibration.py --worlds 3 7 --out bench-quad
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from twinloop.calib.fit import calibrate
from twinloop.data import Dataset
from twinloop.run.calibrate import CalibrateConfig
from twinloop.tasks import make_task

TASK = "quadruped-walk"
KEY = ("trunk_mass", "motor_strength")


def walking(out: Path, world: int) -> Path:
    """The refined walking episodes of world seed ``world`` (collected once)."""
    folder = out / f"walking-{world}"
    if not (folder / "summary.json").exists():
        subprocess.run([sys.executable, "-m", "twinloop", "run", "--task", TASK, "--world", "shifted", "--world-seed",
                        str(world), "--seed", "7", "--episodes", "10", "--no-video", "--out", str(folder)], check=True)
    return folder / "episodes" / "refined"


def fit_row(task, episodes, truth: dict, world: int, profile: int) -> dict:
    cfg = replace(CalibrateConfig().calib, delay_profile=profile)
    post = calibrate(task, episodes, config=cfg)
    row = {"world_seed": world, "delay_profile": profile, "delay_steps": post.delay_steps,
           "seconds": round(post.seconds, 1), "n_evals": post.n_evals, "params": {}}
    for i, name in enumerate(post.names):
        lo, hi = post.interval[i]
        err = post.estimate[i] / truth[name] - 1 if truth[name] else float("nan")
        row["params"][name] = {"truth": truth[name], "estimate": float(post.estimate[i]), "interval": [float(lo), float(hi)],
                               "error": float(err), "covered": bool(lo <= truth[name] <= hi)}
    row["key_error"] = max(abs(row["params"][k]["error"]) for k in KEY)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[5, 6])
    ap.add_argument("--profiles", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--out", default="bench-quadruped-calibration")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task = make_task(TASK)
    rows = []
    for w in args.worlds:
        ds = Dataset(walking(out, w))
        truth = ds.info["twinloop"]["world"]["params"]
        episodes = ds.episodes()
        for p in args.profiles:
            rows.append(fit_row(task, episodes, truth, w, p))
            r = rows[-1]
            errs = ", ".join(f"{k} {v['error']:+.1%}{'' if v['covered'] else ' (not covered)'}" for k, v in r["params"].items())
            print(f"world {w} delay_profile={p}: delay {r['delay_steps']}, {errs} [{r['seconds']} s]", flush=True)
    for p in args.profiles:
        key = [r["key_error"] for r in rows if r["delay_profile"] == p]
        print(f"delay_profile={p}: mean over worlds of the largest mass/strength error {np.mean(key):.1%}")
    path = out / f"quadruped_calibration_{'-'.join(map(str, args.worlds))}.json"
    path.write_text(json.dumps({"worlds": args.worlds, "rows": rows}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
