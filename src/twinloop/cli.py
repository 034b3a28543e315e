"""`twinloop ...`: the command line. Each command mirrors a frozen config dataclass."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from twinloop.errors import TwinloopError  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Rehearse each action in a digital twin before acting; keep the twin calibrated.")
console = Console()


def progress_bar() -> Progress:
    return Progress(TextColumn("[bold]{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


@contextmanager
def progress_ticks():
    """A progress display yielding ``tick(label, done, total)``: one bar per label."""
    with progress_bar() as prog:
        bars = {}

        def tick(label, done, total):
            if label not in bars:
                bars[label] = prog.add_task(label, total=total)
            prog.update(bars[label], completed=done)

        yield tick


def results_table(summary: dict) -> Table:
    from twinloop.viz.plots import world_label

    t = Table(title=f"{summary['task']} in {world_label(summary['world'])} world "
                    f"({summary['episodes']} episodes per controller, seed {summary['seed']})")
    for col in ("controller", "success", "95% CI", "final error", "control Hz"):
        t.add_column(col, justify="right" if col != "controller" else "left")
    for r in summary["results"]:
        lo, hi = r["success_ci"]
        t.add_row(r["controller"], f"{100 * r['success_rate']:.0f}% ({r['successes']}/{r['episodes']})",
                  f"[{100 * lo:.0f}%, {100 * hi:.0f}%]", f"{r['mean_final_error']:.4f}", f"{r['control_hz']:.1f}")
    return t


def _run(cfg) -> dict:
    from twinloop.run.compare import run_comparison

    console.print(f"[bold]twinloop[/] {cfg.task}: {cfg.proposer} proposer vs + {cfg.optimizer} refinement "
                  f"(K={cfg.num_samples}, {cfg.horizon:g} s horizon, {cfg.backend}) in a {cfg.world} world")
    with progress_ticks() as tick:
        summary = run_comparison(cfg, progress=tick, log=console.print)
    console.print(results_table(summary))
    out = Path(cfg.out)
    console.print(f"wall time {summary['wall_time_s']:.0f} s; wrote {out / 'summary.json'}, "
                  f"{out / 'comparison.png'}" + (f", {summary['video']}" if "video" in summary else ""))
    return summary


def _guard(fn):
    """Turn bad-input errors into a one-line message and exit code 2."""
    import functools

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except TwinloopError as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from exc

    return wrapper


@app.command()
@_guard
def demo(
    episodes: int = typer.Option(20, help="Episodes per controller."),
    seed: int = typer.Option(0, help="Seed of the world's hidden physics and the episodes."),
    out: str = typer.Option("twinloop-out", help="Output folder."),
    video: bool = typer.Option(True, help="Render one refined episode with ghost rollouts."),
):
    """Push-T in a shifted world: the scripted proposer alone vs with MPPI refinement."""
    from twinloop.run.compare import RunConfig

    _run(RunConfig(episodes=episodes, seed=seed, out=out, video=video))


@app.command()
@_guard
def run(
    task: str = typer.Option("push-t", help="push-t | block-push"),
    optimizer: str = typer.Option("mppi", help="mppi | cem | predictive | best_of_n, or llm+<one of them> "
                                  "(a language model's plans join the batches; needs --iterations >= 2)"),
    backend: str = typer.Option("mujoco", help="mujoco | mjx | warp"),
    num_samples: int = typer.Option(64, "--num-samples", "-k", help="Candidates per refine iteration (K)."),
    horizon: float = typer.Option(1.0, help="Planning horizon (s)."),
    iterations: int = typer.Option(1, help="Refine iterations per control tick."),
    world: str = typer.Option("shifted", help="shifted | nominal"),
    severity: int = typer.Option(2, help="ShiftedWorld severity 0-3."),
    proposer: str = typer.Option("scripted", help="scripted | none"),
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
    from twinloop.plan import LLMConfig
    from twinloop.run.compare import RunConfig

    _run(RunConfig(task=task, optimizer=optimizer, backend=backend, num_samples=num_samples, horizon=horizon,
                   iterations=iterations, world=world, severity=severity, proposer=proposer, episodes=episodes,
                   seed=seed, max_ticks=max_ticks or None, out=out, video=video, record=record,
                   refiner={"risk": risk}, llm=LLMConfig(base_url=llm_base_url, model=llm_model, timeout=llm_timeout)))


@app.command()
def tasks():
    """List the tasks and their default parameters."""
    from twinloop.tasks import TASKS

    t = Table(title="tasks")
    for c in ("name", "actions", "control period", "episode ticks", "parameters"):
        t.add_column(c)
    for name, cls in TASKS.items():
        task = cls()
        t.add_row(name, str(task.nu), f"{task.control_period:g} s", str(task.max_ticks),
                  ", ".join(task.param_space().names))
    console.print(t)


def _register_extensions() -> None:
    from twinloop.calib.cli import register as calib_register
    from twinloop.policies.cli import register as distill_register

    calib_register(app)
    distill_register(app)


_register_extensions()


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
