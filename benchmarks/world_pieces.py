"""A world-distribution comparison in pieces, and a twin told the truth (a diagnostic).

``twinloop run --world-per-episode --seed S --episodes N`` runs episodes (and worlds)
``S*100000 + i``, i < N, in one go; a refined towel episode takes 5-10 s, so 20 of them do not
fit one turn of the shared CPU lock. This runs episodes ``first .. first+count-1`` of that run
with the same controllers (``controller_in_world``: base and refined, the monitor calibrated as
the run calibrates it) and appends one JSON line per episode to ``--out``; ``--tally`` reads
such files back into the run's table (success with 95% Wilson intervals, control rate, worlds
both / only refined / only base / neither).

``--oracle`` (not a controller: no real robot tells its hidden values) sets the refiner's twin
to each world's truth: ``params`` its hidden parameters (``Refiner.set_params``), ``engine``
its parameters and, at severity 3, its solver settings (Euler at the task's ``euler_step``, elliptic
cone, softer contacts).
Add ``--actuation-delay`` with the world's delay for the delay too; ``--oracle-only NAME,...``
tells the twin only those parameters (the others stay nominal), to see which one matters.
``--defaults`` builds both controllers from the task's own defaults, as ``twinloop run
--task T`` does (the planner options of this script are then ignored, ``--accept`` aside).

``--one-world`` runs the plain comparison in pieces instead: every episode in the shifted world
of seed ``--seed`` (``twinloop run`` without ``--world-per-episode``), and ``--checkpoint``,
``--noise``, ``--prior-margin`` pass on as ``twinloop run``'s options do (a distilled base whose
refined episodes at ``--particles 4`` take longer than one turn of the lock).

    python benchmarks/world_pieces.py --task cloth-fold --severity 3 --seed 0 --first 0 --count 10 \
        --proposer open-loop --exact-prior -k 64 --horizon 1 --out /tmp/x.jsonl
    python benchmarks/world_pieces.py --task rope-shape --one-world --first 0 --count 10 --proposer distilled \
        --checkpoint policy_round1.pt --exact-prior -k 64 --horizon 1 --particles 4 --out /tmp/y.jsonl
    python benchmarks/world_pieces.py --tally /tmp/x.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import numpy as np

from twinloop.control import RefinerConfig
from twinloop.run.compare import (
    RunConfig,
    build,
    calibrate_monitor,
    controller_in_world,
    episode_seeds,
    episode_stats,
    refined_controller,
    world_ticks,
)
from twinloop.run.config import configure, parse_sets
from twinloop.run.experiment import run_episode
from twinloop.stats import wilson
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import ShiftedWorld
from twinloop.worlds.shifted import severe_engine


def oracle_controller(cfg: RunConfig, oracle: str, seed: int, only: tuple[str, ...] = ()) -> tuple:
    """``(world, refined controller)`` whose twin has world ``seed``'s hidden parameters (only
    those named in ``only`` if any; the others nominal), and, for ``engine`` at severity >= 3,
    its solver settings. A twin of another resolution than the world's gets the values by name;
    a parameter whose values scale with the resolution (its nominal differs) is refused there."""
    task, world, proposer, refiner = build(cfg, check_twin=False)
    if oracle == "engine" and cfg.severity >= 3:
        twin = make_twin(cfg.backend, severe_engine(task).apply(task.model), task.param_space())
        refiner = type(refiner)(task, twin, refiner.optimizer, cfg.refiner)
    truth = ShiftedWorld(task, cfg.severity, seed).hidden_params
    world_space, space = task.param_space(), refiner.twin.param_space
    x = np.array(space.nominal, dtype=float)
    for i, name in enumerate(space.names):
        if not only or name in only:
            j = world_space.names.index(name)
            if not np.isclose(space.nominal[i], world_space.nominal[j]):
                raise SystemExit(f"--oracle: {name} scales with the twin's resolution; name others with --oracle-only")
            x[i] = truth[j]
    refiner.set_params(x[None])
    return world, refined_controller(cfg, task, proposer, refiner)


def piece_config(a) -> RunConfig:
    """The run's configuration: the script's planner options, or (``--defaults``) the task's own."""
    common = {"experiment.task": a.task, "experiment.severity": a.severity, "experiment.seed": a.seed,
              "experiment.episodes": a.first + a.count, "experiment.world_per_episode": not a.one_world,
              "experiment.video": False, "experiment.record": False}
    if a.defaults:
        cli = {**common, "planner.refiner.accept": a.accept, **parse_sets(RunConfig, a.set)}
        if a.accept == "robust" and a.accept_quantile is not None:
            cli["planner.refiner.accept_quantile"] = a.accept_quantile
        return configure(RunConfig, make_task(a.task).defaults, cli=cli)[0]
    rc = RefinerConfig(num_samples=a.k, horizon=a.horizon, iterations=a.iterations, exact_prior=a.exact_prior,
                       actuation_delay=a.actuation_delay, prior_margin=a.prior_margin, accept=a.accept,
                       accept_quantile=0.75 if a.accept_quantile is None else a.accept_quantile)
    return RunConfig(task=a.task, severity=a.severity, seed=a.seed, episodes=a.first + a.count,
                     world_per_episode=not a.one_world, proposer=a.proposer, checkpoint=a.checkpoint, refiner=rc,
                     noise=a.noise, particles=a.particles, monitor=a.monitor, video=False, record=False)


