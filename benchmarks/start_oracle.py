"""Where block-push's parameter-recovery error comes from: the same fit with better window starts.

The param_recovery.py setting (block-push, hidden friction and mass from ``hidden_values``,
10 excitation trajectories of ``--ticks`` ticks, 1 mm / 0.01 rad observation noise, least
squares, 400 evaluations, seeds 0..N-1), with the windows' start states swapped:

- ``noisy``: the recorded (noisy) starts, as calibration sees them;
- ``oracle``: the noise-free observed components (positions, angles, velocities; the block's
  unobserved height and vertical speed stay 0 as ``state_from_obs`` sets them);
- ``full``: the world's full true state (height and vertical speed too);
- ``hidden``: the recorded (noisy) observed components with the world's true unobserved ones
  (the components ``state_from_obs`` leaves constant: the block's height and vertical speed);
- ``clean``: noise-free data throughout (starts and targets).

Targets stay noisy except in ``clean``. Extra ``key=value`` arguments go to ``CalibConfig``.

    python benchmarks/start_oracle.py noisy 5
    python benchmarks/start_oracle.py full 5 errors_in_variables=False
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import twinloop.calib.fit as fitmod
from twinloop.calib.fit import CalibConfig, calibrate
from twinloop.calib.windows import Trajectory, free_starts, make_windows, quiet_starts
from twinloop.tasks import make_task
from twinloop.worlds import SimWorld

sys.path.insert(0, str(Path(__file__).parent))
from param_recovery import PARAMS, NoisyWorld, hidden_values  # noqa: E402

MODES = ("noisy", "oracle", "full", "hidden", "clean")


class RecordingWorld(NoisyWorld):
    """A NoisyWorld that also keeps its noise-free observations and full true states."""

    def _observe(self):
        clean = SimWorld._observe(self)
        self.clean.append(clean)
        self.full.append(np.concatenate([self.data.qpos, self.data.qvel]))
        return clean + self.rng.standard_normal(clean.shape) * self.std


def record(task, world, policy, seed, ticks, mode):
    """``(noisy, better)`` trajectories of one episode; ``better`` has the mode's states."""
    world.clean, world.full = [], []
    obs = world.reset(seed)
    states, actions = [], []
    for k in range(ticks):
        a = np.asarray(policy(obs, k), float)
        states.append(task.state_from_obs(obs))
        actions.append(a)
        obs, _ = world.step(a)
    states.append(task.state_from_obs(obs))
    states = np.array(states)
    if mode == "full":
        better = np.stack(world.full)
    elif mode == "hidden":
        better = np.where(np.ptp(states, axis=0) > 0, states, np.stack(world.full))
    else:
        better = np.stack([task.state_from_obs(o) for o in world.clean])
    return Trajectory(states, np.array(actions), seed), Trajectory(better, np.array(actions), seed)


def main() -> None:
    mode, seeds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if mode not in MODES:
        raise SystemExit(f"mode must be one of {MODES}")
    extra = dict(a.split("=") for a in sys.argv[3:])
    ticks = int(extra.pop("ticks", 60))
    kw = {k: (v == "True" if v in ("True", "False") else int(v) if v.isdigit() else float(v)) for k, v in extra.items()}
    task = make_task("block-push")
    space = task.param_space().subset(PARAMS)
    better: dict[int, Trajectory] = {}
    plain = fitmod._windows

    def swapped(task_, trajs, cfg):  # the same windows (chosen on the noisy data), better starts
        ws = plain(task_, trajs, cfg)
        if mode in ("noisy", "clean"):
            return ws
        ok = [quiet_starts(free_starts(task_.model, t.states, cfg.start_clearance), cfg.start_quiet) for t in trajs]
        bw = make_windows([better[t.index] for t in trajs], cfg.window, cfg.stride, ok)
        return [replace(w, starts=b.starts) for w, b in zip(ws, bw, strict=True)]

    fitmod._windows = swapped
    errs = []
    for seed in range(seeds):
        truth = hidden_values(task, np.random.default_rng([seed, 11]))
        world = RecordingWorld(task, space.apply(task.model, truth), 1e-3, 1e-2, 0.0)
        trajs = []
        for j in range(10):
            n, b = record(task, world, task.excitation(1000 * seed + j, "excite"), 1000 * seed + j, ticks, mode)
            better[n.index] = b
            trajs.append(b if mode == "clean" else n)
        cfg = CalibConfig(method="least_squares", max_evals=400, seed=seed, **kw)
        t0 = time.time()
        post = calibrate(task, trajs, space, config=cfg)
        e = post.error(truth)
        cov = (post.interval[:, 0] <= truth) & (truth <= post.interval[:, 1])
        errs.append(e.max())
        print(f"seed {seed}: error friction / mass {e.round(4)} covered {cov} evals {post.n_evals} "
              f"{time.time() - t0:.1f} s", flush=True)
    print(mode, kw, f"median {np.median(errs):.2%} p90 {np.quantile(errs, 0.9):.2%}")


if __name__ == "__main__":
    main()
