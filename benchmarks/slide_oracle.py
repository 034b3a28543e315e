"""Pivot's slide-down worlds: does a twin that knows the world win them at all?

Over the worlds of ``twinloop run --task pivot --severity S --set planner.refiner.exact_prior=true
--world-per-episode --seed SEED --episodes N`` (world seed = episode seed), a world is a slide-down world when
the box, with the arm holding its hold action, fails (``task.failure``) within ``--ticks``
ticks. For each, the refined episode (the run's refiner and proposer) is re-run with the
refiner's twin at its nominal parameters, at the world's hidden parameters
(``Refiner.set_params``), and at the world's parameters with its engine (at severity 3:
Euler, elliptic cone, softer contacts; at the scene's own step, where Euler holds). The world
keeps its noise and delay. A diagnostic, not a controller: no real robot tells its values.

    python benchmarks/slide_oracle.py --severity 3 --seed 0 --episodes 100
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from twinloop.control import Controller, Refiner
from twinloop.plan import make_optimizer
from twinloop.run.compare import RunConfig, build, episode_seeds
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson
from twinloop.twin import make_twin
from twinloop.worlds import ShiftedWorld
from twinloop.worlds.shifted import severe_engine


def slides(task, severity: int, seed: int, ticks: int) -> bool:
    """Whether the box fails within ``ticks`` with the arm held still."""
    w = ShiftedWorld(task, severity, seed)
    obs = w.reset(seed)
    for _ in range(ticks):
        obs, _ = w.step(task.hold_action(task.state_from_obs(obs)))
        if task.failure(w.info()["qpos"]):
            return True
    return False


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--severity", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--ticks", type=int, default=10)
    args = p.parse_args()
    cfg = RunConfig(task="pivot", severity=args.severity, seed=args.seed, episodes=args.episodes,
                    world_per_episode=True, video=False, record=False,
                    refiner=replace(RunConfig().refiner, exact_prior=True))
    task, world, proposer, refiner = build(cfg)
    worlds = [s for s in episode_seeds(cfg) if slides(task, args.severity, s, args.ticks)]
    print(f"slide-down worlds: {len(worlds)} of {args.episodes}: {worlds}", flush=True)
    engine = severe_engine(task) if args.severity >= 3 else None
    model = engine.apply(task.model) if engine is not None else task.model
    exact = Refiner(task, make_twin("mujoco", model, task.param_space()), make_optimizer(cfg.optimizer, noise=cfg.noise),
                    cfg.refiner)
    twins = {"nominal": (refiner, False), "world's parameters": (refiner, True),
             "world's parameters and engine": (exact, True)}
    won = dict.fromkeys(twins, 0)
    for s in worlds:
        row = []
        for label, (ref, oracle) in twins.items():
            world.reset(s)
            ref.set_params(world.world.hidden_params[None] if oracle else None)
            r = run_episode(world, Controller(ref, proposer), s, record=False)
            won[label] += r.success
            row.append(f"{label}: {'won' if r.success else r.failure or 'timeout'} at tick {r.ticks}")
        print(f"world {s}: " + "; ".join(row), flush=True)
    print("\n| twin | slide-down worlds won |\n|---|---|")
    for label, k in won.items():
        lo, hi = wilson(k, len(worlds))
        print(f"| {label} | {k}/{len(worlds)} [{lo:.0%}, {hi:.0%}] |")


if __name__ == "__main__":
    main()
