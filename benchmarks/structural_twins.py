"""Corrections for structure on other-engine worlds, and the twin chosen automatically.

Worlds: ``pymunk`` (a 2-D engine: rigid stick-slip floor friction, 2-D contacts, a
velocity-capped stage) and ``bullet`` (PyBullet: a free block, product friction, a
force-limited constraint stage), each with block-push and push-t. The base is brittle on
purpose: ``open-loop`` (the task's script rehearsed once in the nominal twin, then replayed).
The refiner is the library's default, fixed here (MPPI, K=32, 0.5 s horizon, 10 ms twin step;
block-push now defaults to a smaller budget, which these rows do not use), and every
refined controller is built as ``twinloop run`` builds its own
(:func:`twinloop.run.build.refined_controller`): its acceptance rule (``--accept``, default the
run's ``robust``) included, so a row here and ``twinloop run`` with the same world, twin and seeds
run the same episodes. Result files written before ``--accept`` existed were measured with
controllers that sent the refined plan every tick: ``--accept always`` reproduces them.

Rule, fixed before the runs (it selects nothing on the measured seeds):

1. Record world episodes on seeds of their own: excitation (``task.excitation``) and the
   nominal-twin refined controller, ``--fit`` of each kind to fit, ``--check`` of each kind
   held out for the control check.
2. Candidates (:func:`twinloop.calib.structure.fit_candidates`): the nominal twin; contact
   model ``elliptic`` (the friction cone); the task's kinematic-stage
   variant (``pusher="kinematic"``); least-squares calibrations fitted to the fit episodes
   (the fit itself, not kept back when worse: the check judges) of the task's parameters
   (``calibrated``) and of those with the pusher stage's force limit, kp and kv
   (``calibrated+stage``);
   the nominal twin and each calibration again at each ``--timesteps`` step (``NAME@5ms``);
   a learned residual over the nominal twin trained on the fit episodes (``--residual``; off
   by default: the costliest candidate).
3. The automatic choice (:func:`~twinloop.calib.structure.choose_twin`): the candidate whose
   prediction of the task's cost terms over the 0.5 s horizon on the held-out episodes is best,
   if it beats the nominal twin; else the nominal twin. With ``--validate N`` (default 4)
   the choice is settled in closed loop (:func:`~twinloop.run.validation.closed_loop_choice`):
   the nominal twin and the ``--top`` candidates the check ranks best above it each run N
   refined episodes in the world on seeds 300.., the best controller chosen only if strictly
   better than the nominal twin.
4. Refined success of the base alone, the automatic choice and the ``--rows`` candidates
   (``all``: every candidate) on the same ``--episodes`` seeds
   of ``run_comparison`` (``--seed``), never used above, with Wilson intervals. The automatic
   choice's success is its candidate's row (run first; the file is written after every row).

    python benchmarks/structural_twins.py --worlds pymunk --tasks push-t --episodes 20 --seed 11 \\
        --rows nominal nominal@5ms --out results/structural-twins/push-t-pymunk-validated.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from bullet_gap import rich_space as stage_space  # the task's space plus the pusher stage

from twinloop.calib.acceptance import AcceptanceConfig
from twinloop.calib.fit import CalibConfig
from twinloop.calib.structure import choose_twin, fit_candidates
from twinloop.calib.windows import record_trajectory
from twinloop.control import Controller, Refiner
from twinloop.control.hooks import ACCEPT_RULES
from twinloop.plan import make_optimizer
from twinloop.policies import make_proposer
from twinloop.run.build import refined_controller
from twinloop.run.compare import RunConfig, episode_seeds
from twinloop.run.experiment import run_episode
from twinloop.run.validation import closed_loop_choice
from twinloop.stats import wilson
from twinloop.tasks import make_task
from twinloop.worlds import make_world

K, HORIZON, STEP = 32, 0.5, 0.01


def run_config(task_name: str, world_name: str, accept: str = "robust") -> RunConfig:
    """The ``twinloop run`` configuration of this benchmark's refined controllers: the open-loop
    base, MPPI with K samples over the horizon, the twin step, the acceptance rule ``accept``."""
    cfg = RunConfig(task=task_name, world=world_name, proposer="open-loop", optimizer="mppi", twin_timestep=STEP)
    rcfg = replace(cfg.planner.refiner, num_samples=K, horizon=HORIZON, accept=accept)
    return replace(cfg, planner=replace(cfg.planner, refiner=rcfg))


def refiner_of(c, cfg: RunConfig) -> Refiner:
    """The refiner of candidate twin ``c`` (its twin, values and actuation delay) under ``cfg``."""
    rcfg = replace(cfg.planner.refiner, actuation_delay=float(c.delay * c.twin.dt))
    optimizer = make_optimizer(cfg.planner.optimizer, noise=cfg.planner.noise)
    return Refiner(c.task, c.twin, optimizer, rcfg, params=None if c.params is None else c.params[None])


def controller_of(c, cfg: RunConfig, task) -> Controller:
    """The refined controller planning in candidate ``c``, built as ``twinloop run`` builds its
    own (its state estimator, candidate sources and acceptance rule); the open-loop base is
    rehearsed in ``task`` (the world's task, also for a task-variant candidate)."""
    return refined_controller(cfg, c.task, make_proposer(task, "open-loop"), refiner_of(c, cfg))


def world_episodes(world, task, nominal, seeds, ticks, cfg: RunConfig) -> list:
    """Excitation and nominal-refined episodes recorded in ``world`` (one of each per seed)."""
    out = [record_trajectory(world, task.excitation(s), s, ticks) for s in seeds]
    ctl = controller_of(nominal, cfg, task)
    for s in seeds:
        ctl.reset(s)
        out.append(record_trajectory(world, lambda obs, _k: ctl.act(obs), s, ticks))
    return out


def success(world, ctl, seeds) -> dict:
    t0 = time.perf_counter()
    res = [run_episode(world, ctl, s, record=False) for s in seeds]
    k = sum(r.success for r in res)
    lo, hi = wilson(k, len(res))
    return {"successes": k, "episodes": len(res), "ci": [lo, hi], "seconds": time.perf_counter() - t0,
            "final_error_median": float(np.median([r.final_error for r in res])),
            "control_hz_median": float(np.median([r.control_hz for r in res])),
            "success_by_seed": [bool(r.success) for r in res]}


def run_setting(world_name: str, task_name: str, args, save=lambda partial: None) -> dict:
    task = make_task(task_name)
    world = make_world(task, world_name)
    variants = {"kinematic": make_task(task_name, pusher="kinematic")}
    t0 = time.perf_counter()
    cfg = run_config(task_name, world_name, args.accept)
    nominal = fit_candidates(task, [], contact_models=(), timestep=STEP)[0]
    fit_eps = world_episodes(world, task, nominal, range(100, 100 + args.fit), args.ticks, cfg)
    check_eps = world_episodes(world, task, nominal, range(200, 200 + args.check), args.ticks, cfg)
    residual = None
    if args.residual:
        from twinloop.twin.learned import EnsembleConfig

        residual = EnsembleConfig(epochs=args.residual_epochs)
    cands = fit_candidates(task, fit_eps, contact_models=("elliptic",), variants=variants,
                           calibration=CalibConfig(keep_if_worse=False, acceptance=None),
                           spaces={"calibrated+stage": stage_space(task)}, residual=residual,
                           timestep=STEP, timesteps=args.timesteps)
    choice = choose_twin(task, check_eps, cands, AcceptanceConfig(horizon=HORIZON))
    if args.validate:
        choice = closed_loop_choice(choice, cands, world, lambda c: controller_of(c, cfg, task),
                                    range(300, 300 + args.validate), top=args.top, log=lambda m: print(m, flush=True))
    fitted_s = time.perf_counter() - t0
    print(f"{world_name} {task_name}: {choice.reason}", flush=True)
    seeds = episode_seeds(RunConfig(task=task_name, episodes=args.episodes, seed=args.seed))
    rows = {"base": success(world, Controller(refiner_of(nominal, cfg), make_proposer(task, "open-loop"), refine=False),
                            seeds)}
    out = {"world": world_name, "task": task_name, "choice": choice.to_dict(), "rows": rows,
           "fit_episodes": len(fit_eps), "check_episodes": len(check_eps), "fit_seconds": fitted_s,
           "seeds": [int(s) for s in seeds]}
    # the chosen twin's row first, then the others (each saved as it ends)
    keep = {c.name for c in cands} if "all" in args.rows else {choice.chosen.name, *args.rows}
    for c in sorted((c for c in cands if c.name in keep), key=lambda c: c is not choice.chosen):
        rows[c.name] = success(world, controller_of(c, cfg, task), seeds)
        r = rows[c.name]
        print(f"  {c.name}: {r['successes']}/{r['episodes']} [{r['ci'][0]:.0%}, {r['ci'][1]:.0%}]", flush=True)
        out["automatic"] = {"candidate": choice.chosen.name, **rows[choice.chosen.name]}
        save(out)
    if hasattr(world, "close"):
        world.close()
    return out


def to_table(files: list[str], table: str) -> None:
    """Rows of ``results/tables/NAME.json`` (``{"task, twin | world": row}``) from result files
    of this script, merged into ``table`` (rows of other settings kept)."""
    path = Path(table)
    data = json.loads(path.read_text()) if path.is_file() else {"rows": {}}
    data["note"] = ("Base: open-loop (brittle). One row per twin the refiner plans in; 'automatic' is the "
                    "candidate choose_twin picked on held-out world episodes (named in the row). "
                    "Raw results: results/structural-twins/. Rows whose command says --accept always sent the refined "
                    "plan every tick (no acceptance rule; twinloop run's default is planner.refiner.accept=robust).")
    for f in files:
        d = json.loads(Path(f).read_text())
        for st in d["settings"]:
            auto = st["automatic"]["candidate"]
            for name, r in st["rows"].items():
                if name == "base":
                    continue
                label = f"{st['task']}, twin {name}" + (" (automatic)" if name == auto else "")
                data["rows"][f"{label} | {st['world']}"] = {
                    "command": d["command"], "episodes": r["episodes"],
                    "base_successes": st["rows"]["base"]["successes"], "refined_successes": r["successes"],
                    "check_error": next((x["error"] for x in st["choice"]["ranking"] if x["name"] == name), None),
                    "final_error_median": r["final_error_median"],
                    **({"refined_control_hz": round(r["control_hz_median"], 1)} if "control_hz_median" in r else {})}
    path.write_text(json.dumps(data, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worlds", nargs="+", default=["pymunk", "bullet"])
    p.add_argument("--tasks", nargs="+", default=["push-t", "block-push"])
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--seed", type=int, default=7, help="seeds the measured episodes (run_comparison's)")
    p.add_argument("--fit", type=int, default=4, help="world seeds recorded to fit (each: 2 episodes)")
    p.add_argument("--check", type=int, default=3, help="world seeds held out for the check (each: 2 episodes)")
    p.add_argument("--ticks", type=int, default=60)
    p.add_argument("--residual", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--residual-epochs", type=int, default=60)
    p.add_argument("--timesteps", nargs="*", type=float, default=[0.005],
                   help="other twin steps (s): the nominal twin and each calibration again at that step")
    p.add_argument("--validate", type=int, default=4,
                   help="closed-loop validation episodes per candidate (world seeds 300..); 0: the prediction check alone")
    p.add_argument("--top", type=int, default=3, help="candidates the prediction check passes to the validation")
    p.add_argument("--rows", nargs="+", default=["nominal"],
                   help="measured rows beside the base and the automatic choice ('all': every candidate)")
    p.add_argument("--accept", default="robust", choices=ACCEPT_RULES,
                   help="the refined controllers' acceptance rule (twinloop run's planner.refiner.accept)")
    p.add_argument("--out", default="", help="write the results here (JSON), after every setting")
    p.add_argument("--table", default="", help="instead of running: merge the result files --merge into this table")
    p.add_argument("--merge", nargs="*", default=[])
    args = p.parse_args()
    if args.table:
        return to_table(args.merge, args.table)
    flags = []
    for k, v in vars(args).items():
        name = k.replace("_", "-")
        if k in ("out", "table", "merge"):
            continue
        flags.append(f"--{name}" if v is True else f"--no-{name}" if v is False else
                     f"--{name} {' '.join(map(str, v)) if isinstance(v, list) else v}")
    out = {"command": "python benchmarks/structural_twins.py " + " ".join(flags), "args": vars(args), "refiner": {"optimizer": "mppi", "num_samples": K, "horizon": HORIZON,
                                                        "twin_timestep": STEP, "base": "open-loop",
                                                        "accept": args.accept}, "settings": []}
    def save(partial):
        if args.out:
            Path(args.out).write_text(json.dumps({**out, "settings": [*out["settings"], partial]}, indent=1))

    for w in args.worlds:
        for t in args.tasks:
            out["settings"].append(run_setting(w, t, args, save))
            if args.out:
                Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
