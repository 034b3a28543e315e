"""`twinloop distill`: distill refined actions into a base policy and run the outer loop."""

from __future__ import annotations

from dataclasses import replace

import typer
from rich.table import Table

from twinloop.cli.common import (
    NOISE_HELP,
    OUT_HELP,
    console,
    guard,
    one_of,
    optimizer_help,
    progress_ticks,
    results_table,
)
from twinloop.errors import TwinloopError
from twinloop.io import out_mode
from twinloop.plan import OPTIMIZERS
from twinloop.policies.distilled import LABELS, LEARNERS
from twinloop.run.distill import BASELINES, TEACHERS, DistillConfig, run_distill
from twinloop.tasks import TASKS
from twinloop.worlds import WORLDS


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError as exc:
        raise TwinloopError(f"{name} must be comma-separated integers, got {text!r}") from exc


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def rounds_table(summary: dict):
    t = Table(title=f"outer loop: {summary['task']} (success over {summary['episodes']} episodes)")
    for col in ("round", "train episodes (twin+world)", "train s", "base alone", "base + refinement",
                "min K", "K at goal", "success by K"):
        t.add_column(col, justify="right")
    for r in (r for r in summary["rounds"] if "base_success" in r):
        by_k = ", ".join(f"{k}: {_pct(v)}" for k, v in r.get("k_success", {}).items())
        eps = r["train_episodes"]
        refined = _pct(r["refined_success"]) if "refined_success" in r else "-"  # a run in pieces: not yet
        t.add_row(str(r["round"]), f"{eps['twin']}+{eps['world']}", f"{r['train_seconds']:.0f}",
                  _pct(r["base_success"]), refined, str(r.get("min_k")), str(r.get("k_at_goal")), by_k)
    for name, b in summary["baselines"].items():
        by_k = ", ".join(f"{k}: {_pct(v)}" for k, v in b["k_success"].items())
        t.add_row(name, "", "", "", "", str(b["min_k"]), str(b["k_at_goal"]), by_k)
    return t


d = DistillConfig()  # defaults shown by the options below


