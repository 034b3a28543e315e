"""`twinloop evaluate`: rank policies in the twin and in the world; cross-engine report."""

from __future__ import annotations

from dataclasses import replace

import typer

from twinloop.calib.fit import METHODS
from twinloop.cli.common import OUT_HELP, console, executor_options, guard, one_of, progress_ticks
from twinloop.io import out_mode
from twinloop.run.engines import DEFAULT_SWEEP, engines_table
from twinloop.run.evaluate import TWINS, EvaluateConfig, evaluation_table, run_evaluation
from twinloop.run.executor import EXECUTORS
from twinloop.tasks import TASKS
from twinloop.worlds import WORLDS

e = EvaluateConfig()  # defaults shown by the options below
POLICY = typer.Option(None, "--policy", "-p", help="A policy spec, repeatable: proposer[+optimizer][@key=value,...], "
                      "e.g. scripted@noise=0.1, scripted+mppi@k=16, none+cem@k=32,iterations=2, "
                      "distilled@checkpoint=p.pt (default: 8 push-t policies, scripted with noise to refined at K=32).")


def _list(text: str, sep: str = ",") -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(sep) if v.strip())


@guard
def evaluate(
    policy: list[str] = POLICY,
    task: str = typer.Option(e.task, help=one_of(TASKS)),
    world: str = typer.Option(e.world, help=one_of(WORLDS, "The world the twin should predict:")),
    severity: int = typer.Option(e.severity, help="ShiftedWorld severity 0-3."),
    world_seed: int = typer.Option(e.world_seed, help="Seed of the world's hidden physics."),
    episodes: int = typer.Option(e.episodes, help="Episodes per policy and side (the same seeds everywhere)."),
    seed: int = typer.Option(e.seed),
    max_ticks: int = typer.Option(0, help="Episode length in ticks (0: the task's)."),
    twins: str = typer.Option(",".join(e.twins), help=one_of(TWINS, "Twin-worlds, comma-separated (the last is the headline):")),
    method: str = typer.Option(e.calib.method, help=one_of(METHODS, "Calibration method:")),
    max_evals: int = typer.Option(e.calib.max_evals, help="Calibration budget."),
    calib_window: int = typer.Option(e.calib.window, help="Calibration window length (ticks)."),
    calib_start_iterations: int = typer.Option(e.calib.start_iterations, help="Calibration: estimate each window's true start "
                                               "(this many Gauss-Newton steps) instead of trusting the noisy recorded one; 0: off."),
    calib_episodes: int = typer.Option(e.calib_episodes, help="Excitation episodes recorded in the world for calibration."),
    calib_ticks: int = typer.Option(e.calib_ticks, help="Their length (ticks)."),
    calib_seed: int = typer.Option(None, help="Seed of the excitation episodes and the noise estimate (default: --seed); "
                                   "pieces of one evaluation on new seeds pass the same one, so they share one twin."),
    posterior: str = typer.Option(None, help="Use this posterior.json (twinloop calibrate) instead of calibrating (nominal: the nominal twin, uncalibrated)."),
    models: str = typer.Option("", help="Saved learned twins as more twin-worlds, comma-separated backend=path (learned=l.pt, hybrid=h.pt)."),
    engines: str = typer.Option("", help="Engine variants for the cross-engine report, comma-separated knob=value[+knob=value] "
                                "(integrator, cone, timeconst, dampratio, iterations, timestep); 'sweep': " + ", ".join(DEFAULT_SWEEP) + "."),
    plan_states: int = typer.Option(e.plan_states, help="World states at which refinement's plan is compared across engines."),
    n_boot: int = typer.Option(e.n_boot, help="Bootstrap resamples of the ranking metrics."),
    record: bool = typer.Option(e.record, help="Write the world episodes as Parquet."),
    world_from: str = typer.Option(None, help="An earlier evaluation's summary.json: reuse its world episodes instead of "
                                   "running the world (same task, world, episode length, policies' seeds; else refused)."),
    out: str = typer.Option(e.out, help=OUT_HELP),
    overwrite: bool = typer.Option(False, help="Replace an earlier twinloop output in --out."),
    executor: str = typer.Option("serial", help=one_of(EXECUTORS, "Where episodes run:") + " (same results)."),
    address: str = typer.Option(None, help="Ray cluster address (default: a local Ray instance)."),
):
    """Run policies in the world and in the twin (nominal, calibrated): success per policy, and how
    well the twin ranks them (Pearson r, Spearman rho, MMRV with bootstrap intervals)."""
    variants = DEFAULT_SWEEP if engines.strip() == "sweep" else _list(engines)
    cfg = EvaluateConfig(task=task, world=world, severity=severity, world_seed=world_seed,
                         policies=tuple(policy) if policy else e.policies, episodes=episodes, seed=seed,
                         max_ticks=max_ticks or None, twins=_list(twins),
                         calib=replace(e.calib, method=method, max_evals=max_evals, window=calib_window,
                                     start_iterations=calib_start_iterations), calib_episodes=calib_episodes,
                         calib_ticks=calib_ticks, calib_seed=calib_seed, posterior=posterior, models=_list(models), engines=variants, plan_states=plan_states,
                         n_boot=n_boot, record=record, world_from=world_from, out=out)
    console.print(f"[bold]twinloop evaluate[/] {cfg.task}: {len(cfg.policies)} policies x {cfg.episodes} episodes "
                  f"in the {cfg.world} world and the {', '.join(cfg.twins)} twin(s)"
                  + (f", {len(variants)} engine variants" if variants else ""))
    with executor_options(executor, address) as ex, progress_ticks() as tick:
        summary = run_evaluation(cfg, progress=tick, log=console.print, executor=ex, mode=out_mode(overwrite=overwrite))
    console.print(evaluation_table(summary))
    if "engines" in summary["evaluation"]:
        console.print(engines_table(summary["evaluation"]["engines"]))
    console.print(f"wall time {summary['wall_time_s']:.0f} s; wrote {out}/summary.json, {out}/evaluation.png")


COMMANDS = (evaluate,)
