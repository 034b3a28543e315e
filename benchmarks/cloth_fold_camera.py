"""Where the shipped cloth-fold perception model errs, and what that does to a fold.

1. The published evaluation's frames (``twinloop perception evaluate --checkpoint cloth-fold
   --severity 2 --eval-worlds 2000,...,2009 --eval-states 100 --seed 0``: the same renders),
   broken down: per keypoint, horizontal against vertical error, lifted frames (a point more
   than 2 cm up) against towels on the table.
2. Recorded camera runs (``twinloop run --recipe cloth-fold-rgb --out DIR``): on every tick where
   the world's corner a is held (grasp on, the corner within the capture radius of the fingers),
   how far the image reads it from where it is, and how often it is read farther than the
   capture radius from the fingers, where the scripted fold takes it for dropped.

    MUJOCO_GL=egl python benchmarks/cloth_fold_camera.py --runs DIR [DIR ...]
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import numpy as np

from twinloop.perception import load_perception
from twinloop.perception.train import held_out_renders
from twinloop.tasks import make_task


def breakdown(task, model, worlds=range(2000, 2010), states: int = 100, seed: int = 0) -> dict:
    """Errors (mm) of ``model`` on the published evaluation's reset and manipulated frames."""
    names = [k.name for k in task.keypoints]
    out = {}
    for label, near in (("reset", 0.0), ("manipulated", 1.0)):
        images, truth = held_out_renders(task, model, 2, worlds, states, seed, near_goal=near)
        d = (model.predict_batch(images) - truth).reshape(len(truth), 9, 3)
        e = np.linalg.norm(d, axis=2)
        lifted = truth.reshape(len(truth), 9, 3)[:, :, 2].max(axis=1) > 0.02
        out[label] = {
            "frames": len(truth), "mean_mm": 1000 * e.mean(), "p95_mm": 1000 * np.percentile(e.mean(axis=1), 95),
            "horizontal_mean_mm": 1000 * np.linalg.norm(d[:, :, :2], axis=2).mean(),
            "vertical_mean_mm": 1000 * np.abs(d[:, :, 2]).mean(),
            "per_point_mean_mm": {n: round(1000 * float(v), 2) for n, v in zip(names, e.mean(axis=0), strict=True)},
            "lifted_frames": int(lifted.sum()),
            "lifted_mean_mm": 1000 * float(e[lifted].mean()) if lifted.any() else None,
            "on_table_mean_mm": 1000 * float(e[~lifted].mean())}
    return out


def held_corner(task, run: str) -> dict:
    """The carried corner as a recorded camera run read it, per controller."""
    import pyarrow.parquet as pq

    a = [k.name for k in task.keypoints].index(task.grasp_point)
    out = {}
    for ctl in ("base", "refined"):
        errs, misread = [], 0
        for f in sorted(glob.glob(f"{run}/episodes/{ctl}/data/**/*.parquet", recursive=True)):
            tab = pq.read_table(f).to_pydict()
            obs, world_q = np.array(tab["observation.state"]), np.array(tab["world.qpos"])
            for o, q in zip(obs, world_q, strict=True):
                grip, truth = o[:3], task.keypoint_positions(q)[a]
                if o[6] > 0.5 and np.linalg.norm(truth - grip) < task.capture_radius:
                    read = o[7 + 3 * a: 10 + 3 * a]
                    errs.append(np.linalg.norm(read - truth))
                    misread += int(np.linalg.norm(read - grip) >= task.capture_radius)
        e = 1000 * np.array(errs)
        out[ctl] = {"held_ticks": len(errs), "read_beyond_capture_radius": misread,
                    "corner_error_mean_mm": float(e.mean()), "corner_error_p95_mm": float(np.percentile(e, 95))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="*", default=[], help="recorded camera runs (twinloop run --observe rgb --out DIR)")
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    args = ap.parse_args()
    task = make_task("cloth-fold")
    model = load_perception("cloth-fold", "cloth-fold")
    result = {"command": "python benchmarks/cloth_fold_camera.py --runs " + " ".join(args.runs),
              "evaluation_frames": breakdown(task, model),
              "runs": {Path(r).name: held_corner(task, r) for r in args.runs}}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
