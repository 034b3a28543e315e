"""bar-lift calibration data: the task's lifting excitation against the generic random one.

For each world (shifted, severity 2): record ``--episodes`` excitation episodes of ``--ticks``
ticks (episode seeds 1000, 1001, ...) with ``BarLift.excitation`` (a firm grasp, a lift, steps
of both hands while holding) and with the generic excitation every task has (random targets
over the action range, ``Task.excitation``), fit the task's five parameters to each
(least squares, ``--max-evals``, a quarter of the episodes held out for the control check) and
report how high each excitation lifted the bar, the fit against the world's hidden values,
which parameters the fit pins down and whether the control check accepts it for planning.

    python benchmarks/bar_lift_excite.py [--worlds 7,0] [--json benchmarks/bar_lift_excite.json] [--save DIR]
    python benchmarks/bar_lift_excite.py --rows --save DIR --out results/tables/bar-lift-excite.json

``--rows`` runs a rule's rows with the fits in ``DIR`` (made first by ``--worlds ... --save
DIR``): the candidates in the tuning worlds, the selected one in the report world. The defaults
are ``results/tables/bar-lift-excite.rule.txt``'s (E, EW; tuning world 8; report world 0; that
table's note records that world 8's fit was refused, so its tuning rows planned nominal); the
no-slip scene's rule (``results/tables/bar-lift-noslip.rule.txt``): ``--candidates W,E,EW
--tune 7,8 --rule results/tables/bar-lift-noslip.rule.txt --out
results/tables/bar-lift-noslip-planners.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from twinloop.calib import CalibConfig, calibrate
from twinloop.calib.windows import record_trajectory
from twinloop.tasks import Task, make_task
from twinloop.worlds import make_world


def fit_row(task, world, excitation, seeds, ticks: int, max_evals: int, save: Path | None = None) -> dict:
    trajs = [record_trajectory(world, excitation(s), s, ticks) for s in seeds]
    t0 = time.perf_counter()
    post = calibrate(task, trajs, config=CalibConfig(max_evals=max_evals, particles=8, seed=0, holdout_fraction=0.25))
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        (save / "posterior.json").write_text(json.dumps(post.to_dict()))
    truth = world.describe()["params"]
    names = task.param_space().names
    return {
        "bar_height_max_m": [round(float(t.states[:, 2].max()), 4) for t in trajs],
        "fit": {n: round(float(v), 4) for n, v in zip(names, post.estimate)},
        "truth": {n: round(float(truth[n]), 4) for n in names},
        "error_pct": {n: round(100 * abs(float(v) / truth[n] - 1), 1) for n, v in zip(names, post.estimate)},
        "identifiable": {n: bool(i) for n, i in zip(names, post.identifiable)},
        "accepted_for_planning": post.acceptance.accepted,
        "control_check": {"fit_error": round(float(post.acceptance.fit_error), 3),
                          "nominal_error": round(float(post.acceptance.nominal_error), 3)},
        "calibrate_s": round(time.perf_counter() - t0, 1),
    }


#: candidates: (options, whether they plan with the world's fit)
CANDIDATES = {"W": (["--noise", "0.3"], False), "E": ([], True), "EW": (["--noise", "0.3"], True)}


def run_rows(save: Path, out: Path, names: list[str], tune: list[int], report: int, rule: str) -> None:
    """A rule's tuning rows (each candidate in each world of ``tune``, 4 episodes, with that
    world's fit where it takes one), its selection (most refined successes summed; ties to the
    earlier name in ``names``) and its report row (world seed ``report``, 20 episodes), into
    ``out``."""
    from defaults_table import run_row

    table = {"rule": rule, "rows": {}}

    def options(name: str, w: int) -> list[str]:
        extra, fitted = CANDIDATES[name]
        return [*extra, *(["--posterior", str(save / f"w{w}" / "posterior.json")] if fitted else [])]

    score = dict.fromkeys(names, 0)
    for w in tune:
        for name in names:
            row = run_row("bar-lift", ["--world-seed", str(w), "--seed", str(w), *options(name, w)], 4)
            table["rows"][f"bar-lift | world seed {w}, tuning {name}"] = row
            score[name] += row["refined_successes"]
            print(w, name, row["base_successes"], row["refined_successes"],
                  (row.get("planning_twin") or {}).get("used"), flush=True)
    selected = max(names, key=lambda n: (score[n], -names.index(n)))
    table["selected"] = selected
    table["note"] = f"refined successes summed over the tuning worlds {tune}: {score}; selected {selected}"
    extra = options(selected, report)
    row = run_row("bar-lift", [*(["--world-seed", str(report)] if report else []), *extra], 20)
    table["rows"][f"bar-lift | world seed {report}, selected {selected}"] = row
    print(selected, row["base_successes"], row["refined_successes"], (row.get("planning_twin") or {}).get("used"))
    out.write_text(json.dumps(table, indent=1).replace(str(save), "DIR") + "\n")  # not this machine's folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worlds", default="7,0", help="world seeds, comma-separated")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--ticks", type=int, default=60)
    p.add_argument("--max-evals", type=int, default=200)
    p.add_argument("--json", default=None)
    p.add_argument("--save", default=None, help="write each world's bar-lift excitation fit to SAVE/wW/posterior.json")
    p.add_argument("--rows", action="store_true", help="run the rule's rows with the fits in --save")
    p.add_argument("--candidates", default="E,EW", help="with --rows: candidate names, ties to the earlier")
    p.add_argument("--tune", default="8", help="with --rows: tuning world seeds")
    p.add_argument("--report", type=int, default=0, help="with --rows: the report world seed")
    p.add_argument("--rule", default="results/tables/bar-lift-excite.rule.txt", help="with --rows: the rule")
    p.add_argument("--out", default="results/tables/bar-lift-excite.json", help="with --rows: the table")
    a = p.parse_args()
    if a.rows:
        if not a.save:
            raise SystemExit("--rows needs --save DIR holding the fits (w8, w0)")
        return run_rows(Path(a.save), Path(a.out), a.candidates.split(","), [int(w) for w in a.tune.split(",")],
                        a.report, a.rule)
    task = make_task("bar-lift")
    seeds = range(1000, 1000 + a.episodes)
    kinds = {"bar-lift excitation": task.excitation,
             "generic excitation": lambda s: Task.excitation(task, s)}
    out = {"command": "python benchmarks/bar_lift_excite.py", "episodes": a.episodes, "ticks": a.ticks,
           "max_evals": a.max_evals, "worlds": {}}
    for w in (int(x) for x in a.worlds.split(",")):
        world = make_world(task, "shifted", severity=2, seed=w)
        save = {k: None for k in kinds}
        if a.save:
            save["bar-lift excitation"] = Path(a.save) / f"w{w}"
        out["worlds"][str(w)] = rows = {k: fit_row(task, world, f, seeds, a.ticks, a.max_evals, save[k])
                                        for k, f in kinds.items()}
        for k, r in rows.items():
            print(f"world seed {w}, {k}: bar up to {np.median(r['bar_height_max_m']):.3f} m (median), "
                  f"fit {r['fit']}, truth {r['truth']}, identifiable {r['identifiable']}, "
                  f"accepted {r['accepted_for_planning']} {r['control_check']}", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
            fh.write("\n")


if __name__ == "__main__":
    main()
