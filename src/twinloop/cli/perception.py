"""`twinloop perception train|evaluate`: a perception model learned from the twin's renders."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from twinloop.cli.common import console
from twinloop.cli.generate import config_command
from twinloop.perception.train import PerceptionConfig

group = typer.Typer(no_args_is_help=True, help="Perception: the twin's state from camera images (needs PyTorch).")

TRAIN_OPTIONS = {name: (name.replace("_", "-"),) for name in
                 ("task", "samples", "near_goal", "epochs", "size", "width", "batch", "lr", "seed", "threads", "fine", "coarse", "members", "severity",
                  "eval_worlds", "eval_states", "shifts", "out")}


def _report(cfg: PerceptionConfig, model, extra: dict) -> dict:
    """Evaluate ``model`` on held-out appearances; print and return the report."""
    from twinloop.perception import evaluate_perception

    ev = evaluate_perception(model, cfg.severity, cfg.eval_worlds, cfg.eval_states, cfg.seed)
    for where, e in (("", ev), ("near the goal: ", ev.get("near_goal", {}))):
        for what, unit in (("position_error", "mm"), ("angle_error", "deg")):
            if f"{what}_mean_{unit}" in e:
                console.print(f"{where}{what.replace('_', ' ')}: mean {e[f'{what}_mean_{unit}']:.3g} {unit}, "
                              f"95th percentile {e[f'{what}_p95_{unit}']:.3g} {unit}")
    console.print(f"{ev['ms_per_frame']:.2f} ms per frame ({ev['threads']} threads), {ev['frames']} frames")
    return {**extra, "held_out": ev}


def _train_body(cfg: PerceptionConfig, sources: dict, recipe) -> None:
    from twinloop.perception import train_perception

    model, rep = train_perception(cfg, log=console.print)
    sha = model.save(cfg.out)
    model.shifts = cfg.shifts  # the report evaluates it as asked
    report = _report(cfg, model, {"config": cfg.__dict__ | {"eval_worlds": list(cfg.eval_worlds)}, "sha256": sha,
                                  "training": rep})
    Path(cfg.out).with_suffix(".json").write_text(json.dumps(report, indent=2))
    console.print(f"wrote {cfg.out} (sha256 {sha[:12]}) and its report {Path(cfg.out).with_suffix('.json')}")


def _evaluate_body(cfg: PerceptionConfig, sources: dict, recipe, *, checkpoint: str, report: str | None) -> None:
    from twinloop.perception import load_perception

    model = load_perception(checkpoint, shifts=cfg.shifts)
    rep = _report(cfg, model, {})
    if report:
        command = (f"twinloop perception evaluate --checkpoint {checkpoint} --severity {cfg.severity} --eval-worlds "
                   f"{','.join(map(str, cfg.eval_worlds))} --eval-states {cfg.eval_states} --seed {cfg.seed}"
                   + (f" --shifts {cfg.shifts}" if cfg.shifts > 1 else ""))
        flat = {"task": model.meta.task, "checkpoint": checkpoint, "command": command, "shifts": cfg.shifts,
                **rep["held_out"]}
        Path(report).write_text(json.dumps(flat, indent=2) + "\n")
        console.print(f"wrote {report}")


train = config_command(PerceptionConfig, "perception", TRAIN_OPTIONS, _train_body, task_path="task",
                       doc="""Render the twin in random states under random appearance, train a small CNN
                       mapping an image to the task's keypoints, write the checkpoint (--out) and its
                       evaluation on held-out appearances (beside it, .json).""")
evaluate = config_command(PerceptionConfig, "perception", {k: v for k, v in TRAIN_OPTIONS.items()
                                                           if k in ("severity", "eval_worlds", "eval_states", "seed", "shifts")},
                          _evaluate_body, task_path="task",
                          extra={"checkpoint": (str, typer.Option(..., help="The checkpoint to evaluate (a file, or a "
                                                                   "shipped model by its task's name).")),
                                 "report": (str | None, typer.Option(None, help="Also write the numbers to this "
                                                                     "JSON file."))},
                          doc="""Measure a perception checkpoint on held-out appearances: position and
                          angle errors (mean, 95th percentile) and milliseconds per frame.""")
group.command("train")(train)
group.command("evaluate")(evaluate)

GROUPS = {"perception": group}
