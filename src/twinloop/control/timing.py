"""Timing: whether a coarser twin timestep decides as the scene's own does."""

from __future__ import annotations

import numpy as np

from twinloop.control.refiner import Refiner, RefinerConfig
from twinloop.errors import TwinloopError
from twinloop.tasks.base import Task
from twinloop.twin.base import Twin


def check_timestep(task: Task, twin: Twin, reference: Twin, *, n_states: int = 8, num_samples: int = 32,
                   horizon: float | None = None, seed: int = 0, min_rank_corr: float = 0.8,
                   strict: bool = True) -> dict:
    """Whether a twin with a coarser timestep decides as the reference twin does.

    From ``n_states`` states an episode of the task's scripted proposer visits in the nominal
    scene (a random tick in ``[0, 30)`` of a seeded episode; the start state without a
    proposer), ``num_samples`` candidate plans (MPPI samples around the proposer's plan or
    around holding) are rolled out in both twins. The coarse twin passes when none of its
    rollouts goes unstable where the reference's does not, and the median over states of
    Spearman's rank correlation between the two twins' costs is at least ``min_rank_corr``
    (a sampling planner only needs the ranking).

    Returns:
        ``{"timestep", "reference_timestep", "rank_corr_median", "rank_corr_min",
        "unstable", "reference_unstable", "ok"}``.

    Raises:
        TwinloopError: if it does not pass and ``strict``.
    """
    from scipy.stats import spearmanr

    from twinloop.plan import make_optimizer
    from twinloop.worlds.base import SimWorld

    cfg = RefinerConfig(num_samples=num_samples, horizon=horizon or task.horizon, seed=seed)
    fine, coarse = (Refiner(task, t, make_optimizer("mppi"), cfg) for t in (reference, twin))
    proposer = task.default_proposer()
    world = SimWorld(task)
    rng = np.random.default_rng([seed, 11])
    corr, bad, bad_ref = [], 0, 0
    for i in range(n_states):
        obs = world.reset(seed * 1000 + i)
        if proposer is not None:
            proposer.reset(i)
            for _ in range(int(rng.integers(0, 30))):
                obs, _ = world.step(np.clip(proposer.propose(obs, task.state_from_obs(obs))[0], task.action_low, task.action_high))
        state = task.state_from_obs(obs)
        mean = (fine.plan_from_actions(proposer.propose(obs, state)) if proposer is not None
                else fine.hold_plan(task.hold_action(state))).knots
        opt = make_optimizer("mppi")
        knots = np.clip(opt.sample(opt.init(mean, None, fine.spec.low, fine.spec.high), rng, num_samples),
                        fine.spec.low, fine.spec.high)
        rf, cf = fine.evaluate(state, knots)
        rc, cc = coarse.evaluate(state, knots)
        bad += int((rc.ok.all(axis=0) < rf.ok.all(axis=0)).sum())
        bad_ref += int((~rf.ok.all(axis=0)).sum())
        both = np.isfinite(cf) & np.isfinite(cc)
        if both.sum() > 2:
            corr.append(float(spearmanr(cf[both], cc[both]).statistic))
    med = float(np.median(corr)) if corr else float("nan")
    out = {"timestep": float(twin.dt), "reference_timestep": float(reference.dt), "rank_corr_median": med,
           "rank_corr_min": float(np.min(corr)) if corr else float("nan"), "unstable": bad,
           "reference_unstable": bad_ref, "ok": bool(bad == 0 and med >= min_rank_corr)}
    if strict and not out["ok"]:
        raise TwinloopError(f"a twin timestep of {twin.dt:g} s does not decide as {reference.dt:g} s does for task "
                            f"{task.name!r}: median rank correlation {med:.2f} (need >= {min_rank_corr}), "
                            f"{bad} rollouts unstable only at the coarse step")
    return out