def run_piece(a) -> None:
    cfg = piece_config(a)
    only = tuple(n for n in (a.oracle_only or "").split(",") if n)
    task, world, proposer, refiner = build(cfg)
    watch = calibrate_monitor(cfg, task, proposer, refiner, world.period)[0] if cfg.monitor else None
    n_ticks = world_ticks(cfg, task, world)
    seeds = episode_seeds(cfg)[a.first:]
    names = ["base", "refined"]
    names = names[1:] if a.refined_only else names[:1] if a.base_only else names
    with open(a.out, "a") as f:
        for s in seeds:
            row = {"seed": s, "options": vars(a) | {"out": None}}
            for name in names:
                if name == "refined" and a.oracle:
                    w, ctl = oracle_controller(cfg, a.oracle, s, only)
                else:
                    w, ctl = controller_in_world(cfg, name, watch)
                r = run_episode(w, ctl, s, max_ticks=n_ticks, record=False)
                stats = episode_stats(w, ctl)
                row[name] = {"success": r.success, "error": r.final_error, "ticks": r.ticks, "hz": r.control_hz,
                             "failure": r.failure, "refits": stats.get("refits", []),
                             "alarms": len(stats.get("alarms", []))}
                row["world_params"] = stats.get("world_params", {})
            print(json.dumps(row), file=f, flush=True)
            print(s, {n: (row[n]["success"], round(1000 * row[n]["error"], 1), row[n]["ticks"]) for n in names},
                  flush=True)


def tally(paths: list[str], by: str | None = None) -> None:
    rows = {}
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            rows[r["seed"]] = r  # a rerun of a seed replaces it
    rows = [rows[s] for s in sorted(rows)]
    if by:  # the same table for the worlds whose hidden ``by`` lies below, then above, its nominal value
        task = make_task(rows[0]["options"]["task"])
        space = task.param_space()
        nominal = space.nominal[space.names.index(by)]
        for label, side in (("below", False), ("above", True)):
            part = [r for r in rows if (r["world_params"][by] > nominal) == side]
            if part:
                print(f"{by} {label} nominal ({len(part)} worlds):", end=" ")
                table(part)
    print(f"all ({len(rows)} worlds):", end=" ")
    table(rows)


def table(rows: list[dict]) -> None:
    """Success of each controller over ``rows`` and how the worlds split between them."""
    n = len(rows)
    out = []
    for name in ("base", "refined"):
        if name not in rows[0]:
            continue
        k = sum(r[name]["success"] for r in rows)
        lo, hi = wilson(k, n)
        hz = np.median([r[name]["hz"] for r in rows])
        err = np.mean([r[name]["error"] for r in rows]) * 1000
        out.append(f"{name}: {k}/{n} ({k / n:.0%}) [{lo:.0%}, {hi:.0%}], {err:.1f} mm, {hz:.3g} Hz")
    print("; ".join(out))
    if "base" in rows[0] and "refined" in rows[0]:
        c = Counter((r["base"]["success"], r["refined"]["success"]) for r in rows)
        print(f"worlds both / only refined / only base / neither: {c[True, True]} / {c[False, True]} / "
              f"{c[True, False]} / {c[False, False]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tally", nargs="+", help="JSON-lines files to tally (nothing is run)")
    p.add_argument("--by", help="with --tally: also split the worlds by this hidden parameter (below / above nominal)")
    p.add_argument("--task", default="cloth-fold")
    p.add_argument("--severity", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--proposer", default="open-loop")
    p.add_argument("--checkpoint", default=None, help="the distilled proposer's saved policy")
    p.add_argument("--one-world", action="store_true", help="every episode in world --seed (no world per episode)")
    p.add_argument("--noise", type=float, default=None, help="the optimizer's sampling noise (default: the task's)")
    p.add_argument("--prior-margin", type=float, default=0.0)
    p.add_argument("--exact-prior", action="store_true")
    p.add_argument("-k", type=int, default=64)
    p.add_argument("--horizon", type=float, default=1.0)
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--particles", type=int, default=0)
    p.add_argument("--actuation-delay", type=float, default=0.0)
    p.add_argument("--monitor", default=None)
    p.add_argument("--oracle", choices=("params", "engine"), default=None)
    p.add_argument("--accept", choices=("always", "trusted", "robust"), default="robust",
                   help="the acceptance rule of both refined arms (nominal and oracle twin)")
    p.add_argument("--accept-quantile", type=float, default=None,
                   help="robust: the fraction of particles (default: 0.75, or the task's with --defaults)")
    p.add_argument("--oracle-only", default=None, help="with --oracle params: only these parameters, comma-separated")
    p.add_argument("--defaults", action="store_true", help="the task's own run defaults (as twinloop run)")
    p.add_argument("--set", action="append", help="with --defaults: PATH=VALUE over them (as twinloop run --set)")
    p.add_argument("--refined-only", action="store_true")
    p.add_argument("--base-only", action="store_true")
    p.add_argument("--out", default="world_pieces.jsonl")
    a = p.parse_args()
    if a.tally:
        tally(a.tally, a.by)
    else:
        run_piece(a)


if __name__ == "__main__":
    main()
