"""`twinloop demo`, `twinloop run`, `twinloop tasks`: the comparison experiment and the task list."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer
from rich.table import Table

from twinloop import plugins
from twinloop.cli.common import (
    OUT_HELP,
    console,
    executor_options,
    guard,
    one_of,
    progress_ticks,
    results_table,
)
from twinloop.cli.generate import config_command, resolve
from twinloop.errors import TwinloopError
from twinloop.io import out_mode
from twinloop.recipes import Recipe, load_recipe, recipe_names
from twinloop.run.calibrate import CalibrateConfig
from twinloop.run.compare import RunConfig, run_comparison
from twinloop.run.config import field_type, get_path, leaf_paths, path_doc, type_name
from twinloop.run.distill import DistillConfig
from twinloop.run.evaluate import EvaluateConfig
from twinloop.run.executor import EXECUTORS
from twinloop.run.rsr import RSRConfig
from twinloop.tasks import TASKS, make_task


def _run(cfg: RunConfig, overwrite: bool, executor: str = "serial", address: str | None = None,
         sources: dict | None = None, recipe: Recipe | None = None) -> dict:
    p, e = cfg.planner, cfg.experiment
    twin = f"{p.backend}" + (f", {1000 * p.twin_timestep:g} ms twin step" if p.twin_timestep else "")
    mode = (f" in real time ({'with' if cfg.async_control.latency_comp else 'without'} latency compensation)"
            if cfg.realtime else "")
    if recipe is not None:
        console.print(f"recipe [bold]{recipe.name}[/]: {recipe.description}")
    console.print(f"[bold]twinloop[/] {e.task}: {cfg.proposer} proposer vs + {p.optimizer} refinement "
                  f"(K={p.refiner.num_samples}, {p.refiner.horizon:g} s horizon, {twin}) in a {e.world} world{mode}")
    with executor_options(executor, address) as ex, progress_ticks() as tick:
        summary = run_comparison(cfg, progress=tick, log=console.print, mode=out_mode(overwrite=overwrite), executor=ex,
                                 sources=sources)
    console.print(results_table(summary))
    if recipe is not None and recipe.result:
        console.print(f"published: {published(recipe)}")
    out = Path(e.out)
    console.print(f"wall time {summary['wall_time_s']:.0f} s; wrote {out / 'summary.json'}, "
                  f"{out / 'comparison.png'}" + (f", {summary['video']}" if "video" in summary else ""))
    return summary


def published(recipe: Recipe) -> str:
    """A recipe's published result in a few words."""
    r = recipe.result
    if "successes" in r and "episodes" in r:
        text = f"{r.get('controller', 'refined')} {r['successes']}/{r['episodes']}"
        if "base_successes" in r:
            text += f", base {r['base_successes']}/{r['episodes']}"
        return text + (f" ({r['source']})" if "source" in r else "")
    return ", ".join(f"{k}={v}" for k, v in r.items())


@guard
def demo(
    task: str = typer.Option(None, help="Any task (a registered name, path/to/file.py:Class or package.module:Class) "
                             "with its own defaults; default: the recipe push-t-demo."),
    episodes: int = typer.Option(None, help="Episodes per controller (default 20)."),
    seed: int = typer.Option(None, help="Seed of the world's hidden physics and the episodes (default 0)."),
    out: str = typer.Option(None, help=OUT_HELP),
    overwrite: bool = typer.Option(False, help="Replace an earlier twinloop output in --out."),
    video: bool = typer.Option(None, "--video/--no-video", help="Render one refined episode with ghost rollouts."),
):
    """Push-T in a shifted world: the scripted proposer alone vs with MPPI refinement (K=32,
    0.5 s horizon, 10 ms twin steps): the recipe push-t-demo. With --task, the same experiment
    on that task with its own defaults."""
    cli = {path: v for path, v in (("experiment.task", task), ("experiment.episodes", episodes),
                                   ("experiment.seed", seed), ("experiment.out", out), ("experiment.video", video))
           if v is not None}
    cfg, sources, rec = resolve(RunConfig, "run", None if task else DEMO_RECIPE, cli)
    _run(cfg, overwrite, sources=sources, recipe=rec)


DEMO_RECIPE = "push-t-demo"

