"""Delay-aware refinement: refined success with the world's actuation delay modelled or not.

Worlds: ``shifted`` is ``ShiftedWorld(task, severity, world seed)``, the ``twinloop run`` world;
``delay`` is the nominal scene with only that world's actuation delay (``TwinWorld(task,
delay_steps=...)``: no hidden parameters, no noise), which isolates what the delay costs;
``nominal`` is the twin itself (no delay: what refinement does where the twin is exact).
Refiner delays (``--delays``): seconds the refiner models (``RefinerConfig.actuation_delay``),
``true`` for the shifted world's own. Episodes: the standard seeds of ``twinloop run``
(``--first`` skips the first ones, to split a long cell into pieces). Besides success, each cell
reports how well the twin predicted the world: the largest error over the observed keypoints
(mm) between the twin's state one tick ahead and the world's after that tick, for the plan
sent, from the state it was planned from, rolled out behind the world's delay line and at
once (median and 90th percentile over all refined ticks; the state is reconstructed from the
observation, so both include the reconstruction error),
and the share of ticks at which a candidate beat the base proposal in the twin (so was sent
instead of it).
One line per cell and a JSON record per cell in ``--out``.

    python benchmarks/delay_aware.py --task rope-shape \\
        --worlds delay --delays 0 true --episodes 20
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import mujoco
import numpy as np

from twinloop.control import Controller, RefinerConfig
from twinloop.modifiers import through_delay_line
from twinloop.run.compare import RunConfig, build, episode_seeds
from twinloop.run.experiment import run_episode, summarize
from twinloop.worlds import TwinWorld
from twinloop.worlds.shifted import ShiftedWorld


class RecordingController(Controller):
    """A controller that keeps the state each tick planned from and the world's delay line
    (tracked with ``line_refiner``, a refiner that models the world's delay)."""

    def __init__(self, refiner, proposer, line_refiner):
        super().__init__(refiner, proposer)
        self.line_refiner, self.state, self.line = line_refiner, None, None

    def reset(self, seed=None):
        super().reset(seed)
        self.line = None

    def plan(self, obs, state, warm, carry=None, in_flight=None):
        self.state = state
        return super().plan(obs, state, warm, carry, in_flight)


def run_cell(cfg: RunConfig, world_kind: str, episodes: list[int], world_delay: float) -> dict:
    task, world, proposer, refiner = build(cfg, keep_rollouts=True)
    if world_kind != "shifted":
        world = TwinWorld(task, delay_steps=world.delay_steps if world_kind == "delay" else 0)
        world_delay = world_delay if world_kind == "delay" else 0.0
    aware = build(replace(cfg, refiner=replace(cfg.refiner, actuation_delay=world_delay)), check_twin=False)[3]
    ctl = RecordingController(refiner, proposer, aware)
    S = refiner.spec.substeps

    def ahead(tick):
        """The sent plan one tick ahead in the twin from the same state, rolled out behind the
        world's delay line and at once; whether it replaced the base proposal."""
        out = None
        if tick.result is not None:
            plan = tick.result.plan
            ctrl = refiner.basis.controls(plan.knots[None], None if plan.detail is None else plan.detail[None])
            late = through_delay_line(ctrl, aware.in_flight(ctl.state, ctl.line)) if aware.delay_steps else ctrl
            pred = [refiner.twin.rollout(ctl.state, c).qpos[0, 0, S] for c in (late, ctrl)]
            out = (*pred, bool(tick.result.cost < tick.result.prior_cost))
        if aware.delay_steps:
            ctl.line = aware.sent(ctl.state, ctl.line, tick.action)
        return out

    t0 = time.perf_counter()
    res = [run_episode(world, ctl, s, record=False, ghosts=ahead) for s in episodes]
    wall = time.perf_counter() - t0
    ticks = [(g, q) for r in res for g, q in zip(r.ghosts, r.qpos[1:], strict=False) if g is not None]
    late, now = ([1000 * keypoint_error(task, g[i], q) for g, q in ticks] for i in (0, 1))
    row = summarize("refined", res)
    return {"task": cfg.task, "severity": cfg.severity, "world": world_kind, "actuation_delay": cfg.refiner.actuation_delay,
            "seeds": episodes, "per_seed": "".join(str(int(r.success)) for r in res), **row,
            "predict_delayed_mm": [float(np.median(late)), float(np.percentile(late, 90))],
            "predict_at_once_mm": [float(np.median(now)), float(np.percentile(now, 90))],
            "prior_replaced": float(np.mean([g[2] for g, _ in ticks])), "wall_s": wall}


def keypoint_error(task, qpos_a: np.ndarray, qpos_b: np.ndarray) -> float:
    """Largest distance (m) over the observed positions (the ``m`` entries of the observation)."""
    obs = []
    for q in (qpos_a, qpos_b):
        d = mujoco.MjData(task.model)
        d.qpos[:] = q
        mujoco.mj_forward(task.model, d)
        obs.append(task.obs_from_data(task.model, d))
    pos = [i for i, u in enumerate(task.obs_units()) if u == "m"]
    return float(np.abs(obs[0][pos] - obs[1][pos]).max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="rope-shape")
    ap.add_argument("--severity", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="world seed (and the episodes' base seed)")
    ap.add_argument("--worlds", nargs="+", default=["delay", "shifted"], choices=["nominal", "delay", "shifted"])
    ap.add_argument("--delays", nargs="+", default=["0", "true"], help="refiner delays (s) or 'true'")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--first", type=int, default=0, help="first episode index (pieces of a cell)")
    ap.add_argument("--num-samples", "-k", type=int, default=64)
    ap.add_argument("--horizon", type=float, default=1.0)
    ap.add_argument("--proposer", default="open-loop")
    ap.add_argument("--prior-margin", type=float, default=0.0)
    ap.add_argument("--out", default="benchmarks/results/delay_aware.jsonl")
    a = ap.parse_args()
    base = RunConfig(task=a.task, severity=a.severity, seed=a.seed, proposer=a.proposer, episodes=a.first + a.episodes,
                     refiner=RefinerConfig(num_samples=a.num_samples, horizon=a.horizon, exact_prior=True,
                                           prior_margin=a.prior_margin), video=False, record=False)
    true_delay = ShiftedWorld(build(base, check_twin=False)[0], a.severity, a.seed).describe()["delay_s"]
    seeds = episode_seeds(base)[a.first:]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"{a.task}, severity {a.severity} (world delay {1000 * true_delay:g} ms), K={a.num_samples}, "
          f"{a.horizon:g} s, {a.proposer} proposer, exact prior, episodes {a.first}..{a.first + a.episodes - 1}")
    for w in a.worlds:
        for d in a.delays:
            delay = true_delay if d == "true" else float(d)
            r = run_cell(replace(base, refiner=replace(base.refiner, actuation_delay=delay)), w, seeds, true_delay)
            lo, hi = r["success_ci"]
            (dm, dp), (nm, np90) = r["predict_delayed_mm"], r["predict_at_once_mm"]
            print(f"world {w:8} refiner delay {1000 * delay:4g} ms: {r['successes']}/{r['episodes']} "
                  f"[{100 * lo:.0f}%, {100 * hi:.0f}%], final error {1000 * r['mean_final_error']:.1f} mm, "
                  f"{r['control_hz']:.1f} Hz; the sent plan one tick ahead: behind the world's delay line "
                  f"{dm:.1f} mm (p90 {dp:.1f}), at once {nm:.1f} mm (p90 {np90:.1f}); base replaced at "
                  f"{100 * r['prior_replaced']:.0f}% of ticks; per seed {r['per_seed']}; {r['wall_s']:.0f} s", flush=True)
            with out.open("a") as f:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
