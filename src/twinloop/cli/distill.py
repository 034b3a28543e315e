"""`twinloop distill`: distill refined actions into a base policy and run the outer loop."""

from __future__ import annotations

import typer
from rich.table import Table

from twinloop.cli.common import (
    console,
    progress_ticks,
    results_table,
)
from twinloop.cli.generate import config_command
from twinloop.io import out_mode
from twinloop.run.distill import DistillConfig, run_distill


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def rounds_table(summary: dict):
    alone = {r.get("base_episodes", summary["episodes"]) for r in summary["rounds"] if "base_success" in r}
    each = f"{summary['episodes']} episodes" + ("" if alone <= {summary["episodes"]} else f", alone {max(alone)}")
    t = Table(title=f"outer loop: {summary['task']} (success over {each})")
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


DISTILL_OPTIONS = {
    "experiment.task": ("task",),
    "experiment.world": ("world",),
    "experiment.severity": ("severity",),
    "rounds": ("rounds",),
    "experiment.episodes": ("episodes",),
    "collect": ("collect",),
    "twin_dagger": ("twin-dagger",),
    "dagger_episodes": ("dagger-episodes",),
    "teacher": ("teacher",),
    "planner.refiner.num_samples": ("num-samples", "-k"),
    "planner.refiner.horizon": ("horizon",),
    "planner.optimizer": ("optimizer",),
    "planner.noise": ("noise",),
    "k_sweep": ("k-sweep",),
    "baselines": ("baselines",),
    "calib_episodes": ("calib-episodes",),
    "calib.max_evals": ("calib-evals",),
    "twin_worlds": ("posterior",),
    "policy.learner": ("learner",),
    "policy.frame": ("frame",),
    "policy.residual": ("residual",),
    "policy.steps": ("steps",),
    "policy.width": ("width",),
    "policy.depth": ("depth",),
    "experiment.max_ticks": ("max-ticks",),
    "experiment.seed": ("seed",),
    "experiment.out": ("out",),
}


def _distill_body(cfg: DistillConfig, sources: dict, recipe, *, overwrite: bool, resume: bool, budget: float) -> None:
    console.print(f"[bold]twinloop distill[/] {cfg.experiment.task}: {cfg.rounds} round(s), {cfg.planner.optimizer} "
                  f"K={cfg.planner.refiner.num_samples}, {cfg.experiment.world} world")
    with progress_ticks() as tick:
        summary = run_distill(cfg, progress=tick, log=console.print, mode=out_mode(resume, overwrite),
                              budget_s=budget or None, sources=sources)
    if summary["results"]:
        console.print(results_table(summary))
    console.print(rounds_table(summary))
    left = "" if summary["complete"] else " (not finished: --resume continues)"
    console.print(f"wall time {summary['wall_time_s']:.0f} s; wrote {cfg.experiment.out}/summary.json{left}")


distill = config_command(
    DistillConfig, "distill", DISTILL_OPTIONS, _distill_body,
    extra={"overwrite": (bool, typer.Option(False, help="Replace an earlier twinloop output in --out.")),
           "resume": (bool, typer.Option(False, help="Continue the unfinished run in --out (same options; --rounds "
                                               "may grow).")),
           "budget": (float, typer.Option(0.0, help="Stop at the first stage boundary after this many seconds (0: run "
                                           "to the end); --resume continues."))},
    doc="""Distill refined actions into a base policy; evaluate it alone and refined. The planner
    starts from the task's defaults, as `twinloop run` does.""")


COMMANDS = (distill,)
