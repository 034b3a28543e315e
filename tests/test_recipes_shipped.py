"""Every shipped recipe loads, resolves to a valid config, and runs end to end (what it needs
built first) at a size a test can afford: the same recipe with its episode counts, samples
and training steps cut down, run once."""

import json
import sys

import pytest
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.cli.run import CONFIGS
from twinloop.recipes import load_recipe, recipe_names
from twinloop.recipes.build import PLACEHOLDER
from twinloop.run.config import configure
from twinloop.tasks import task_defaults

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

runner = CliRunner()

#: what a test-sized run of each command changes
SMALL = {
    "run": {"experiment.episodes": 1, "experiment.max_ticks": 3, "planner.refiner.num_samples": 4},
    "distill": {"collect": 1, "experiment.episodes": 1, "experiment.max_ticks": 4, "calib_episodes": 1,
                "calib_ticks": 10, "calib.max_evals": 4, "policy.steps": 4, "k_sweep": [4],
                "planner.refiner.num_samples": 4},
}


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def _dump(data: dict, prefix: str = "") -> str:
    scalars = [f"{k} = {_toml(v)}" for k, v in data.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
    out = ([f"[{prefix}]"] if prefix and scalars else []) + scalars
    for k, v in tables:
        out += ["", _dump(v, f"{prefix}.{k}" if prefix else k)]
    return "\n".join(out)


def _set_path(table: dict, path: str, value) -> None:
    *head, last = path.split(".")
    for k in head:
        table = table.setdefault(k, {})
    table[last] = value


def _small_copy(name: str, folder) -> str:
    rec = load_recipe(name)
    data = tomllib.loads(open(rec.path).read())
    for path, value in SMALL[rec.command].items():
        _set_path(data.setdefault("config", {}), path, value)
    refiner = data["config"].get("planner", {}).get("refiner", {})
    if "carry" in refiner:  # the carried plans must fit the cut-down batch (at most K - 2)
        refiner["carry"] = min(refiner["carry"], refiner["num_samples"] - 2)
    data["needs"] = [f"{n}.toml" for n in data.get("needs", [])]
    (folder / f"{name}.toml").write_text(_dump(data) + "\n")
    return str(folder / f"{name}.toml")


@pytest.mark.parametrize("name", recipe_names())
def test_every_recipe_resolves_to_a_valid_config(name):
    rec = load_recipe(name)
    assert rec.description and rec.command in CONFIGS or rec.command == "calibrate"
    settings = {k: PLACEHOLDER.sub("/built", v) if isinstance(v, str) else v for k, v in rec.settings.items()}
    cfg, sources = configure(CONFIGS[rec.command], task_defaults(settings["experiment.task"]), settings, {})
    assert all(sources[k] == "recipe" for k in settings)
    if rec.result:  # a published result says what it was and where it came from
        assert {"successes", "episodes", "source"} <= set(rec.result)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in recipe_names() if load_recipe(n).command == "run"])
def test_every_run_recipe_runs_with_what_it_needs_built(name, tmp_path, monkeypatch, shared_cache):
    # one cache for all: a base two recipes need is built once (a build is keyed by its recipe's text)
    monkeypatch.setenv("TWINLOOP_CACHE", str(shared_cache))
    todo = [name]
    while todo:  # the recipe and everything it needs, cut down, side by side
        n = todo.pop()
        _small_copy(n, tmp_path)
        todo += list(load_recipe(n).needs)
    out = tmp_path / "out"
    res = runner.invoke(app, ["run", "--recipe", str(tmp_path / f"{name}.toml"), "--out", str(out), "--no-video"])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["episodes"] == 1 and [r["controller"] for r in s["results"]][-1] == "refined"
