"""`twinloop calibrate` and `twinloop rsr`: fit a twin to recorded episodes; run the RSR loop."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from twinloop.calib.fit import calibrate as fit
from twinloop.cli.common import (
    console,
    executor_options,
    one_of,
    progress_bar,
)
from twinloop.cli.generate import config_command
from twinloop.data import Dataset, load_lerobot
from twinloop.errors import TwinloopError, number
from twinloop.io import out_mode, output_folder, write_json
from twinloop.params import ParamSpace
from twinloop.run.calibrate import CalibrateConfig
from twinloop.run.executor import EXECUTORS
from twinloop.run.rsr import RSRConfig, RSRLoop, rsr_table
from twinloop.tasks import make_task


def _names(text: str) -> tuple[str, ...] | None:
    names = tuple(v for v in text.replace(" ", "").split(",") if v)
    return names or None


def _start_noise(text: str) -> tuple[float, ...] | None:
    """``"0.001,0.01,0"`` -> ``(0.001, 0.01, 0.0)``; ``""`` -> ``None`` (CalibConfig checks the rest)."""
    parts = _names(text)
    if parts is None:
        return None
    try:
        return tuple(float(v) for v in parts)
    except ValueError:
        raise TwinloopError(f"--start-noise must be three numbers 'POSITION,ANGLE,VELOCITY' (m, rad, m/s), "
                            f"got {text!r}") from None


def parse_column_map(text: str) -> dict[str, str | None]:
    """``"obs=observation.state,action=action,timestamp="`` -> ``{field: column or None}``."""
    out: dict[str, str | None] = {}
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if "=" not in item:
            raise TwinloopError(f"column map entries look like field=column, got {item!r}")
        k, v = (s.strip() for s in item.split("=", 1))
        out[k] = v or None
    return out


def load_episodes(task: str | None, dataset: str, lerobot: bool, column_map: str, fps: float):
    """Episodes from a twinloop dataset folder, or foreign LeRobot Parquet with a column map.

    Returns ``(task, episodes, world)``. A twinloop dataset names the task it was recorded on:
    ``task`` may be ``None`` (use it) but must not contradict it; foreign data need ``task``.
    """
    if not Path(dataset).exists():
        raise TwinloopError(f"no such dataset: {dataset}")
    if lerobot or column_map:
        if task is None:
            raise TwinloopError("--task is required for foreign LeRobot data (it does not name a twinloop task)")
        t = make_task(task)
        fps = 1.0 / t.control_period if fps == 0 else number(fps, "--fps", low=0, low_open=True)
        eps = load_lerobot(dataset, parse_column_map(column_map), fps=fps)
        return t, eps, {"world": "lerobot", "source": str(dataset)}
    ds = Dataset(dataset)
    recorded = ds.info.get("twinloop", {}).get("task")
    if task is not None and recorded and recorded != task:
        raise TwinloopError(f"dataset {dataset} was recorded on task {recorded!r}, not {task!r}; "
                            "drop --task or pass the dataset's task")
    if task is None and not recorded:
        raise TwinloopError(f"dataset {dataset} does not name its task; pass --task")
    t = make_task(task or recorded)
    world = ds.info.get("twinloop", {}).get("world", {"world": "dataset", "source": str(dataset)})
    return t, ds.episodes(), world


def recorded_task(extra: dict) -> str | None:
    """The task a twinloop dataset (``extra["dataset"]``) was recorded on, whose defaults the
    calibration starts from; ``None`` for anything else (the command then says what is wrong)."""
    try:
        return Dataset(extra["dataset"]).info.get("twinloop", {}).get("task")
    except (TwinloopError, OSError, ValueError, KeyError):
        return None


CALIBRATE_OPTIONS = {
    "task": ("task",),
    "calib.method": ("method",),
    "params": ("params",),
    "kinds": ("kinds",),
    "bodies": ("bodies",),
    "calib.window": ("window",),
    "calib.stride": ("stride",),
    "calib.start_clearance": ("start-clearance",),
    "calib.start_quiet": ("start-quiet",),
    "calib.max_evals": ("max-evals",),
    "calib.errors_in_variables": ("errors-in-variables",),
    "calib.start_samples": ("start-samples",),
    "calib.start_noise": ("start-noise",),
    "calib.weigh_by_noise": ("weigh-by-noise",),
    "calib.start_iterations": ("start-iterations",),
    "calib.bootstrap": ("bootstrap",),
    "calib.keep_if_worse": ("keep-if-worse",),
    "calib.delay_steps": ("delay-steps",),
    "calib.holdout_fraction": ("holdout",),
    "calib.particles": ("particles",),
    "lerobot": ("lerobot",),
    "column_map": ("column-map",),
    "fps": ("fps",),
    "calib.seed": ("seed",),
    "out": ("out",),
    "structures": ("structures",),
}


def _calibrate_body(cfg: CalibrateConfig, sources: dict, recipe, *, dataset: str, overwrite: bool) -> None:
    c = cfg.calib
    t, eps, world = load_episodes(cfg.task, dataset, cfg.lerobot, cfg.column_map, cfg.fps or 0.0)
    space = t.param_space()
    if cfg.kinds:
        space = ParamSpace.from_model(t.model, cfg.bodies, cfg.kinds)
    if cfg.params:
        space = space.subset(cfg.params)
    o = output_folder(cfg.out, out_mode(overwrite=overwrite))  # before the fit: an unwritable --out fails now
    console.print(f"[bold]twinloop calibrate[/] {t.name}: {len(eps)} episodes, {c.method}, "
                  f"parameters {', '.join(space.names)}")
    with Progress(TextColumn("[bold]{task.description:<10}"), BarColumn(), TextColumn("{task.completed}/{task.total} evals"),
                  TextColumn("best {task.fields[best]:.4g}"), TimeElapsedColumn(), console=console) as prog:
        bar = prog.add_task("calibrate", total=c.max_evals, best=float("nan"))
        post = fit(t, eps, space, config=c, progress=lambda n, f: prog.update(bar, completed=min(n, c.max_evals), best=f))
    console.print(post.report())
    if cfg.structures:
        post.structure = _structure(t, eps, post, cfg)
        console.print(post.structure["choice"]["reason"])
    summary = {"task": t.name, "world": world, "seed": c.seed, "episodes": len(eps), "results": [],
               "calibration": post.to_dict(), "space": space.to_dict(), "config": c.__dict__, "dataset": str(dataset),
               "config_sources": sources}
    write_json(o / "posterior.json", post.to_dict(), allow_nan=False)
    write_json(o / "summary.json", {**summary, "structure": post.structure}, allow_nan=False)
    console.print(f"wrote {o / 'summary.json'}, {o / 'posterior.json'}")


def _structure(task, eps, post, cfg: CalibrateConfig) -> dict:
    """The twin chosen among ``cfg.structures``, the fit and the nominal values, on the
    episodes the fit held out (the same split)."""
    from twinloop.calib.structure import choose_structure
    from twinloop.calib.windows import as_trajectories, split_episodes

    c = cfg.calib
    _, held = split_episodes(as_trajectories(task, eps), c.holdout_fraction, c.seed)
    return choose_structure(task, held, post, cfg.structures, c.acceptance)[1]


calibrate = config_command(
    CalibrateConfig, "calibrate", CALIBRATE_OPTIONS, _calibrate_body,
    extra={"dataset": (str, typer.Argument(..., help="A twinloop dataset folder, or LeRobot Parquet (with --lerobot).")),
           "overwrite": (bool, typer.Option(False, help="Replace an earlier twinloop output in --out."))},
    doc="Fit the twin's physical parameters to recorded episodes; report how well each is pinned down.",
    task_path="task", task_of=recorded_task)


RSR_OPTIONS = {
    "experiment.task": ("task",),
    "experiment.severity": ("severity",),
    "experiment.world_seed": ("world-seed",),
    "rounds": ("rounds", "--iterations"),
    "experiment.episodes": ("episodes",),
    "eval_episodes": ("eval-episodes",),
    "experiment.max_ticks": ("max-ticks",),
    "beta": ("beta",),
    "params": ("params",),
    "planner.particles": ("particles",),
    "calib.method": ("method",),
    "calib.window": ("window",),
    "calib.max_evals": ("max-evals",),
    "calib.errors_in_variables": ("errors-in-variables",),
    "gap.metric": ("gap-metric",),
    "proposer": ("proposer",),
    "planner.optimizer": ("optimizer",),
    "planner.noise": ("noise",),
    "planner.refiner.num_samples": ("num-samples", "-k"),
    "planner.refiner.horizon": ("horizon",),
    "experiment.seed": ("seed",),
    "experiment.out": ("out",),
}


def _rsr_body(cfg: RSRConfig, sources: dict, recipe, *, resume: bool, overwrite: bool, executor: str,
              address: str | None) -> None:
    with executor_options(executor, address) as ex:
        loop = RSRLoop(cfg, cfg.experiment.out, mode=out_mode(resume, overwrite), executor=ex, sources=sources)
        _run_rsr(loop, cfg)


rsr = config_command(
    RSRConfig, "rsr", RSR_OPTIONS, _rsr_body,
    extra={"resume": (bool, typer.Option(False, help="Continue the unfinished run in --out (same options).")),
           "overwrite": (bool, typer.Option(False, help="Replace an earlier twinloop output in --out.")),
           "executor": (str, typer.Option("serial", help=one_of(EXECUTORS, "Where episodes run:") + " (same results).")),
           "address": (str | None, typer.Option(None, help="Ray cluster address (default: a local Ray instance)."))},
    doc="""The Real-Sim-Real loop on a ShiftedWorld: collect (InfoGap) -> calibrate -> evaluate. The
    collecting controller's planner starts from the task's defaults, as `twinloop run` does.""")


def _run_rsr(loop: RSRLoop, cfg: RSRConfig) -> None:
    out = loop.out
    done = loop.completed
    if done >= 0:
        console.print(f"resuming {out}: rounds up to {done} are done")
    console.print(f"[bold]twinloop rsr[/] {cfg.task}, severity {cfg.severity}: {cfg.rounds} round(s), "
                  f"beta={cfg.beta:g}, {cfg.calib.method}")
    per_round = cfg.episodes + cfg.eval_episodes
    total = (cfg.eval_episodes if done < 0 else 0) + per_round * max(cfg.rounds - max(done, 0), 0)
    with progress_bar() as prog:
        bars = {"episodes": prog.add_task("episodes", total=total),
                "fits": prog.add_task("calibrate", total=max(cfg.rounds - max(done, 0), 0))}

        def tick(stage, n):
            prog.advance(bars["fits" if stage == "calibrate" else "episodes"], n)

        res = loop.run(progress=tick, log=console.print)
    console.print(rsr_table(res.summary))
    if res.posterior is not None:
        console.print(res.posterior.report(truth=[res.summary["truth"][n] for n in res.posterior.names]
                                           if res.summary.get("truth") else None))
    console.print("wrote " + ", ".join(str(p) for p in res.paths.values()))


COMMANDS = (calibrate, rsr)
