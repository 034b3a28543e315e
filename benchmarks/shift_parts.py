"""Which part of a shifted world breaks a base proposer (a diagnostic).

Runs the base alone (no refinement) on the episode seeds of `twinloop run --seed WORLD_SEED` in worlds built from the parts of
the shifted world of ``--world-seed`` and ``--severity``: the shifted world itself, its hidden
physics alone (no delay, no observation noise), hidden physics + noise, hidden physics + delay,
and delay + noise on the nominal physics (:func:`~twinloop.worlds.shifted.nominal_counterpart`);
``nominal`` is the twin itself. Prints one line per world: per-episode outcomes, success, mean
final error.

    python benchmarks/shift_parts.py --task rope-shape --proposer distilled --checkpoint N120/policy_round1.pt
"""

from __future__ import annotations

import argparse

import numpy as np

from twinloop.control import Controller
from twinloop.run.compare import RunConfig, build
from twinloop.run.experiment import run_episodes
from twinloop.stats import wilson
from twinloop.worlds.shifted import ShiftedWorld, nominal_counterpart, shift_settings
from twinloop.worlds.twin import TwinWorld


def worlds(task, severity: int, seed: int) -> dict:
    shifted = ShiftedWorld(task, severity, seed)
    s, hidden = shift_settings(task, severity), shifted.hidden_params
    return {"shifted": shifted,
            "hidden physics only": TwinWorld(task, hidden),
            "hidden physics + noise": TwinWorld(task, hidden, obs_noise=s["obs_noise"]),
            "hidden physics + delay": TwinWorld(task, hidden, delay_steps=s["delay_steps"]),
            "delay + noise (nominal physics)": nominal_counterpart(task, severity),
            "nominal": TwinWorld(task, task.param_space().nominal)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="rope-shape")
    ap.add_argument("--proposer", default="distilled")
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--severity", type=int, default=2)
    ap.add_argument("--world-seed", type=int, default=0)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--first-episode", type=int, default=0)
    a = ap.parse_args()
    cfg = RunConfig(task=a.task, proposer=a.proposer, checkpoint=a.checkpoint, severity=a.severity,
                    seed=a.world_seed, video=False, record=False)
    task, _, proposer, refiner = build(cfg, check_twin=False)
    space = task.param_space()
    shifted = ShiftedWorld(task, a.severity, a.world_seed)
    print("hidden / nominal:", {n: round(float(v), 2) for n, v in zip(space.names, shifted.hidden_params / space.nominal)},
          "delay steps:", shift_settings(task, a.severity)["delay_steps"])
    seeds = [a.world_seed * 100_000 + a.first_episode + i for i in range(a.episodes)]  # as `twinloop run --seed`
    for name, world in worlds(task, a.severity, a.world_seed).items():
        res = run_episodes(world, Controller(refiner, proposer, refine=False), seeds, record=False)
        ok = sum(r.success for r in res)
        lo, hi = wilson(ok, len(res))
        print(f"{name:32s} {''.join('1' if r.success else '0' for r in res)} {ok}/{len(res)} "
              f"[{lo:.0%}, {hi:.0%}]  mean final error {1000 * np.mean([r.final_error for r in res]):.1f} mm", flush=True)


if __name__ == "__main__":
    main()
