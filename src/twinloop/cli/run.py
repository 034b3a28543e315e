"""`twinloop demo`, `twinloop run`, `twinloop tasks`: the comparison experiment and the task list."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from twinloop.cli.common import console, guard, one_of, progress_ticks, results_table
from twinloop.plan import OPTIMIZER_NAMES, LLMConfig
from twinloop.policies import PROPOSERS
from twinloop.run.compare import RunConfig, run_comparison
from twinloop.tasks import TASKS, make_task
from twinloop.twin import BACKENDS
from twinloop.worlds import WORLDS


def _run(cfg) -> dict:
    console.print(f"[bold]twinloop[/] {cfg.task}: {cfg.proposer} proposer vs + {cfg.optimizer} refinement "
                  f"(K={cfg.num_samples}, {cfg.horizon:g} s horizon, {cfg.backend}) in a {cfg.world} world")
    with progress_ticks() as tick:
        summary = run_comparison(cfg, progress=tick, log=console.print)
    console.print(results_table(summary))
    out = Path(cfg.out)
    console.print(f"wall time {summary['wall_time_s']:.0f} s; wrote {out / 'summary.json'}, "
                  f"{out / 'comparison.png'}" + (f", {summary['video']}" if "video" in summary else ""))
    return summary



@guard
def demo(
    episodes: int = typer.Option(20, help="Episodes per controller."),
    seed: int = typer.Option(0, help="Seed of the world's hidden physics and the episodes."),
    out: str = typer.Option("twinloop-out", help="Output folder."),
    video: bool = typer.Option(True, help="Render one refined episode with ghost rollouts."),
):
    """Push-T in a shifted world: the scripted proposer alone vs with MPPI refinement."""
    _run(RunConfig(episodes=episodes, seed=seed, out=out, video=video))


@guard
def run(
    task: str = typer.Option("push-t", help=one_of(TASKS)),
    optimizer: str = typer.Option("mppi", help=one_of(OPTIMIZER_NAMES) + " (llm+*: a language model's plans "
                                  "join the batches; needs --iterations >= 2)"),
    backend: str = typer.Option("mujoco", help=one_of(BACKENDS)),
    num_samples: int = typer.Option(64, "--num-samples", "-k", help="Candidates per refine iteration (K)."),
    horizon: float = typer.Option(1.0, help="Planning horizon (s)."),
    iterations: int = typer.Option(1, help="Refine iterations per control tick."),
    world: str = typer.Option("shifted", help=one_of(WORLDS)),
    severity: int = typer.Option(2, help="ShiftedWorld severity 0-3."),
    proposer: str = typer.Option("scripted", help=one_of(PROPOSERS)),
    episodes: int = typer.Option(20, help="Episodes per controller."),
    seed: int = typer.Option(0),
    max_ticks: int = typer.Option(0, help="Episode length in ticks (0: the task's)."),
    risk: str = typer.Option("mean", help="Risk over parameter particles: mean | worst | cvar."),
    out: str = typer.Option("twinloop-out"),
    video: bool = typer.Option(True),
    record: bool = typer.Option(True, help="Write every episode as Parquet."),
    llm_base_url: str = typer.Option(None, help="llm+*: OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 "
                                     "(default: $TWINLOOP_LLM_BASE_URL). Key: $OPENAI_API_KEY."),
    llm_model: str = typer.Option(None, help="llm+*: model name (default: $TWINLOOP_LLM_MODEL)."),
    llm_timeout: float = typer.Option(30.0, help="llm+*: seconds per request."),
):
    """The demo's experiment with every choice as an option."""
    _run(RunConfig(task=task, optimizer=optimizer, backend=backend, num_samples=num_samples, horizon=horizon,
                   iterations=iterations, world=world, severity=severity, proposer=proposer, episodes=episodes,
                   seed=seed, max_ticks=max_ticks or None, out=out, video=video, record=record,
                   refiner={"risk": risk}, llm=LLMConfig(base_url=llm_base_url, model=llm_model, timeout=llm_timeout)))


def tasks():
    """List the registered tasks, what they ask and their default parameters."""
    t = Table(title="tasks")
    for c in ("name", "actions", "control period", "episode ticks", "parameters", "description"):
        t.add_column(c)
    for name in TASKS:
        task = make_task(name)
        t.add_row(name, str(task.nu), f"{task.control_period:g} s", str(task.max_ticks),
                  ", ".join(task.param_space().names), task.description())
    console.print(t)


COMMANDS = (demo, run, tasks)
