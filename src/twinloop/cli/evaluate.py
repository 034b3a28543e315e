"""`twinloop evaluate`: rank policies in the twin and in the world; cross-engine report."""

from __future__ import annotations

from dataclasses import replace

import typer

from twinloop.cli.common import console, executor_options, one_of, progress_ticks
from twinloop.cli.generate import config_command
from twinloop.io import out_mode
from twinloop.run.engines import DEFAULT_SWEEP, engines_table
from twinloop.run.evaluate import EvaluateConfig, evaluation_table, run_evaluation
from twinloop.run.executor import EXECUTORS

POLICY = typer.Option(None, "--policy", "-p", help="A policy spec, repeatable: proposer[+optimizer][@key=value,...], "
                      "e.g. scripted@noise=0.1, scripted+mppi@k=16, none+cem@k=32,iterations=2, "
                      "distilled@checkpoint=p.pt (default: 8 push-t policies, scripted with noise to refined at K=32).")

EVALUATE_OPTIONS = {
    "experiment.task": ("task",),
    "experiment.world": ("world",),
    "experiment.severity": ("severity",),
    "experiment.world_seed": ("world-seed",),
    "experiment.episodes": ("episodes",),
    "experiment.seed": ("seed",),
    "experiment.max_ticks": ("max-ticks",),
    "twins": ("twins",),
    "calib.method": ("method",),
    "calib.max_evals": ("max-evals",),
    "calib.window": ("calib-window",),
    "calib.start_iterations": ("calib-start-iterations",),
    "calib_episodes": ("calib-episodes",),
    "calib_ticks": ("calib-ticks",),
    "calib_seed": ("calib-seed",),
    "posterior": ("posterior",),
    "models": ("models",),
    "engines": ("engines",),
    "plan_states": ("plan-states",),
    "n_boot": ("n-boot",),
    "experiment.record": ("record",),
    "world_from": ("world-from",),
    "experiment.out": ("out",),
}


def _evaluate_body(cfg: EvaluateConfig, sources: dict, recipe, *, policy: list[str] | None, overwrite: bool,
                   executor: str, address: str | None) -> None:
    if policy:
        cfg = replace(cfg, policies=tuple(policy))
    if cfg.engines == ("sweep",):
        cfg = replace(cfg, engines=DEFAULT_SWEEP)
    e = cfg.experiment
    console.print(f"[bold]twinloop evaluate[/] {e.task}: {len(cfg.policies)} policies x {e.episodes} episodes "
                  f"in the {e.world} world and the {', '.join(cfg.twins)} twin(s)"
                  + (f", {len(cfg.engines)} engine variants" if cfg.engines else ""))
    with executor_options(executor, address) as ex, progress_ticks() as tick:
        summary = run_evaluation(cfg, progress=tick, log=console.print, executor=ex, mode=out_mode(overwrite=overwrite),
                                 sources=sources)
    console.print(evaluation_table(summary))
    if "engines" in summary["evaluation"]:
        console.print(engines_table(summary["evaluation"]["engines"]))
    console.print(f"wall time {summary['wall_time_s']:.0f} s; wrote {e.out}/summary.json, {e.out}/evaluation.png")


evaluate = config_command(
    EvaluateConfig, "evaluate", EVALUATE_OPTIONS, _evaluate_body,
    extra={"policy": (list[str] | None, POLICY),
           "overwrite": (bool, typer.Option(False, help="Replace an earlier twinloop output in --out.")),
           "executor": (str, typer.Option("serial", help=one_of(EXECUTORS, "Where episodes run:") + " (same results).")),
           "address": (str | None, typer.Option(None, help="Ray cluster address (default: a local Ray instance)."))},
    doc=f"""Run policies in the world and in the twin (nominal, calibrated): success per policy, and how
    well the twin ranks them (Pearson r, Spearman rho, MMRV with bootstrap intervals). --engines
    sweep: {", ".join(DEFAULT_SWEEP)}.""")


COMMANDS = (evaluate,)
