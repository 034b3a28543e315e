"""Calibration from camera images against calibration from kinematic data, on the same episodes.

Push-t's shifted world (hidden block friction, mass and damping, a 20 ms actuation delay, sensor
noise) seen through its camera under an appearance shift the twin does not know (both drawn by
the world seed, at ``--severity``). Each excitation episode (``task.excitation``: approach,
push through the block, back off, in new directions) is recorded twice at once, so both records
hold the same physical episode:

- **kinematic**: the world's own observation (the block's pose from a tracker with the world's
  sensor noise), what ``twinloop calibrate`` fits from a state-observing run;
- **images**: the pusher's own state plus the block's pose read from the camera's image by the
  shipped perception model, and its rates, exactly what a ``twinloop run --observe rgb`` run
  records (``CameraEstimator.complete``), so ``twinloop calibrate`` on a camera run's episodes
  fits the same data.

The excitation acts on the kinematic observation in both records (it needs the block's pose,
and so the two records are one episode). Each set is fitted with the task's own calibration
defaults (what ``twinloop calibrate`` runs); reported per world: each parameter's relative error
against the hidden truth, whether its 95% interval holds it, the NOT IDENTIFIABLE flags, the
estimated delay, and the fit's held-out prediction error as the fit reports it.

    python benchmarks/calibrate_from_images.py [--worlds 0 1 2] [--episodes 10] [--ticks 60]
        [--out benchmarks/calibrate_from_images.json]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from twinloop.calib.fit import calibrate as fit
from twinloop.calib.windows import Trajectory
from twinloop.cli.generate import task_defaults
from twinloop.perception import CameraEstimator, load_perception
from twinloop.perception.model import shipped
from twinloop.run.build import controller_in_world
from twinloop.run.calibrate import CalibrateConfig
from twinloop.run.compare import RunConfig
from twinloop.run.config import configure
from twinloop.run.experiment import run_episode
from twinloop.tasks import make_task
from twinloop.tasks.scripted import pusher_excitation
from twinloop.worlds.camera import CameraWorld, task_cameras, with_size
from twinloop.worlds.shifted import ShiftedWorld


class Tap:
    """A world that keeps its last (kinematic) observation before a camera world masks it."""

    def __init__(self, world):
        self.world, self.last = world, None

    def __getattr__(self, name):
        return getattr(self.world, name)

    def reset(self, seed):
        self.last = self.world.reset(seed)
        return self.last

    def step(self, action):
        self.last, info = self.world.step(action)
        return self.last, info


def record_both(task, seen: CameraWorld, tap: Tap, est: CameraEstimator, seed: int, ticks: int, spread: float):
    """One excitation episode as ``(kinematic, images)`` trajectories of the same physical run."""
    policy = pusher_excitation(task, seed, reach=0.09, spread=spread)
    est.reset(seed)
    obs = seen.reset(seed)
    kin, img, actions = [], [], []
    for k in range(ticks + 1):
        kin.append(task.state_from_obs(tap.last))
        img.append(task.state_from_obs(est.complete(obs)))
        if k == ticks:
            break
        a = np.asarray(policy(tap.last, k), dtype=float)
        actions.append(a)
        obs, _ = seen.step(a)
    return (Trajectory(np.array(kin), np.array(actions), seed), Trajectory(np.array(img), np.array(actions), seed))


class Both:
    """A camera world that records each tick twice: the state read from its images (a second
    camera estimator, the same deterministic model the controller reads with) and the state the
    world's own (kinematic) observation gives; and the actions sent."""

    def __init__(self, seen: CameraWorld, est: CameraEstimator):
        self.seen, self.est, self.tap = seen, est, seen.world
        self.records: list[tuple[list, list, list]] = []
        self.task = seen.task

    def __getattr__(self, name):
        return getattr(self.seen, name)

    def _keep(self, obs):
        kin, img, _ = self.records[-1]
        kin.append(self.task.state_from_obs(self.tap.last))
        img.append(self.task.state_from_obs(self.est.complete(obs)))
        return obs

    def reset(self, seed):
        self.est.reset(seed)
        self.records.append(([], [], []))
        return self._keep(self.seen.reset(seed))

    def step(self, action):
        self.records[-1][2].append(np.asarray(action, dtype=float))
        obs, info = self.seen.step(action)
        return self._keep(obs), info


