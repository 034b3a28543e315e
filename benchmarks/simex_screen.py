"""SIMEX (simulation-extrapolation) screened for block-push's noise-induced parameter bias.

The param_recovery.py setting (block-push, hidden friction and mass from ``hidden_values``, 10
excitation trajectories of 60 ticks, 1 mm / 0.01 rad observation noise, least squares, 400
evaluations). Per seed: the ordinary fit (lambda = 0), then ``B`` refits per level lambda in
0.5, 1, 2 with extra Gaussian noise of variance ``lambda`` times the observation noise added
to every window's start (1 mm on positions, 0.01 rad on the yaw; warm-started at the lambda =
0 estimate, ``--refit-evals`` each), the mean estimate per level fitted linearly and
quadratically in lambda and extrapolated to lambda = -1 (no noise). Prints each level's
signed errors and the extrapolations' errors (median, p90 over seeds).

    python benchmarks/simex_screen.py --seeds 5
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

import twinloop.calib.fit as fitmod
from twinloop.calib.fit import CalibConfig, calibrate
from twinloop.calib.windows import record_trajectory
from twinloop.tasks import make_task

sys.path.insert(0, str(Path(__file__).parent))
from param_recovery import PARAMS, NoisyWorld, hidden_values  # noqa: E402

LEVELS = (0.5, 1.0, 2.0)


def extrapolate(lams: list[float], ests: list[np.ndarray], degree: int) -> np.ndarray:
    """Least-squares polynomial in lambda through ``(lam, estimate)``, evaluated at -1."""
    X = np.stack([np.asarray(lams) ** p for p in range(degree + 1)], axis=1)
    c, *_ = np.linalg.lstsq(X, np.asarray(ests), rcond=None)
    return sum(c[p] * (-1.0) ** p for p in range(degree + 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--replicates", type=int, default=2, help="refits per noise level (B)")
    p.add_argument("--refit-evals", type=int, default=200)
    args = p.parse_args()
    task = make_task("block-push")
    space = task.param_space().subset(PARAMS)
    extra = {"lam": 0.0, "rng": None}
    plain = fitmod._windows
    std = np.zeros(task.nstate)
    std[[0, 1, 2, 3]], std[5] = 1e-3, 1e-2  # pusher x, y, block x, y (m); block yaw (rad)

    def noisier(task_, trajs, cfg):  # the same windows with extra noise on their starts
        ws = plain(task_, trajs, cfg)
        if not extra["lam"]:
            return ws
        return [replace(w, starts=w.starts + extra["rng"].standard_normal(w.starts.shape) * std * np.sqrt(extra["lam"]))
                for w in ws]

    fitmod._windows = noisier
    errs = {"plain": [], "linear": [], "quadratic": []}
    for seed in range(args.seeds):
        truth = hidden_values(task, np.random.default_rng([seed, 11]))
        world = NoisyWorld(task, space.apply(task.model, truth), 1e-3, 1e-2, 0.0)
        trajs = [record_trajectory(world, task.excitation(1000 * seed + j, "excite"), 1000 * seed + j, 60)
                 for j in range(10)]
        post = calibrate(task, trajs, space, config=CalibConfig(max_evals=400, seed=seed))
        lams, ests = [0.0], [post.estimate]
        for lam in LEVELS:
            for b in range(args.replicates):
                extra.update(lam=lam, rng=np.random.default_rng([seed, b, int(lam * 100), 5]))
                refit = calibrate(task, trajs, space, config=CalibConfig(max_evals=args.refit_evals, seed=seed),
                                  x0=post.estimate)
                lams.append(lam)
                ests.append(refit.estimate)
        extra["lam"] = 0.0
        fits = {"plain": post.estimate, "linear": extrapolate(lams, ests, 1), "quadratic": extrapolate(lams, ests, 2)}
        for k, v in fits.items():
            errs[k].append(float(np.max(np.abs(v - truth) / truth)))
        means = {lam: np.mean([e for l2, e in zip(lams, ests, strict=True) if l2 == lam], axis=0) for lam in (0.0, *LEVELS)}
        print(f"seed {seed}: signed error (friction, mass) per lambda "
              + ", ".join(f"{lam:g}: {np.round(100 * (v - truth) / truth, 2).tolist()}%" for lam, v in means.items())
              + "; " + ", ".join(f"{k} {np.round(100 * (v - truth) / truth, 2).tolist()}%" for k, v in fits.items()),
              flush=True)
    for k, e in errs.items():
        print(f"{k}: median {np.median(e):.2%}, p90 {np.quantile(e, 0.9):.2%}, per seed "
              + ", ".join(f"{x:.1%}" for x in e))


if __name__ == "__main__":
    main()
