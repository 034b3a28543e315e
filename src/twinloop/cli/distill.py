"""`twinloop distill`: distill refined actions into a base policy and run the outer loop."""

from __future__ import annotations

from dataclasses import replace

import typer
from rich.table import Table

from twinloop.cli.common import OUT_HELP, console, guard, one_of, progress_ticks, results_table
from twinloop.errors import TwinloopError
from twinloop.io import out_mode
from twinloop.plan import OPTIMIZERS
from twinloop.run.distill import DistillConfig, run_distill
from twinloop.tasks import TASKS
from twinloop.worlds import WORLDS


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError as exc:
        raise TwinloopError(f"{name} must be comma-separated integers, got {text!r}") from exc


def rounds_table(summary: dict):
    t = Table(title=f"outer loop: {summary['task']} (success over {summary['episodes']} episodes)")
    for col in ("round", "train episodes", "base alone", "base + refinement", "min K", "success by K"):
        t.add_column(col, justify="right")
    for r in summary["rounds"]:
        by_k = ", ".join(f"{k}: {100 * v:.0f}%" for k, v in r["k_success"].items())
        t.add_row(str(r["round"]), str(r["train_episodes"]), f"{100 * r['base_success']:.0f}%",
                  f"{100 * r['refined_success']:.0f}%", str(r["min_k"]), by_k)
    return t


d = DistillConfig()  # defaults shown by the options below


@guard
def distill(
    task: str = typer.Option(d.task, help=one_of(TASKS)),
    world: str = typer.Option(d.world, help=one_of(WORLDS, "World to evaluate in:")),
    severity: int = typer.Option(d.severity, help="ShiftedWorld severity 0-3."),
    collect: int = typer.Option(d.collect, help="Refined episodes collected in the twin for round 1."),
    episodes: int = typer.Option(d.episodes, help="Evaluation episodes per controller."),
    dagger_episodes: int = typer.Option(d.dagger_episodes, help="World episodes aggregated per round."),
    rounds: int = typer.Option(d.rounds, help="Train -> evaluate -> aggregate rounds."),
    num_samples: int = typer.Option(d.refiner.num_samples, "--num-samples", "-k", help="Candidates per refine iteration (K)."),
    k_sweep: str = typer.Option(",".join(map(str, d.k_sweep)), help="Ks to find the smallest sufficient K ('' skips)."),
    optimizer: str = typer.Option(d.optimizer, help=one_of(OPTIMIZERS)),
    proposal_samples: int = typer.Option(d.proposal_samples, help="Policy samples offered to the optimizer per tick."),
    baseline: bool = typer.Option(d.baseline, help="Also evaluate refinement without a base policy."),
    epochs: int = typer.Option(d.policy.epochs, help="Training epochs per round."),
    chunk: int = typer.Option(0, help="Action chunk length in ticks (0: the planning horizon)."),
    hidden: str = typer.Option(",".join(map(str, d.policy.hidden)), help="Hidden layer widths."),
    max_ticks: int = typer.Option(0, help="Episode length in ticks (0: the task's)."),
    seed: int = typer.Option(d.seed),
    out: str = typer.Option(d.out, help=OUT_HELP),
    overwrite: bool = typer.Option(False, help="Replace an earlier twinloop output in --out."),
):
    """Distill refined actions into a base policy; evaluate it alone and under refinement."""
    cfg = DistillConfig(task=task, world=world, severity=severity, collect=collect, episodes=episodes,
                        dagger_episodes=dagger_episodes, rounds=rounds,
                        refiner=replace(d.refiner, num_samples=num_samples),
                        k_sweep=_ints(k_sweep, "k-sweep"), optimizer=optimizer,
                        proposal_samples=proposal_samples, baseline=baseline,
                        policy=replace(d.policy, epochs=epochs, chunk=chunk or None, hidden=_ints(hidden, "hidden")),
                        max_ticks=max_ticks or None, seed=seed, out=out)
    console.print(f"[bold]twinloop distill[/] {cfg.task}: {cfg.rounds} round(s), {cfg.optimizer} K={cfg.refiner.num_samples}, "
                  f"{cfg.world} world")
    with progress_ticks() as tick:
        summary = run_distill(cfg, progress=tick, log=console.print, mode=out_mode(overwrite=overwrite))
    console.print(results_table(summary))
    console.print(rounds_table(summary))
    console.print(f"wall time {summary['wall_time_s']:.0f} s; wrote {out}/summary.json")


COMMANDS = (distill,)
