"""Learned twins on push-t in the shifted world: multi-step prediction error and refined success.

Data (all recorded in ``ShiftedWorld(push-t, severity 2, seed 0)``, observation noise included):
excitation episodes (``task.excitation``) and episodes of the refined controller
(scripted + MPPI, K=16, nominal twin), 60 ticks each, on training seeds; the same kinds on other
seeds are held out. Twins compared:

- ``mujoco``: the nominal MuJoCo twin;
- ``calibrated``: MuJoCo with parameters fitted (CMA) to the training excitation episodes;
- ``learned``: a dynamics ensemble pretrained on the same kinds of episodes recorded in the
  nominal twin, then trained on the world's;
- ``hybrid``: the calibrated MuJoCo twin plus a residual learned from the world's episodes.

Reported: block position error (mm) and yaw error (deg) of open-loop predictions from recorded
states, replaying the recorded actions, at horizons of 1, 2, 5, 10, 20 ticks (mean over start
points of the held-out episodes; the recorded states carry the world's 0.5 mm / 0.005 rad noise,
the floor of any error); then refined success in the world (scripted + MPPI, K=16, planning in
each twin) on the standard seeds, with Wilson intervals.

    python benchmarks/learned_twin.py                    # 10 episodes per twin
    python benchmarks/learned_twin.py --episodes 20 --out /tmp/learned
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from twinloop.calib.fit import CalibConfig, calibrate
from twinloop.calib.windows import record_trajectory
from twinloop.run.experiment import run_episodes
from twinloop.run.policy import PolicySpec, policy_controller
from twinloop.stats import wilson
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.twin.learned import EnsembleConfig, HybridTwin, LearnedTwin
from twinloop.worlds import ShiftedWorld, TwinWorld

HORIZONS = (1, 2, 5, 10, 20)
CONTROLLER = "scripted+mppi@k=16"


def record(world, task, seeds, ticks, controller=None):
    """Excitation (``controller=None``) or controller trajectories recorded in ``world``."""
    out = []
    for s in seeds:
        if controller is None:
            policy = task.excitation(s)
        else:
            controller.reset(s)
            policy = lambda obs, k, c=controller: c.act(obs)  # noqa: E731
        out.append(record_trajectory(world, policy, s, ticks))
    return out


def prediction_errors(task, twin, trajs, horizons, stride=5):
    """``{h: (position mm, yaw deg)}``: mean open-loop error after h ticks of recorded actions."""
    S, out = task.substeps, {}
    for h in horizons:
        starts, ctrl, target = [], [], []
        for tr in trajs:
            for k in range(0, len(tr.actions) - h + 1, stride):
                starts.append(tr.states[k])
                ctrl.append(np.repeat(tr.actions[k : k + h], S, axis=0))
                target.append(tr.states[k + h])
        r = twin.rollout_many(np.array(starts), np.array(ctrl))
        q = r.qpos[:, :, -1].mean(axis=0)  # members (or particles) averaged
        t = np.array(target)
        pos = np.linalg.norm(q[:, 2:4] - t[:, 2:4], axis=1)
        dyaw = np.arctan2(np.sin(q[:, 5] - t[:, 5]), np.cos(q[:, 5] - t[:, 5]))
        out[h] = (1000 * float(pos.mean()), float(np.degrees(np.abs(dyaw)).mean()))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", type=int, default=12, help="world episodes of each kind to train on")
    p.add_argument("--held-out", type=int, default=6, help="world episodes of each kind held out")
    p.add_argument("--ticks", type=int, default=60)
    p.add_argument("--episodes", type=int, default=10, help="refined world episodes per twin")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--out", default="/tmp/twinloop-learned")
    a = p.parse_args()
    console = Console()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    task = make_task("push-t")
    world = ShiftedWorld(task, severity=2, seed=0)
    nominal = TwinWorld(task)
    ctl = policy_controller(task, PolicySpec.parse(CONTROLLER))
    t0 = time.perf_counter()
    tr_seeds, ho_seeds = range(1000, 1000 + a.train), range(2000, 2000 + a.held_out)
    train = record(world, task, tr_seeds, a.ticks) + record(world, task, tr_seeds, a.ticks, ctl)
    held = record(world, task, ho_seeds, a.ticks) + record(world, task, ho_seeds, a.ticks, ctl)
    sim = record(nominal, task, range(3000, 3000 + 2 * a.train), a.ticks) + record(nominal, task, range(3000, 3000 + 2 * a.train), a.ticks, ctl)
    console.log(f"recorded {len(train)} train, {len(held)} held-out world and {len(sim)} twin episodes "
                f"({time.perf_counter() - t0:.0f} s)")
    space = task.param_space()
    post = calibrate(task, train[: a.train], space, config=CalibConfig(method="cma", max_evals=400, delay_steps=None))
    cfg = EnsembleConfig(epochs=a.epochs)
    t1 = time.perf_counter()
    learned = LearnedTwin.fit(task.model, train, task.control_period, cfg, pretrain=sim)
    t_learned = time.perf_counter() - t1
    t1 = time.perf_counter()
    hybrid = HybridTwin.fit(task.model, train, task.control_period, cfg, param_space=space, params=post.estimate)
    t_hybrid = time.perf_counter() - t1
    learned.save(out / "learned.pt")
    hybrid.save(out / "hybrid.pt")
    console.log(f"calibrated {dict(zip(space.names, np.round(post.estimate, 3), strict=True))} (truth "
                f"{dict(zip(space.names, np.round(world.hidden_params, 3), strict=True))}); learned twin "
                f"{t_learned:.0f} s (loss {learned.dynamics.losses[0]:.3f} -> {learned.dynamics.losses[-1]:.3f}), "
                f"hybrid {t_hybrid:.0f} s (loss {hybrid.dynamics.losses[0]:.3f} -> {hybrid.dynamics.losses[-1]:.3f})")
    twins = {"mujoco": make_twin("mujoco", task.model, space),
             "calibrated": make_twin("mujoco", space.apply(task.model, post.estimate), space),
             "learned": learned, "hybrid": hybrid}
    errors = {name: prediction_errors(task, tw, held, HORIZONS) for name, tw in twins.items()}
    t = Table(title=f"push-t, shifted world: open-loop prediction error on {len(held)} held-out world episodes "
                    "(block position mm / yaw deg)")
    t.add_column("twin")
    for h in HORIZONS:
        t.add_column(f"{h} tick{'s' if h > 1 else ''}", justify="right")
    for name, e in errors.items():
        t.add_row(name, *(f"{e[h][0]:.2f} / {e[h][1]:.2f}" for h in HORIZONS))
    console.print(t)
    seeds = list(range(a.episodes))  # run_comparison's standard seeds for seed 0
    success = {}
    for name, backend, ckpt in (("mujoco", "mujoco", None), ("learned", "learned", out / "learned.pt"),
                                ("hybrid", "hybrid", out / "hybrid.pt")):
        spec = PolicySpec.parse(CONTROLLER + (f",backend={backend},twin={ckpt}" if ckpt else ""))
        t1 = time.perf_counter()
        res = run_episodes(world, policy_controller(task, spec), seeds, record=False)
        k = sum(r.success for r in res)
        success[name] = {"successes": k, "episodes": len(res), "ci": list(wilson(k, len(res))),
                         "mean_final_error_mm": 1000 * float(np.mean([r.final_error for r in res])),
                         "control_hz": float(np.median([r.control_hz for r in res])),
                         "seconds": time.perf_counter() - t1}
        console.log(f"{name}: {k}/{len(res)} in the world ({time.perf_counter() - t1:.0f} s)")
    t = Table(title=f"push-t, shifted world: {CONTROLLER} planning in each twin ({a.episodes} episodes)")
    for c in ("twin", "success", "95% Wilson", "mean final error", "control Hz"):
        t.add_column(c, justify="right")
    for name, s in success.items():
        t.add_row(name, f"{s['successes']}/{s['episodes']}", f"[{100 * s['ci'][0]:.0f}, {100 * s['ci'][1]:.0f}]%",
                  f"{s['mean_final_error_mm']:.1f} mm", f"{s['control_hz']:.1f}")
    console.print(t)
    (out / "learned_twin.json").write_text(json.dumps({"errors": {k: {str(h): v for h, v in e.items()} for k, e in errors.items()},
                                                       "success": success, "horizons": HORIZONS}, indent=2))
    console.log(f"total {time.perf_counter() - t0:.0f} s; wrote {out}")


if __name__ == "__main__":
    main()
