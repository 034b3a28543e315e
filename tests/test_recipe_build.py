"""Recipes that need another recipe's outputs: built once into the cache, reused, rebuilt when
the needed recipe changes; placeholders resolved; cycles and bad names refused."""

import json
import textwrap

import pytest
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.errors import TwinloopError
from twinloop.recipes import load_recipe
from twinloop.recipes.build import built_path, is_built, with_built

runner = CliRunner()

BASE = """
command = "run"
description = "a tiny block-push run whose folder another recipe uses"
[config]
proposer = "none"
[config.experiment]
task = "block-push"
world = "nominal"
episodes = 1
max_ticks = 2
video = false
record = false
[config.planner.refiner]
num_samples = 4
"""

CHILD = BASE.replace('description = "a tiny block-push run whose folder another recipe uses"',
                     'description = "writes into the folder the base recipe built"\nneeds = ["base.toml"]').replace(
    "record = false\n", 'record = false\nout = "{recipe:base}/child"\n')


@pytest.fixture
def recipes(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINLOOP_CACHE", str(tmp_path / "cache"))
    (tmp_path / "base.toml").write_text(textwrap.dedent(BASE))
    (tmp_path / "child.toml").write_text(textwrap.dedent(CHILD))
    return tmp_path


def test_a_needed_recipe_is_built_once_and_its_folder_fills_the_placeholder(recipes):
    child = load_recipe(str(recipes / "child.toml"))
    base = load_recipe(str(recipes / "base.toml"))
    assert not is_built(base)
    logs = []
    settings = with_built(child, logs.append)
    assert settings["experiment.out"] == f"{built_path(base)}/child"
    assert is_built(base) and (built_path(base) / "summary.json").is_file()
    assert len(logs) == 1 and "building recipe 'base'" in logs[0]
    with_built(child, logs.append)
    assert len(logs) == 1  # reused, not rebuilt
    (recipes / "base.toml").write_text(textwrap.dedent(BASE).replace("episodes = 1", "episodes = 2"))
    assert not is_built(load_recipe(str(recipes / "base.toml")))  # the recipe changed: stale


def test_run_recipe_builds_what_it_needs_then_runs(recipes):
    res = runner.invoke(app, ["run", "--recipe", str(recipes / "child.toml")])
    assert res.exit_code == 0, res.output
    base = load_recipe(str(recipes / "base.toml"))
    s = json.loads((built_path(base) / "child" / "summary.json").read_text())
    assert s["config_sources"]["experiment.out"] == "recipe"


def test_recipe_build_command_builds_and_reports_status(recipes):
    res = runner.invoke(app, ["recipe", "status", str(recipes / "child.toml")])
    assert res.exit_code == 0 and "base: not built" in res.output
    res = runner.invoke(app, ["recipe", "build", str(recipes / "child.toml")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["recipe", "status", str(recipes / "child.toml")])
    assert "base: built" in res.output


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('needs = ["base.toml"]', 'needs = "base"'), "needs must be a list of recipe names"),
    (lambda t: t.replace("{recipe:base}", "{recipe:other}"), "names a recipe it does not list in needs"),
    (lambda t: t.replace('needs = ["base.toml"]', 'needs = ["child.toml"]'), "needs itself"),
])
def test_bad_needs_are_refused(recipes, edit, message):
    (recipes / "child.toml").write_text(edit(textwrap.dedent(CHILD)))
    with pytest.raises(TwinloopError, match=message):
        with_built(load_recipe(str(recipes / "child.toml")), print)


def test_a_base_recipe_says_whether_it_is_built_itself_and_who_needs_it(tmp_path, monkeypatch):
    from twinloop.cli.recipe import needed_by

    monkeypatch.setenv("TWINLOOP_CACHE", str(tmp_path / "cache"))
    users = needed_by(load_recipe("cloth-fold-c64-base"))
    assert "cloth-fold-held-out" in users and "cloth-fold-c64-base" not in users
    assert needed_by(load_recipe("push-t-demo")) == []
    res = runner.invoke(app, ["recipe", "status", "cloth-fold-c64-base"])
    assert res.exit_code == 0, res.output
    assert "cloth-fold-c32-base: not built" in res.output
    assert "cloth-fold-c64-base itself: not built" in res.output
