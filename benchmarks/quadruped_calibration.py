"""quadruped-walk calibration: the actuation delay judged vs profiled, the error units vs
each state component weighed by its noise, and the fit polished with a finer secant.

For each world seed (severity 2: every such world delays the actuators by 4 physics steps,
20 ms, and observes with noise 0.5 mm, 0.005 rad, 0.01 m/s and rad/s), the robot walks 10
episodes refined in the nominal twin (``twinloop run --world-seed W --seed 7 --episodes 10``:
episode seeds 700000-700009, the findings' walking data), and ``twinloop calibrate``'s fit (its
defaults: delay estimated, errors in variables, 20% of the episodes held out) recovers the
five parameters under each setting asked for:

- ``judged``: the delay with the smallest objective at the nominal parameters, judged again at
  the half-budget fit, and the parameters fitted at it (``delay_profile=0``); the error units
  (1 mm, 0.05 rad, 0.02 m/s), the noise on the recorded starts estimated from the data;
- ``profiled``: that fit, and fits with the delay held at one step either side, keeping the one
  that predicts the held-out episodes best (``delay_profile=1``); otherwise as ``judged``;
- ``noise``: as ``profiled``, with the positions compared (the trunk's position and
  orientation, the joint angles), each weighed by its noise, the sensors' specification
  (``weigh_by_noise`` with ``start_noise=(0.0005, 0.005, 0.01)``, also the start noise errors in
  variables profiles out), and the velocities not compared (``use_velocity=False``). The error
  units leave the trunk's height and orientation at unit scale (1 m), so the fit never sees how
  the trunk's mass answers the legs' forces; weighed by their noise, the velocities take over
  the fit instead: at the true parameters a window's joint rates miss by 15-50 noise stds
  (its start's noise, through stiff contacts and servos), its positions by 1-2.
- ``polished``: as ``noise``, then least squares again from its fit within 300 more
  evaluations, the Jacobian a secant over 0.1 prior stds instead of 0.2 (``polish_evals=300``,
  ``polish_step=0.1``), the start noise's sensitivity measured again at the fit first.

Reported per world and setting: the delay chosen, each parameter's estimate and relative error,
whether its 95% interval holds the truth.

Selection rule (the first, before this script's first run): tuning worlds 5 and 6 (not the
recipe's world 3); the setting whose largest relative error over trunk mass and motor strength,
averaged over the two tuning worlds, is smaller becomes the quadruped's default; a tie keeps
``judged``. It chose ``profiled`` (``benchmarks/quadruped_calibration_5-6.json``).

Selection rule for ``noise`` (written before any run of this script with it; the diagnosis
before it fitted with the delay given, 4 steps, on the tuning worlds only): tuning worlds 5 and
6, and 12 and 15 (the first world seeds after 8 whose trunk is heavier and motors weaker than
nominal, the kind of worlds 3 and 7 where ``profiled`` misses; 5 and 6 are not of that kind).
``noise`` becomes the quadruped's default when, over those four worlds, its largest relative
error over trunk mass and motor strength is smaller on average than ``profiled``'s and both
intervals cover the truth on at least as many worlds; otherwise ``profiled`` stays. The
``profiled`` rows of worlds 5 and 6 are those of the first rule's run. The default is then run
once on the reported worlds 3 (the recipe's), 7 and 8, none of them tuned on.

Selection rule for ``polished`` (written before any run of this script with it). The diagnosis
before it: the objective of the ``noise`` fits (whitened as the fit whitens, at the delay found)
is lower at the true parameters than at the fit on worlds 5, 12, 15 (tuning) and 3, 7
(reported), most on world 7 (by 6%, where mass was 6.3% off), higher on 6 and 8: least squares
with its 0.2-prior-std secant stops short of the minimum. Polishing the recorded ``noise`` fits
of tuning worlds 12 and 15 (delay 4, 300 evaluations) with a secant of 0.05, 0.1 prior stds, or
CMA-ES of step 0.02, lowered the objective below the truth's in every case; the largest of the
mass and strength errors, averaged over the two, was 0.85% (0.05), 0.35% (0.1) and 1.2%
(CMA-ES) against 2.3% unpolished, so 0.1 it is. ``polished`` becomes the quadruped's default
when, over tuning worlds 5, 6, 12 and 15, its largest relative error over trunk mass and motor
strength is smaller on average than ``noise``'s (2.0%, the runs of the previous rule) and both
intervals cover the truth on at least as many worlds (4 of 4); otherwise ``noise`` stays. The
rule's setting is then run once on the reported worlds 3, 7 and 8 and on 21 and 22, world seeds
no run of this project had used (both heavy and weak, the hard kind: trunk 8.69 and 8.79 kg,
motors 55.1 and 56.9 N m/rad), none of them tuned on; their walking episodes are collected as
for the others (episode seeds 700000-700009).

    python benchmarks/quadruped_calibration.py --worlds 5 6 --settings judged profiled --out bench-quad
    python benchmarks/quadruped_calibration.py --worlds 12 15 --settings noise profiled --out bench-quad
    python benchmarks/quadruped_calibration.py --worlds 5 6 --settings noise --out bench-quad
    python benchmarks/quadruped_calibration.py --worlds 3 7 8 --settings noise --out bench-quad
    python benchmarks/quadruped_calibration.py --worlds 5 6 12 15 --settings polished --out bench-quad
    python benchmarks/quadruped_calibration.py --worlds 3 7 8 21 22 --settings polished --out bench-quad
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
SENSORS = (0.0005, 0.005, 0.01)  # the severity-2 world's observation noise: m, rad, m/s and rad/s
SETTINGS = {
    "judged": {"delay_profile": 0, "weigh_by_noise": False, "start_noise": None, "use_velocity": True},
    "profiled": {"delay_profile": 1, "weigh_by_noise": False, "start_noise": None, "use_velocity": True},
    "noise": {"delay_profile": 1, "weigh_by_noise": True, "start_noise": SENSORS, "use_velocity": False},
    "polished": {"delay_profile": 1, "weigh_by_noise": True, "start_noise": SENSORS, "use_velocity": False,
                 "polish_evals": 300, "polish_step": 0.1},
}


def walking(out: Path, world: int) -> Path:
    """The refined walking episodes of world seed ``world`` (collected once)."""
    folder = out / f"walking-{world}"
    if not (folder / "summary.json").exists():
        subprocess.run([sys.executable, "-m", "twinloop", "run", "--task", TASK, "--world", "shifted", "--world-seed",
                        str(world), "--seed", "7", "--episodes", "10", "--no-video", "--out", str(folder)], check=True)
    return folder / "episodes" / "refined"


def fit_row(task, episodes, truth: dict, world: int, setting: str) -> dict:
    cfg = replace(CalibrateConfig().calib, **SETTINGS[setting])  # the library's, not the task's, defaults
    post = calibrate(task, episodes, config=cfg)
    row = {"world_seed": world, "setting": setting, "delay_profile": cfg.delay_profile, "delay_steps": post.delay_steps,
           "seconds": round(post.seconds, 1), "n_evals": post.n_evals, "params": {}}
    for i, name in enumerate(post.names):
        lo, hi = post.interval[i]
        err = post.estimate[i] / truth[name] - 1 if truth[name] else float("nan")
        row["params"][name] = {"truth": truth[name], "estimate": float(post.estimate[i]), "interval": [float(lo), float(hi)],
                               "error": float(err), "covered": bool(lo <= truth[name] <= hi)}
    row["key_error"] = max(abs(row["params"][k]["error"]) for k in KEY)
    row["key_covered"] = all(row["params"][k]["covered"] for k in KEY)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[5, 6])
    ap.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=["judged", "profiled"])
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
        for s in args.settings:
            rows.append(fit_row(task, episodes, truth, w, s))
            r = rows[-1]
            errs = ", ".join(f"{k} {v['error']:+.1%}{'' if v['covered'] else ' (not covered)'}" for k, v in r["params"].items())
            print(f"world {w} {s}: delay {r['delay_steps']}, {errs} [{r['seconds']} s]", flush=True)
    for s in args.settings:
        key = [r["key_error"] for r in rows if r["setting"] == s]
        covered = sum(r["key_covered"] for r in rows if r["setting"] == s)
        print(f"{s}: mean over worlds of the largest mass/strength error {np.mean(key):.1%}; "
              f"both covered on {covered} of {len(key)} worlds")
    path = out / f"quadruped_calibration_{'-'.join(map(str, args.worlds))}_{'-'.join(args.settings)}.json"
    path.write_text(json.dumps({"worlds": args.worlds, "settings": args.settings, "rows": rows}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
