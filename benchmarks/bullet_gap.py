"""The MuJoCo twin fitted to another engine: PyBullet as the world (a structural gap).

For each task (block-push, push-t) the world is :class:`~twinloop.worlds.BulletWorld`: the same
geometry and goal in PyBullet (product friction, a free block, a constraint-driven
force-limited pusher, 1/240 s steps, 1 mm / 0.01 rad observation noise). The twin is the
task with explicit pusher contact pairs (so pusher-block friction is a parameter of its own).

1. Record excitation episodes in the world (``--fit-episodes``, 60 ticks) and fit the twin's
   rich parameter space with CMA-ES: block friction (block-floor), pusher friction
   (pusher-block pairs), block mass, block damping, and the stage's force limit, kp, kv.
2. The gap (Gaussian KL and MMD of one-tick transitions, ``twinloop.calib.gap``) on fresh
   excitation episodes, before (nominal twin) and after (calibrated), and the same for the
   kinematic-pusher twin (a structural option instead of fitted gains).
3. Refined success (MPPI, K=64, the task's scripted proposer) in the world with the nominal
   and with the calibrated twin, on the standard seeds of ``run_comparison``
   (``episode_seeds``), with Wilson intervals.

    python benchmarks/bullet_gap.py                        # both tasks
    python benchmarks/bullet_gap.py --tasks block-push --episodes 20
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from twinloop.calib import CalibConfig, calibrate, gaps, record_trajectory
from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.params import Param, ParamSpace
from twinloop.plan import make_optimizer
from twinloop.run.compare import RunConfig, episode_seeds
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import BulletWorld


def rich_space(task) -> ParamSpace:
    """The task's space plus the pusher stage (both axes share each value)."""
    m = task.model
    kp, kv = float(m.actuator_gainprm[0, 0]), float(-m.actuator_biasprm[0, 2])
    limit = float(m.actuator_forcerange[0, 1])
    axes = ("pusher_x", "pusher_y")
    return task.param_space() + ParamSpace((
        Param("stage_forcelimit", tuple(f"actuator:{a}/forcelimit" for a in axes), 0.5, 10 * limit, limit, limit),
        Param("stage_kp", tuple(f"actuator:{a}/kp" for a in axes), kp / 10, kp * 20, kp, kp * 2),
        Param("stage_kv", tuple(f"actuator:{a}/kv" for a in axes), kv / 10, kv * 10, kv, kv),
    ))


def success_rate(task, world, space, params, seeds, args) -> dict:
    twin = make_twin("mujoco", task.model, space)
    refiner = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=64, horizon=1.0),
                      params=None if params is None else np.atleast_2d(params))
    ctl = Controller(refiner, task.default_proposer())
    res = [run_episode(world, ctl, s, record=False) for s in seeds]
    k = sum(r.success for r in res)
    lo, hi = wilson(k, len(res))
    return {"successes": k, "episodes": len(res), "rate": k / len(res), "ci": [lo, hi],
            "final_error_median": float(np.median([r.final_error for r in res]))}


def run_task(name: str, args) -> dict:
    task = make_task(name, contacts="pairs")
    world = BulletWorld(task)
    space = rich_space(task)
    t0 = time.perf_counter()
    fit_eps = [record_trajectory(world, task.excitation(s), s, args.ticks) for s in range(args.fit_episodes)]
    eval_eps = [record_trajectory(world, task.excitation(1000 + s), 1000 + s, args.ticks) for s in range(args.eval_episodes)]
    cfg = CalibConfig(method="cma", max_evals=args.max_evals, holdout_fraction=0.25, seed=0)
    post = calibrate(task, fit_eps, space, config=cfg)
    print(post.report())
    out = {"task": name, "space": space.names, "nominal": space.nominal.tolist(), "estimate": post.estimate.tolist(),
           "fitted": post.fitted.tolist(), "kept_previous": post.kept_previous, "identifiable": post.identifiable.tolist(),
           "interval": post.interval.tolist(), "holdout_error": list(post.holdout_error),
           "train_error": list(post.train_error), "calibration_s": post.seconds}
    twin = make_twin("mujoco", task.model, space)
    out["gap"] = {}
    for label, x in (("nominal", space.nominal), ("calibrated", post.estimate)):
        g = gaps(task, eval_eps, x[None], twin=twin, space=space)
        out["gap"][label] = {m: g[m].to_dict() for m in ("kl", "mmd")}
    # a structural option instead of fitted gains: the kinematic stage, nominal and calibrated
    kin = make_task(name, contacts="pairs", pusher="kinematic")
    kin_space = kin.param_space()
    kin_post = calibrate(kin, fit_eps, kin_space, config=cfg)
    kin_twin = make_twin("mujoco", kin.model, kin_space)
    for label, x in (("kinematic nominal", kin_space.nominal), ("kinematic calibrated", kin_post.estimate)):
        g = gaps(kin, eval_eps, x[None], twin=kin_twin, space=kin_space)
        out["gap"][label] = {m: g[m].to_dict() for m in ("kl", "mmd")}
    out["kinematic_estimate"] = dict(zip(kin_space.names, kin_post.estimate.tolist(), strict=True))
    seeds = episode_seeds(RunConfig(task=name, episodes=args.episodes))
    out["success"] = {"nominal": success_rate(task, world, space, None, seeds, args),
                      "calibrated": success_rate(task, world, space, post.estimate, seeds, args)}
    out["seconds"] = time.perf_counter() - t0
    world.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["block-push", "push-t"])
    p.add_argument("--fit-episodes", type=int, default=8)
    p.add_argument("--eval-episodes", type=int, default=6)
    p.add_argument("--ticks", type=int, default=60)
    p.add_argument("--max-evals", type=int, default=400)
    p.add_argument("--episodes", type=int, default=10, help="refined episodes per twin")
    p.add_argument("--json", default="", help="also write the results here")
    args = p.parse_args()
    rows = []
    for name in args.tasks:
        rows.append(run_task(name, args))
        r = rows[-1]
        print(json.dumps({k: r[k] for k in ("task", "gap", "success", "estimate", "kept_previous")}, indent=1))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "rows": rows}, f, indent=2)
    print("\n| task | twin | KL gap [95% CI] | MMD gap | refined success [95% CI] |\n|---|---|---|---|---|")
    for r in rows:
        for label, g in r["gap"].items():
            s = r["success"].get(label.replace("kinematic ", "~"), None)
            succ = f"{s['successes']}/{s['episodes']} [{s['ci'][0]:.0%}, {s['ci'][1]:.0%}]" if s else "-"
            print(f"| {r['task']} | {label} | {g['kl']['value']:.3f} [{g['kl']['ci'][0]:.3f}, {g['kl']['ci'][1]:.3f}] | "
                  f"{g['mmd']['value']:.4f} | {succ} |")


if __name__ == "__main__":
    main()
