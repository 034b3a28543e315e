"""Why the nominal twin's refinement fails on the other-engine worlds: two diagnostics.

``probe``: short open-loop pushes in the world (no observation noise) against each twin's
prediction from the same state with the same actions: (1) the pusher alone stepped 4 cm away
from the block (the stage's dynamics), (2) the pusher driven 8 cm through the block's origin
(the block's response: contact, friction, stage force), 4 starts each.

``refine``: refined success (open-loop base, MPPI) in a world under one change at a time:
the nominal world (the twin's own scene: no structural gap), no observation noise, the twin's
step (5 ms, the scene's, instead of 10 ms), the planner's budget (K=64 and a 1 s horizon; two
iterations), a contact model, the kinematic stage; ``+`` combines changes. Episode seeds
0..N-1 (development seeds; the measured rows of ``structural_twins.py`` use others).

    python benchmarks/structural_diagnosis.py probe --task push-t --world pymunk
    python benchmarks/structural_diagnosis.py refine --task push-t --world pymunk --episodes 6 \\
        --changes none nominal-world nominal-world+step-5ms nominal-world+iterations-2 noise-0 \\
        step-5ms budget iterations-2 elliptic kinematic elliptic+kinematic
"""

from __future__ import annotations

import argparse

import numpy as np

from twinloop.calib.structure import named_contact_model
from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.plan import make_optimizer
from twinloop.policies import make_proposer
from twinloop.run.experiment import run_episode
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import make_world

TWINS = ("nominal", "elliptic", "hard", "kinematic")


def _twin(task_name: str, name: str, timestep: float | None = 0.01):
    task = make_task(task_name, **({"pusher": "kinematic"} if name == "kinematic" else {}))
    model = named_contact_model(task.model, name) if name in ("elliptic", "hard") else task.model
    return task, make_twin("mujoco", model, task.param_space(), **({"timestep": timestep} if timestep else {}))


def _predict(twin, task, state, target, ticks):
    S = int(round(task.control_period / twin.dt))
    return twin.rollout_many(state[None], np.tile(target, (1, ticks * S, 1))).qpos[0, 0, S::S]


def probe(args) -> None:
    task = make_task(args.task)
    world = make_world(task, args.world, noise=0)
    stage, block, travel = {}, {}, []
    for seed in range(4):
        for kind in ("stage", "block"):
            obs = world.reset(seed)
            s0, q = task.state_from_obs(obs), world.info()["qpos"]
            d = (q[:2] - q[2:4]) / np.linalg.norm(q[:2] - q[2:4])
            target = q[:2] + 0.04 * d if kind == "stage" else q[2:4] - 0.08 * d
            target = np.clip(target, task.action_low, task.action_high)
            ticks = 6 if kind == "stage" else 10
            seen = np.array([world.step(target)[1]["qpos"] for _ in range(ticks)])
            if kind == "block":
                travel.append(1000 * np.linalg.norm(seen[[2, 5, 9], 2:4] - q[2:4], axis=1))
            for name in TWINS:
                t, twin = _twin(args.task, name)
                pred = _predict(twin, t, s0, target, ticks)
                if kind == "stage":
                    stage.setdefault(name, []).append(1000 * np.linalg.norm(pred[:3, :2] - seen[:3, :2], axis=1))
                else:
                    block.setdefault(name, []).append(
                        1000 * np.linalg.norm(pred[[2, 5, 9], 2:4] - seen[[2, 5, 9], 2:4], axis=1))
    print(f"{args.task} in {args.world}: world block travel (mm) after 3, 6, 10 ticks: "
          f"{np.round(np.mean(travel, axis=0), 1)}")
    print("| twin | pusher error (mm), ticks 1, 2, 3 | block error (mm), ticks 3, 6, 10 |\n|---|---|---|")
    for name in TWINS:
        print(f"| {name} | {np.round(np.mean(stage[name], axis=0), 1)} | {np.round(np.mean(block[name], axis=0), 1)} |")


def refine(args) -> None:
    base = make_task(args.task)
    for change in args.changes:
        parts = set(change.split("+"))  # changes combine: nominal-world+step-5ms
        world = make_world(base, "nominal" if "nominal-world" in parts else args.world,
                           **({"noise": 0} if "noise-0" in parts else {}))
        name = next((p for p in ("elliptic", "hard", "kinematic") if p in parts), "nominal")
        task, twin = _twin(args.task, name, None if "step-5ms" in parts else 0.01)
        big = "budget" in parts
        cfg = RefinerConfig(num_samples=64 if big else 32, horizon=1.0 if big else 0.5,
                            iterations=2 if "iterations-2" in parts else 1)
        ctl = Controller(Refiner(task, twin, make_optimizer("mppi"), cfg), make_proposer(base, "open-loop"))
        res = [run_episode(world, ctl, s, record=False) for s in range(args.episodes)]
        errs = " ".join(f"{1000 * r.final_error:.1f}" for r in res)
        print(f"| {change} | {sum(r.success for r in res)}/{len(res)} | {errs} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("probe", "refine"))
    p.add_argument("--task", default="push-t")
    p.add_argument("--world", default="pymunk")
    p.add_argument("--episodes", type=int, default=6)
    p.add_argument("--changes", nargs="+", default=["none", "nominal-world", "noise-0", "step-5ms", "budget",
                                                    "iterations-2", "elliptic", "kinematic"])
    args = p.parse_args()
    probe(args) if args.what == "probe" else refine(args)


if __name__ == "__main__":
    main()
