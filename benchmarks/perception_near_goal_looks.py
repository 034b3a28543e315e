"""Where a push-t perception model's error near the goal comes from: its own reading or the look.

Near-goal states (``Task.near_goal_state``, seed 5) rendered with the twin's own look through a
perfectly placed camera, then under the severity-2 appearance of each world seed given, whole,
with only its camera pose errors, and with only its colours, light, texture, noise and blur;
each model's mean position and yaw error against the true pose.

    python benchmarks/perception_near_goal_looks.py [--models push-t OTHER.pt] [--worlds 0 8]
        [--states 300] [--out benchmarks/perception_near_goal_looks.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np


def renders(task, cam, look, states: int, seed: int):
    from twinloop.perception.train import keypoints_of

    idx, _ = keypoints_of(task)
    rng = np.random.default_rng(seed)
    cam.set_appearance(look)
    images, truth = [], []
    for _ in range(states):
        s = task.near_goal_state(rng)
        images.append(next(iter(cam.render(s[: task.model.nq], rng).values())))
        cam.data.qvel[:] = 0.0
        truth.append(task.obs_from_data(cam.model, cam.data)[idx])
    return np.array(images), np.array(truth)


def main() -> None:
    import torch

    from twinloop.perception import load_perception
    from twinloop.perception.train import errors
    from twinloop.tasks import make_task
    from twinloop.worlds.camera import Appearance, SceneCamera, draw_appearance, task_cameras

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["push-t"])
    ap.add_argument("--worlds", nargs="+", type=int, default=[0, 8])
    ap.add_argument("--states", type=int, default=300)
    ap.add_argument("--out", default="benchmarks/perception_near_goal_looks.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    task = make_task("push-t")
    models = {m: load_perception(m, "push-t") for m in args.models}
    cam = SceneCamera(task.model, task_cameras(task)[:1])
    looks = {"twin look, perfect camera": Appearance()}
    for w in args.worlds:
        full = draw_appearance(task.model, np.random.default_rng([w, 7]), 2)
        looks[f"world {w}: whole appearance"] = full
        looks[f"world {w}: camera pose errors only"] = Appearance(aim=full.aim, distance=full.distance,
                                                                  azimuth=full.azimuth, elevation=full.elevation)
        looks[f"world {w}: look only"] = dataclasses.replace(full, aim=(0.0, 0.0, 0.0), distance=0.0, azimuth=0.0,
                                                             elevation=0.0)
    rows = {}
    for name, look in looks.items():
        images, truth = renders(task, cam, look, args.states, 5)
        rows[name] = {m: {k: round(v, 3) for k, v in errors(model, model.predict_batch(images), truth).items()
                          if "mean" in k} for m, model in models.items()}
        print(name, rows[name], flush=True)
    cam.close()
    out = {"command": "python benchmarks/perception_near_goal_looks.py --models " + " ".join(args.models)
           + " --worlds " + " ".join(map(str, args.worlds)) + f" --states {args.states}",
           "states": args.states, "rows": rows}
    with open(args.out, "w") as f:
        f.write(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