@guard
def distill(
    task: str = typer.Option(d.task, help=one_of(TASKS)),
    world: str = typer.Option(d.world, help=one_of(WORLDS, "World to evaluate in:")),
    severity: int = typer.Option(d.severity, help="ShiftedWorld severity 0-3."),
    rounds: int = typer.Option(d.rounds, help="Train -> evaluate -> aggregate rounds."),
    episodes: int = typer.Option(d.episodes, help="Evaluation episodes per controller (same seeds every round)."),
    collect: int = typer.Option(d.collect, help="Teacher episodes in twin-worlds (calibrated, or the nominal twin) before round 1."),
    collect_noise: float = typer.Option(d.collect_noise, help="Noise on the teacher's actions while collecting (fraction of the action range; DART)."),
    twin_dagger: int = typer.Option(d.twin_dagger, help="Twin episodes per round: the policy drives, the teacher labels."),
    dagger_episodes: int = typer.Option(d.dagger_episodes, help="World episodes of policy + refinement per round."),
    teacher: str = typer.Option(d.teacher, help=one_of(TEACHERS, "Who labels twin states:")),
    teacher_warm: bool = typer.Option(d.teacher_warm, help="The teacher starts each tick from its last plan (--no-teacher-warm: from the proposal alone)."),
    temperature: float = typer.Option(d.policy.temperature, help="Scale of the noise the policy flows from (0: the flow from zero noise)."),
    average: int = typer.Option(d.policy.average, help="Policy samples averaged per inference (needs --temperature > 0)."),
    num_samples: int = typer.Option(d.refiner.num_samples, "--num-samples", "-k", help="Candidates per refine iteration (K)."),
    horizon: float = typer.Option(d.refiner.horizon, help="Planning horizon (s)."),
    binary_actions: bool = typer.Option(d.refiner.binary_actions, help="Every refiner (the teacher's too, so its labels) sends the task's open/close commands open or closed (see RefinerConfig.binary_actions)."),
    twin_timestep: float = typer.Option(d.twin_timestep, help="The refiners' twin timestep (s; 0: the scene's)."),
    k_sweep: str = typer.Option(",".join(map(str, d.k_sweep)), help="Ks at which the refined controllers are evaluated."),
    baselines: str = typer.Option(",".join(d.baselines), help=one_of(BASELINES, "Refinement without the policy, comma-separated ('' none):")),
    optimizer: str = typer.Option(None, help=optimizer_help(OPTIMIZERS)),
    noise: float = typer.Option(0.0, help=NOISE_HELP),
    proposal_samples: int = typer.Option(d.proposal_samples, help="Policy samples offered to the optimizer per tick."),
    calib_episodes: int = typer.Option(d.calib_episodes, help="Excitation episodes recorded in the world for calibration."),
    calib_evals: int = typer.Option(d.calib.max_evals, help="Calibration budget (parameter vectors evaluated)."),
    posterior: str = typer.Option("", help="A saved posterior.json to use instead of calibrating (nominal: the nominal twin, uncalibrated; prior: twin-worlds drawn from the task's prior, domain randomization)."),
    prior_shift: bool = typer.Option(False, help="With --posterior prior or nominal: each twin-world also draws a shift level 0-3 and takes its actuation delay and observation noise."),
    steps: int = typer.Option(d.policy.steps, help="Training steps per round (at most, with --epochs)."),
    epochs: float = typer.Option(d.policy.epochs or 0, help="Passes over the training samples per round (0: --steps steps)."),
    val_fraction: float = typer.Option(d.policy.val_fraction, help="Fraction of episodes held out; the weights of the lowest held-out loss are kept."),
    patience: int = typer.Option(d.policy.patience or 0, help="Held-out evaluations without improvement before training stops (0: never)."),
    execute: int = typer.Option(d.policy.execute, help="Ticks a predicted chunk runs before the policy infers the next."),
    ensemble: float = typer.Option(-1.0 if d.policy.ensemble is None else d.policy.ensemble, help="Temporal ensembling decay per tick (-1: off)."),
    frame: bool = typer.Option(d.policy.frame, help="The policy sees observations, goal and chunks in the task's policy frame (push-t: the block's own)."),
    residual: bool = typer.Option(d.policy.residual, help="The policy predicts a correction of the task's scripted proposer's chunk."),
    labels: str = typer.Option(d.policy.labels, help=one_of(LABELS, "A chunk label:")),
    learner: str = typer.Option(d.policy.learner, help=one_of(LEARNERS, "What maps a context to a chunk:")),
    neighbours: int = typer.Option(d.policy.neighbours, help="Samples a 'neighbours' policy averages or a 'local' one fits."),
    ridge: float = typer.Option(d.policy.ridge, help="Penalty on the slopes of a 'local' policy's fit (standardized context units)."),
    smooth: int = typer.Option(d.policy.smooth, help="Moving average over ticks of 'decisions' labels (1: none)."),
    width: int = typer.Option(d.policy.width, help="Width of the policy's residual blocks."),
    depth: int = typer.Option(d.policy.depth, help="Residual blocks of the policy."),
    chunk: int = typer.Option(0, help="Action chunk length in ticks (0: the planning horizon)."),
    max_ticks: int = typer.Option(0, help="Episode length in ticks (0: the task's)."),
    seed: int = typer.Option(d.seed),
    out: str = typer.Option(d.out, help=OUT_HELP),
    overwrite: bool = typer.Option(False, help="Replace an earlier twinloop output in --out."),
    resume: bool = typer.Option(False, help="Continue the unfinished run in --out (same options; --rounds may grow)."),
    budget: float = typer.Option(0.0, help="Stop at the first stage boundary after this many seconds (0: run to the end); --resume continues."),
):
    """Distill refined actions into a flow-matching base policy; evaluate it alone and refined."""
    cfg = DistillConfig(task=task, world=world, severity=severity, rounds=rounds, episodes=episodes, collect=collect,
                        twin_dagger=twin_dagger, dagger_episodes=dagger_episodes, teacher=teacher,
                        teacher_warm=teacher_warm,
                        refiner=replace(d.refiner, num_samples=num_samples, horizon=horizon, binary_actions=binary_actions),
                        twin_timestep=twin_timestep or None, k_sweep=_ints(k_sweep, "k-sweep"),
                        baselines=tuple(b for b in baselines.replace(" ", "").split(",") if b),
                        optimizer=optimizer, noise=noise or None, proposal_samples=proposal_samples, calib_episodes=calib_episodes,
                        calib=replace(d.calib, max_evals=calib_evals), posterior=posterior or None, prior_shift=prior_shift,
                        collect_noise=collect_noise,
                        policy=replace(d.policy, steps=steps, width=width, depth=depth, chunk=chunk or None,
                                       epochs=epochs or None, val_fraction=val_fraction, patience=patience or None,
                                       execute=execute, ensemble=None if ensemble < 0 else ensemble,
                                       temperature=temperature, average=average, frame=frame,
                                       residual=residual, labels=labels, smooth=smooth,
                                       learner=learner, neighbours=neighbours, ridge=ridge),
                        max_ticks=max_ticks or None, seed=seed, out=out)
    console.print(f"[bold]twinloop distill[/] {cfg.task}: {cfg.rounds} round(s), {cfg.optimizer} K={cfg.refiner.num_samples}, "
                  f"{cfg.world} world")
    with progress_ticks() as tick:
        summary = run_distill(cfg, progress=tick, log=console.print, mode=out_mode(resume, overwrite),
                              budget_s=budget or None)
    if summary["results"]:
        console.print(results_table(summary))
    console.print(rounds_table(summary))
    left = "" if summary["complete"] else " (not finished: --resume continues)"
    console.print(f"wall time {summary['wall_time_s']:.0f} s; wrote {out}/summary.json{left}")


COMMANDS = (distill,)
