"""Refined episodes of a grasp task (cloth-fold, rope-shape) traced tick by tick, and two screens.

The refined controller of ``twinloop run`` (``controller_in_world``: same world, seeds and
refiner) runs the given episode indices of one world and prints, per tick: the proposer's grasp
commands over its chunk, its first gripper target, the target sent, the twin cost of the plan
sent and of the prior, and in the world the finger-to-grasped-point gap, that point's height and
distance to its goal, and the task error. The last line is one JSON summary (successes, Wilson
interval, errors, ticks, control rate).

Screens that are not ``twinloop run`` options: ``--oracle`` (a diagnostic, not a controller: no
robot is told its world's hidden values) plans in a twin with the world's hidden parameters
(``Refiner.set_params``); ``--true-state`` (also a diagnostic) plans from the world's true state
(``SimWorld.true_state``: every vertex, the grasp's activation) instead of the keypoint estimate;
``--settle N`` sets the stateless estimate's settle steps (the task's ``settle_steps``); ``--observer``
is ``twinloop run --observer`` (the stateful estimate);
``--prior-weight W`` sets MPPI's ``prior_weight`` (the sampling mean is ``W prior + (1 - W)
warm``; 0.5 by default); ``--repair`` offers the task's repair (``twinloop run --repair``), and
with it ``--no-place`` (re-grasps only: ``RepairConfig.place`` off) screens its knob; ``--reach R``, ``--regrasp-reach R``, ``--repair-push N``
and ``--repair-commit M`` are ``twinloop run --repair-reach``, ``--repair-regrasp-reach``,
``--repair-push`` and ``--repair-commit``. A traced tick where repairs were offered ends with ``r<n> <d>``: n
candidates (with ``--repair-commit`` the rest of a repair under way first), the target sent d
mm from the nearest one's first target; every traced tick then names the chunk the action
sent starts (:func:`source`: P prior, W last plan, C the repair under way, G/L/U re-grasp,
place, push, S a sample).

    python benchmarks/refined_trace.py --proposer distilled --checkpoint policy_round1.pt \\
        --exact-prior --episodes 1 4 7 --trace
    python benchmarks/refined_trace.py --proposer distilled --checkpoint policy_round1.pt \\
        --exact-prior --oracle                                   # episodes 0-19, summary only
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np

from twinloop.control import RefinerConfig
from twinloop.run.compare import RunConfig, controller_in_world, episode_seeds
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson
from twinloop.tasks.deformable import PlaceRepair


class Recording:
    """A proposer that remembers its last chunk (the prior of the tick)."""

    def __init__(self, proposer):
        self.proposer, self.last = proposer, None

    def reset(self, seed=None):
        self.proposer.reset(seed)

    def propose(self, obs, state):
        self.last = np.asarray(self.proposer.propose(obs, state))
        return self.last

    def sample(self, obs, state, n, rng):
        return self.proposer.sample(obs, state, n, rng)


def source(a, prior, warm, offered, repair, under_way: bool = False) -> str:
    """Which chunk the action sent starts (every component within 1e-3: 1 mm, the grasp 0.001):
    ``P`` the prior, ``W`` the last plan's continuation, ``C`` the rest of a committed repair
    (offered first when ``under_way``), ``G``/``L``/``U`` a repair's re-grasp, place (while
    held) or push, ``S`` none of them (a sample); several when they coincide."""
    named = [("P", prior), ("W", warm)]
    if under_way:
        named, offered = named + [("C", offered[0, 0])], offered[1:]
    n_place = 0 if repair is None else len(repair.config.heights) * len(repair.config.overshoot)
    held = len(offered) and offered[0, 0, 3] > 0.5
    named += [("U" if i >= n_place else "L" if held else "G", c[0]) for i, c in enumerate(offered)]
    hit = sorted({n for n, b in named if b is not None and np.abs(np.asarray(b) - a).max() < 1e-3})
    return "".join(hit) or "S"


def traced(world, ctl, seed: int, max_ticks: int) -> None:
    """Run one episode printing a row per tick (see the module docstring)."""
    task = ctl.task
    point = task.point_index(task.grasp_point)
    goal = task.goal_of(task.grasp_point)
    obs = world.reset(seed)
    ctl.reset(seed)
    info = world.info()
    print(f"== episode seed {seed}\n k | prior grasp | prior target mm | sent target mm, grasp | twin cost sent, prior "
          "| gap, height, to goal, error mm")
    for k in range(1, max_ticks + 1):
        offered = np.array([w[:1] for w in ctl._repairs(task.state_from_obs(obs))]).reshape(-1, 1, task.nu)
        under_way = getattr(ctl, "_committed", None) is not None
        warm = None if ctl._warm is None else ctl._warm.first_action()
        a = ctl.act(obs, info)
        # "r4 d": 4 repair candidates offered, the target sent d mm from the nearest one's first
        mark = "" if not len(offered) else f" r{len(offered)} {1000 * np.abs(offered[:, 0, :3] - a[:3]).max(axis=1).min():.0f}"
        t, chunk = ctl.last, ctl.proposer.last
        mark += " " + source(a, chunk[0], warm, offered, ctl.repair, under_way)
        obs, info = world.step(a)
        q = info["qpos"]
        p = task.keypoint_positions(q)[point]
        ok = task.success(q)
        print(f"{k:2d} | {' '.join(f'{g:.1f}' for g in chunk[:, 3])} | {' '.join(f'{1000 * v:4.0f}' for v in chunk[0, :3])} | "
              f"{' '.join(f'{1000 * v:4.0f}' for v in a[:3])} {a[3]:.2f} | {t.cost:7.2f} {t.prior_cost:7.2f} | "
              f"{1000 * float(task.grasp_gap(q)):4.0f} {1000 * p[2]:4.0f} {1000 * np.linalg.norm(p - goal):4.0f} "
              f"{1000 * float(task.error(q)):4.0f}" + mark + ("  success" if ok else ""))
        if ok:
            break


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="cloth-fold")
    p.add_argument("--world", default="shifted")
    p.add_argument("--severity", type=int, default=2)
    p.add_argument("--world-seed", type=int, default=0)
    p.add_argument("--seed", type=int, default=0, help="episode seeds seed * 100000 + index")
    p.add_argument("--episodes", type=int, nargs="+", default=list(range(20)), help="episode indices")
    p.add_argument("--proposer", default="distilled")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--exact-prior", action="store_true")
    p.add_argument("--binary-actions", action="store_true", help="grasp commands open or closed (RefinerConfig.binary_actions)")
    p.add_argument("-k", type=int, default=64)
    p.add_argument("--horizon", type=float, default=1.0)
    p.add_argument("--proposal-samples", type=int, default=0)
    p.add_argument("--repair", action="store_true", help="offer the task's repair (RunConfig.repair)")
    p.add_argument("--no-place", action="store_true", help="with --repair: re-grasps only, no place while held")
    p.add_argument("--reach", type=float, default=None, help="with --repair: RepairConfig.reach (m; twinloop run --repair-reach)")
    p.add_argument("--regrasp-reach", type=float, default=None,
                   help="with --repair: RepairConfig.regrasp_reach (m; twinloop run --repair-regrasp-reach)")
    p.add_argument("--repair-commit", type=float, default=None,
                   help="with --repair: carry a repair on unless a plan beats it by this cost fraction (RepairConfig.commit)")
    p.add_argument("--repair-push", type=int, default=0, help="with --repair: pushes offered (RepairConfig.push)")
    p.add_argument("--oracle", action="store_true", help="plan in a twin with the world's hidden parameters")
    p.add_argument("--observer", action="store_true", help="the stateful observer (twinloop run --observer)")
    p.add_argument("--settle", type=int, default=None,
                   help="settle steps of the controller's keypoint -> state estimate (the task's settle_steps)")
    p.add_argument("--true-state", action="store_true", help="plan from the world's true state, not the estimate")
    p.add_argument("--prior-weight", type=float, default=None, help="MPPI prior_weight (default: MPPI's)")
    p.add_argument("--trace", action="store_true", help="print every tick")
    a = p.parse_args()
    rc = RefinerConfig(num_samples=a.k, horizon=a.horizon, exact_prior=a.exact_prior, binary_actions=a.binary_actions)
    cfg = RunConfig(task=a.task, world=a.world, severity=a.severity, seed=a.seed, world_seed=a.world_seed, proposer=a.proposer,
                    checkpoint=a.checkpoint, refiner=rc, proposal_samples=a.proposal_samples, repair=a.repair,
                    repair_push=a.repair_push, repair_reach=a.reach, repair_regrasp_reach=a.regrasp_reach, repair_commit=a.repair_commit,
                    observer=a.observer, episodes=max(a.episodes) + 1, video=False, record=False)
    world, ctl = controller_in_world(cfg, "refined")
    if a.oracle:
        hidden = world.describe()["params"]
        ctl.refiner.set_params(np.array([[hidden[n] for n in ctl.refiner.twin.param_space.names]]))
    if a.settle is not None:  # the controller's estimator only (the world keeps its true state)
        ctl.task.estimator.settle_steps = a.settle
    if a.true_state:  # the controller (and only it) reads the state through this instance's method
        ctl.task.state_from_obs = lambda obs: world.true_state()
    if a.repair and a.no_place:
        rep = ctl.repair
        ctl.repair = PlaceRepair(rep.task, rep.point, rep.goal, replace(rep.config, place=False))
    if a.prior_weight is not None:
        ctl.refiner.optimizer = replace(ctl.refiner.optimizer, prior_weight=a.prior_weight)
    seeds = [episode_seeds(cfg)[i] for i in a.episodes]
    t0 = time.perf_counter()
    results = []
    for s in seeds:
        if a.trace:
            ctl.proposer = Recording(ctl.proposer)
            traced(world, ctl, s, ctl.task.max_ticks)
            ctl.proposer = ctl.proposer.proposer
        else:
            r = run_episode(world, ctl, s, record=False)
            results.append(r)
            print(s, int(r.success), f"{1000 * r.final_error:.1f} mm", r.ticks, flush=True)
    if results:
        n = sum(r.success for r in results)
        print(json.dumps({"options": vars(a), "successes": n, "episodes": len(results), "wilson": wilson(n, len(results)),
                          "outcomes": "".join(str(int(r.success)) for r in results),
                          "errors_mm": [round(1000 * r.final_error, 1) for r in results],
                          "ticks": [r.ticks for r in results],
                          "control_hz": sum(r.ticks for r in results) / sum(r.ticks / r.control_hz for r in results),
                          "wall_s": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