#: the fields `twinloop run` shows as options (the most used; about 25 with the command's own);
#: every other one takes --set (planner.refiner.exact_prior, planner.particles, planner.twin_timestep ...)
RUN_OPTIONS = {
    "experiment.task": ("task",),
    "experiment.world": ("world",),
    "experiment.severity": ("severity",),
    "experiment.episodes": ("episodes",),
    "experiment.seed": ("seed",),
    "experiment.world_seed": ("world-seed",),
    "experiment.world_per_episode": ("world-per-episode",),
    "experiment.max_ticks": ("max-ticks",),
    "experiment.out": ("out",),
    "experiment.record": ("record",),
    "experiment.video": ("video",),
    "experiment.view": ("view",),
    "proposer": ("proposer",),
    "checkpoint": ("checkpoint",),
    "planner.optimizer": ("optimizer",),
    "planner.refiner.num_samples": ("num-samples", "-k"),
    "planner.refiner.horizon": ("horizon",),
    "planner.noise": ("noise",),
    "planner.posterior": ("posterior",),
    "realtime": ("realtime",),
    "monitor": ("monitor",),
    "observe": ("observe",),
}


def _run_body(cfg: RunConfig, sources: dict, recipe: Recipe | None, *, overwrite: bool, token: str | None,
              executor: str, address: str | None) -> None:
    if token:
        cfg = replace(cfg, token=token)
    _run(cfg, overwrite, executor, address, sources=sources, recipe=recipe)


run = config_command(
    RunConfig, "run", RUN_OPTIONS, _run_body,
    extra={"overwrite": (bool, typer.Option(False, help="Replace an earlier twinloop output in --out.")),
           "token": (str | None, typer.Option(None, envvar="TWINLOOP_TOKEN", help="Shared token of a remote:ADDRESS "
                                              "world.")),
           "executor": (str, typer.Option("serial", help=one_of(EXECUTORS, "Where episodes run:") + " (same results).")),
           "address": (str | None, typer.Option(None, help="Ray cluster address (default: a local Ray instance)."))},
    doc="""Base proposer vs refined controller on the same seeds (the demo's experiment, every
    choice configurable). Settings: library default < the task's defaults < --recipe < these
    options and --set; summary.json records where each came from.""")


@guard
def recipes():
    """List the shipped recipes: what each runs, its published result and its command."""
    for name in recipe_names():
        r = load_recipe(name)
        console.print(f"[bold]{name}[/]  {r.command_line()}", soft_wrap=True, highlight=False)
        console.print(f"  {r.description}", soft_wrap=True, highlight=False)
        console.print(f"  published: {published(r)}", soft_wrap=True, highlight=False)


@guard
def fields(command: str = typer.Argument("run", help="The command whose settings to list.")):
    """List every setting of a command's config: its path (for --set and recipes), type,
    library default and description."""
    cls = CONFIGS.get(command)
    if cls is None:
        raise TwinloopError(f"no generated settings for command {command!r}: known are {', '.join(CONFIGS)}")
    lib = cls()
    console.print(f"[bold]twinloop {command}[/] settings (--set PATH=VALUE, or a recipe's \\[config]):")
    for path in leaf_paths(cls):
        console.print(f"  [bold]{path}[/] ({type_name(field_type(cls, path))}; default {get_path(lib, path)!r}): "
                      f"{path_doc(cls, path)}", soft_wrap=True, highlight=False)


def tasks():
    """List the registered tasks (and those installed packages register as entry points of
    group twinloop.tasks), what they ask and their default parameters. A task of your own
    needs no registration: --task path/to/file.py:Class or package.module:Class."""
    t = Table(title="tasks")
    for c in ("name", "actions", "control period", "episode ticks", "parameters", "description"):
        t.add_column(c)
    for name in [*TASKS, *sorted(set(plugins.entry_points("task")) - set(TASKS))]:
        try:
            task = make_task(name)
            task.model  # noqa: B018 - a task whose scene cannot load says why in its row
        except TwinloopError as exc:
            t.add_row(name, "", "", "", "", f"[red]unavailable:[/] {exc}")
            continue
        t.add_row(name, str(task.nu), f"{task.control_period:g} s", str(task.max_ticks),
                  ", ".join(task.param_space().names), task.description())
    console.print(t)


COMMANDS = (demo, run, tasks, recipes, fields)
CONFIGS = {"run": RunConfig, "rsr": RSRConfig, "distill": DistillConfig, "evaluate": EvaluateConfig,
           "calibrate": CalibrateConfig}