def record_refined(w: int, episodes: int, ticks: int, severity: int):
    """``episodes`` episodes of ``twinloop run --observe rgb``'s refined controller (push-t's
    defaults, world seed ``w``) as ``(kinematic, images)`` trajectory pairs."""
    cfg = RunConfig(task="push-t", observe="rgb", severity=severity, world_seed=w, seed=w, record=False, video=False)
    world, ctl = controller_in_world(cfg, "refined")
    world.world = Tap(world.world)
    both = Both(world, CameraEstimator(world.task, load_perception("push-t", "push-t")))
    for i in range(episodes):
        run_episode(both, ctl, seed=w * 100000 + i, max_ticks=ticks, record=False, stop_on_success=False)
    pairs = []
    for i, (kin, img, acts) in enumerate(both.records):
        n = len(acts)
        pairs.append((Trajectory(np.array(kin[:n + 1]), np.array(acts), i), Trajectory(np.array(img[:n + 1]), np.array(acts), i)))
    world.close()
    return pairs


def fit_row(task, trajs, cfg, truth: dict) -> dict:
    """The task's default fit of ``trajs``: each parameter against the hidden truth."""
    post = fit(task, trajs, task.param_space(), config=cfg.calib)
    params = {}
    for i, name in enumerate(post.names):
        lo, hi = post.interval[i]
        params[name] = {"truth": truth[name], "estimate": float(post.estimate[i]),
                        "error": float(post.estimate[i] / truth[name] - 1), "interval": [float(lo), float(hi)],
                        "covered": bool(lo <= truth[name] <= hi), "identifiable": bool(post.identifiable[i])}
    return {"params": params, "delay_steps": post.delay_steps, "seconds": round(post.seconds, 1),
            "holdout_error": list(post.holdout_error), "kept_previous": bool(post.kept_previous),
            "fitted": None if post.fitted is None else [float(v) for v in post.fitted]}


def shipped_sha(name: str) -> str:
    """The shipped perception model's SHA-256 (which model read the images)."""
    return json.loads((shipped(name) or Path(name)).with_suffix(".json").read_text())["sha256"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--ticks", type=int, default=60)
    ap.add_argument("--severity", type=int, default=2)
    ap.add_argument("--source", choices=("excite", "refined"), default="refined",
                    help="the episodes: the task's excitation, or the camera run's refined controller")
    ap.add_argument("--spread", type=float, default=0.8, help="push directions within this many radians of the "
                    "table's middle (the task's excitation: 0.8)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "calibrate_from_images.json"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    task = make_task("push-t")
    cfg, _ = configure(CalibrateConfig, task_defaults("push-t"))
    perception = load_perception("push-t", "push-t")
    rows = []
    for w in args.worlds:
        tap = Tap(ShiftedWorld(task, severity=args.severity, seed=w))
        truth = dict(tap.world.describe()["params"])
        if args.source == "refined":
            pairs = record_refined(w, args.episodes, args.ticks, args.severity)
        else:
            seen = CameraWorld(tap, args.severity, w, with_size(task_cameras(task), perception.meta.size))
            est = CameraEstimator(task, perception)
            pairs = [record_both(task, seen, tap, est, 1000 * w + i, args.ticks, args.spread)
                     for i in range(args.episodes)]
            seen.close()
        img_err = np.concatenate([np.linalg.norm(p[1].states[:, 2:4] - p[0].states[:, 2:4], axis=1) for p in pairs])
        row = {"world_seed": w, "truth": truth, "image_vs_tracker_block_mm": {
            "mean": float(1000 * img_err.mean()), "p95": float(1000 * np.percentile(img_err, 95))}}
        for name, j in (("kinematic", 0), ("images", 1)):
            row[name] = fit_row(task, [p[j] for p in pairs], cfg, truth)
            errs = {k: round(100 * v["error"], 1) for k, v in row[name]["params"].items()}
            print(f"world {w} {name:9s} errors % {errs} covered "
                  f"{[v['covered'] for v in row[name]['params'].values()]} delay {row[name]['delay_steps']}", flush=True)
        rows.append(row)
    out = {"command": "python benchmarks/calibrate_from_images.py " + " ".join(
        f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in vars(args).items() if k != "out"),
        "source": args.source, "task": "push-t", "perception_sha256": shipped_sha("push-t"), "severity": args.severity, "episodes": args.episodes, "ticks": args.ticks,
        "calib": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.calib.__dict__.items()}, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, default=str)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
