"""Recipes: every shipped recipe loads and runs; the demo is its recipe; bad recipes say why."""

import json
from dataclasses import fields

import pytest
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.cli.generate import resolve
from twinloop.errors import TwinloopError
from twinloop.recipes import COMMANDS, load_recipe, recipe_names
from twinloop.run.compare import RunConfig
from twinloop.run.config import config_dict, field_type
from twinloop.tasks import task_defaults

runner = CliRunner()
#: what shortens a recipe to one episode, per command (the rest of the recipe runs as written)
ONE_EPISODE = {
    "run": ["--episodes", "1", "--no-video", "--no-record"],
    "rsr": ["--episodes", "1", "--eval-episodes", "1", "--rounds", "1"],
    "distill": ["--episodes", "1", "--rounds", "1", "--collect", "1", "--k-sweep", "", "--baselines", ""],
    "evaluate": ["--episodes", "1"],
}


def test_the_demo_recipe_is_shipped():
    assert "push-t-demo" in recipe_names()


@pytest.mark.parametrize("name", [n for n in recipe_names() if not load_recipe(n).needs
                                  and load_recipe(n).command != "distill"])
def test_every_recipe_runs_for_one_episode(name, tmp_path):
    """(Recipes that build a base first, and the distill steps that build them, run cut down
    in tests/test_recipes_shipped.py.)"""
    recipe = load_recipe(name)
    assert recipe.command in COMMANDS and recipe.description and recipe.result
    res = runner.invoke(app, [recipe.command, "--recipe", name, "--out", str(tmp_path), *ONE_EPISODE[recipe.command]])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "summary.json").read_text())
    if recipe.command == "run":
        assert all(s["config_sources"][p] == "recipe" for p in recipe.settings
                   if p not in ("experiment.episodes", "experiment.video", "experiment.record"))  # the command line's
        assert s["config_sources"]["experiment.episodes"] == "cli"


def test_the_demo_runs_its_recipe_and_the_recipe_is_a_users_default_run():
    # `twinloop demo` is `twinloop run --task push-t` (push-t's planner defaults) in the shifted
    # world, 20 episodes: what a user's default gives, and still the run it published
    # (RunConfig(): K=32, 0.5 s, 10 ms twin steps)
    cfg, sources, recipe = resolve(RunConfig, "run", "push-t-demo", {})
    user, _, _ = resolve(RunConfig, "run", None, {"experiment.task": "push-t", "experiment.world": "shifted"})
    # push-t's one run default beyond the library's reads camera images in four shifted copies
    # (a run given the pose, as this one, reads none)
    library = RunConfig(perception_shifts=task_defaults("push-t")["camera.shifts"])
    assert recipe.name == "push-t-demo" and config_dict(cfg) == config_dict(user) == config_dict(library)
    assert cfg.planner.refiner.num_samples == task_defaults("push-t")["planner.refiner.num_samples"]
    assert sources["planner.refiner.num_samples"] == "task" and sources["experiment.world"] == "recipe"


def test_the_demo_episodes_are_the_recipe_episodes(tmp_path):
    short = ["--episodes", "1", "--no-video"]
    demo = runner.invoke(app, ["demo", *short, "--out", str(tmp_path / "d")])
    recipe = runner.invoke(app, ["run", "--recipe", "push-t-demo", *short, "--no-record", "--out", str(tmp_path / "r")])
    assert demo.exit_code == 0 and recipe.exit_code == 0, demo.output + recipe.output
    d, r = (json.loads((tmp_path / x / "summary.json").read_text()) for x in ("d", "r"))
    assert d["per_episode"] == r["per_episode"]


def test_recipes_lists_each_with_its_result_and_command():
    out = " ".join(runner.invoke(app, ["recipes"]).output.split())
    assert "push-t-demo" in out and "twinloop run --recipe push-t-demo" in out and "20/20" in out


def test_every_recipe_setting_is_a_field_of_its_command():
    from twinloop.cli.run import CONFIGS

    for name in recipe_names():
        r = load_recipe(name)
        for path in r.settings:
            field_type(CONFIGS[r.command], path)


@pytest.mark.parametrize("text, message", [
    ('command = "fly"\n', "command must be one of run"),
    ('command = "run"\nepisodes = 3\n', "unknown keys ['episodes']"),
    ('command = "run"\n[config.planner]\nnum_samples = 8\n', "unknown setting 'planner.num_samples'"),
    ('command = "run"\n[config.experiment]\nepisodes = "many"\n', "experiment.episodes='many': expected an integer"),
    ('command = "run"\n[config', "is not valid TOML"),
    ('command = "evaluate"\n', "is for `twinloop evaluate`, not `twinloop run`"),
])
def test_a_bad_recipe_file_says_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    res = runner.invoke(app, ["run", "--recipe", str(path), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and message in " ".join(res.output.split()), res.output


def test_an_unknown_recipe_lists_the_shipped_ones():
    with pytest.raises(TwinloopError, match="unknown recipe 'nope': shipped recipes are .*push-t-demo"):
        load_recipe("nope")
    with pytest.raises(TwinloopError, match="does not exist"):
        load_recipe("missing.toml")


def test_a_recipe_is_frozen_and_names_its_command_line():
    r = load_recipe("push-t-demo")
    assert r.command_line() == "twinloop run --recipe push-t-demo"
    assert {f.name for f in fields(r)} >= {"name", "command", "description", "settings", "result"}


def test_calibrate_takes_a_recipe_and_its_options_override_it(tmp_path, monkeypatch):
    from twinloop.cli import calib as calib_cli
    from twinloop.tasks import make_task

    seen = {}

    def no_fit(task, eps, space, config, progress):
        seen["config"], seen["space"] = config, space.names
        raise TwinloopError("stop after the config")

    monkeypatch.setattr(calib_cli, "fit", no_fit)
    monkeypatch.setattr(calib_cli, "load_episodes", lambda *a: (make_task("block-push"), [], {}))
    path = tmp_path / "fit.toml"
    path.write_text('command = "calibrate"\n[config]\nparams = ["block_friction", "block_mass"]\n'
                    '[config.calib]\nmax_evals = 60\nwindow = 7\n')
    res = runner.invoke(app, ["calibrate", str(tmp_path), "--recipe", str(path), "--window", "9", "--out",
                              str(tmp_path / "o")])
    assert res.exit_code == 2 and "stop after the config" in res.output
    assert (seen["config"].max_evals, seen["config"].window) == (60, 9)
    assert seen["space"] == ["block_friction", "block_mass"]
