"""Success against rollout steps per tick on push-t's shifted world: simulating less for the
same decision.

Each setting runs the refined controller (scripted proposer + MPPI) on the demo's world
(``twinloop run`` defaults: push-t, shifted severity 2, world seed 0) and episode seeds
(``run_comparison``'s: 0..n-1), and reports success with its 95% Wilson interval, the physics
steps simulated per control tick (all candidates, all iterations; ``RefineResult.n_steps``),
their ratio to the default's 64 x 200, and the median refine time per tick.

    python benchmarks/speed.py [--settings NAME ...] [--episodes 20]

Settings are named ``k<K>_h<horizon>_dt<ms>`` plus ``_prune`` (continue only the best half
past half the horizon) or ``_carry<M>`` (last tick's M best candidates join the batch).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from twinloop.control import Controller, RefinerConfig
from twinloop.run.compare import RunConfig, build, episode_seeds
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson

DEFAULT_STEPS = 64 * 200

SETTINGS = {
    "k64_h1.0_dt5": dict(refiner=RefinerConfig(num_samples=64, horizon=1.0), twin_timestep=None),
    "k64_h0.5_dt5": dict(refiner=RefinerConfig(num_samples=64, horizon=0.5), twin_timestep=None),
    "k32_h0.5_dt5": dict(refiner=RefinerConfig(num_samples=32, horizon=0.5), twin_timestep=None),
    "k16_h0.5_dt5": dict(refiner=RefinerConfig(num_samples=16, horizon=0.5), twin_timestep=None),
    "k32_h0.5_dt10": dict(refiner=RefinerConfig(num_samples=32, horizon=0.5), twin_timestep=0.01),
    "k64_h0.5_dt20": dict(refiner=RefinerConfig(num_samples=64, horizon=0.5), twin_timestep=0.02),
    "k32_h1.0_dt20": dict(refiner=RefinerConfig(num_samples=32, horizon=1.0), twin_timestep=0.02),
    "k32_h0.5_dt10_carry4": dict(refiner=RefinerConfig(num_samples=32, horizon=0.5, carry=4), twin_timestep=0.01),
    "k32_h0.5_dt10_prune": dict(refiner=RefinerConfig(num_samples=32, horizon=0.5, prune=0.5), twin_timestep=0.01),
    "k16_h0.5_dt10": dict(refiner=RefinerConfig(num_samples=16, horizon=0.5), twin_timestep=0.01),
    "k32_h0.5_dt20": dict(refiner=RefinerConfig(num_samples=32, horizon=0.5), twin_timestep=0.02),
    "k16_h0.5_dt20": dict(refiner=RefinerConfig(num_samples=16, horizon=0.5), twin_timestep=0.02),
}


class Counting:
    """A controller that also counts the physics steps and refine time of every tick."""

    def __init__(self, controller: Controller):
        self.controller, self.task = controller, controller.task
        self.steps: list[int] = []
        self.seconds: list[float] = []

    last = property(lambda self: self.controller.last)
    n_fallbacks = property(lambda self: self.controller.n_fallbacks)

    def reset(self, seed=None):
        self.controller.reset(seed)

    def stop(self):
        self.controller.stop()

    def act(self, obs, info=None):
        a = self.controller.act(obs, info)
        res = self.controller.last.result
        self.steps.append(res.n_steps if res is not None else 0)
        self.seconds.append(self.controller.last.seconds)
        return a


def run_setting(name: str, episodes: int) -> dict:
    cfg = RunConfig(episodes=episodes, video=False, record=False, **SETTINGS[name])
    task, world, proposer, refiner = build(cfg)
    ctl = Counting(Controller(refiner, proposer))
    t0 = time.perf_counter()
    res = [run_episode(world, ctl, s, record=False) for s in episode_seeds(cfg)]
    k = sum(r.success for r in res)
    lo, hi = wilson(k, len(res))
    steps = float(np.mean(ctl.steps))
    return {"setting": name, "episodes": len(res), "successes": k, "ci": [lo, hi],
            "steps_per_tick": steps, "fraction_of_default": steps / DEFAULT_STEPS,
            "refine_ms_median": 1000 * float(np.median(ctl.seconds)),
            "mean_final_error_mm": 1000 * float(np.mean([r.final_error for r in res])),
            "wall_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--out", default="benchmarks/results/speed.json")
    a = ap.parse_args()
    rows = []
    print(f"{'setting':<24} {'success':>8} {'95% CI':>12} {'steps/tick':>10} {'x default':>9} {'refine ms':>9}")
    for name in a.settings:
        r = run_setting(name, a.episodes)
        rows.append(r)
        print(f"{name:<24} {r['successes']:>3}/{r['episodes']:<4} [{100 * r['ci'][0]:3.0f}%, {100 * r['ci'][1]:3.0f}%] "
              f"{r['steps_per_tick']:>10.0f} {r['fraction_of_default']:>9.3f} {r['refine_ms_median']:>9.1f}", flush=True)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
