"""`twinloop distill`'s defaults: push-t's task defaults choose the learner and data that succeed
alone; every other task, and every recipe that builds a distilled base, resolves to what it did
before those defaults existed (tests/distill_recipe_configs.json: the effective configs, field
by field, as the library resolved them then, for the library, each task and each recipe)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.cli.generate import resolve
from twinloop.recipes import load_recipe
from twinloop.run.config import configure, get_path, leaf_paths
from twinloop.run.distill import DistillConfig
from twinloop.tasks import TASKS, task_defaults, task_factory
from twinloop.tasks.rope_shape import QUICK_SWING, RopeShape

BEFORE = json.loads((Path(__file__).with_name("distill_recipe_configs.json")).read_text())
#: what push-t's defaults choose for distill (docs/findings/distillation.md)
PUSH_T = {"policy.residual": True, "policy.frame": True, "policy.learner": "local", "policy.neighbours": 64,
          "policy.ridge": 1.0, "collect": 100, "twin_dagger": 200}
#: task defaults changed since the snapshot on purpose, not by distill's: the quadruped calibrates
#: its positions weighed by its sensors' noise, the fit polished (docs/findings/legged.md)
#: and block-push plans at the knee of its success-vs-compute curve (results/tables/knee-confirm.json)
KNEE = {"block-push": {"planner.refiner.num_samples": 16, "planner.refiner.horizon": 0.25,
                       "planner.twin_timestep": 0.02}}
CHANGED_SINCE = {"quadruped-walk": {"calib.weigh_by_noise", "calib.start_noise", "calib.use_velocity",
                                    "calib.polish_evals"}, **{t: set(v) for t, v in KNEE.items()}}


def _values(cfg) -> dict:
    return {p: (list(v) if isinstance(v, tuple) else v) for p in leaf_paths(DistillConfig)
            for v in [get_path(cfg, p)]}


def _differing(got: dict, want: dict, skip=()) -> list[str]:
    return [f"{p}: {got.get(p)!r} != {want[p]!r}" for p in sorted(want) if p not in skip and got.get(p) != want[p]]


def test_push_t_distill_defaults_are_the_residual_memory_evaluated_at_k():
    cfg, sources, _ = resolve(DistillConfig, "distill", None, {})
    assert cfg.experiment.task == "push-t"
    assert {p: get_path(cfg, p) for p in PUSH_T} == PUSH_T
    assert all(sources[p] == "task" for p in [*PUSH_T, "k_sweep"])
    # the rounds and baselines at K alone: the goal's evidence (alone and refined, every round)
    assert cfg.k_sweep == (cfg.planner.refiner.num_samples,) == (32,)
    assert cfg.baselines == ("refined", "scripted+refined") and cfg.rounds == 3
    # everything else as before
    assert _differing(_values(cfg), BEFORE["task:push-t"], skip={*PUSH_T, "k_sweep"}) == []


def test_the_library_distill_defaults_are_unchanged_and_other_tasks_keep_them():
    assert _differing(_values(DistillConfig()), BEFORE["library"]) == []
    for task in sorted(set(TASKS) - {"push-t"}):
        cfg, sources, _ = resolve(DistillConfig, "distill", None, {"experiment.task": task})
        assert _differing(_values(cfg), BEFORE[f"task:{task}"], skip=CHANGED_SINCE.get(task, ())) == [], task
        assert all(sources[p] == "task" for p in CHANGED_SINCE.get(task, ()))
        assert {p: get_path(cfg, p) for p in KNEE.get(task, {})} == KNEE.get(task, {}), task
        assert sources["policy.learner"] == sources["policy.residual"] == sources["collect"] == "library"


@pytest.mark.parametrize("name", ["cloth-fold-c32-base", "cloth-fold-c64-base", "rope-ns30-base"])
def test_a_recipe_that_builds_a_distilled_base_resolves_to_what_it_built(name):
    rec = load_recipe(name)  # its settings as written ({recipe:...} placeholders kept, nothing built)
    cfg, _ = configure(DistillConfig, task_defaults(rec.settings["experiment.task"]), rec.settings)
    # the rope's recipe names the task whose swing taught it (rope-shape's own swing changed since)
    moved = {"experiment.task"} if name.startswith("rope") else set()
    assert _differing(_values(cfg), BEFORE[name], skip=moved) == []
    if moved:
        task = task_factory(cfg.experiment.task)
        assert task.name == BEFORE[name]["experiment.task"] and task.swing == QUICK_SWING != RopeShape.swing


def test_a_command_line_option_overrides_a_push_t_default_and_the_summary_says_where_each_came_from(tmp_path):
    out = tmp_path / "d"
    args = ["distill", "--posterior", "nominal", "--rounds", "1", "--collect", "1", "--episodes", "1", "-k", "4",
            "--baselines", "", "--max-ticks", "3", "--learner", "neighbours", "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["config"]["policy"]["learner"] == "neighbours" and s["config_sources"]["policy.learner"] == "cli"
    assert s["config"]["policy"]["residual"] is True and s["config_sources"]["policy.residual"] == "task"
    assert s["config"]["policy"]["neighbours"] == 64 and s["config_sources"]["policy.neighbours"] == "task"
    assert s["config_sources"]["collect"] == "cli" and s["config_sources"]["policy.steps"] == "library"
    assert s["config"]["k_sweep"] == [4]  # push-t's sweep: K alone, whatever K is
