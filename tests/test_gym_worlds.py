"""Third-party gymnasium environments as worlds: named ``gym:MODULE:ENV_ID`` on the command
line (importing the module registers the env), and watched by the gap monitor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.errors import TwinloopError
from twinloop.run.compare import RunConfig, monitor_world
from twinloop.tasks import make_task
from twinloop.worlds import GymWorld, make_world

HERE = Path(__file__).parent
WORLD = "gym:thirdparty_envs:ThirdPartyBlockPush-v0"
ROUGH = "gym:thirdparty_envs:ThirdPartyRoughBlockPush-v0"
SMALL = ["--task", "block-push", "--episodes", "2", "--max-ticks", "30", "-k", "8", "--no-video", "--no-record"]


def test_a_third_party_env_runs_from_the_command_line(tmp_path):
    # a fresh process in the folder of the env's module: only the MODULE:ENV_ID name registers it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(sys.modules["twinloop"].__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "twinloop", "run", *SMALL, "--world", WORLD, "--out", str(out)],
                         cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr + res.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["world"]["env_id"] == "thirdparty_envs:ThirdPartyBlockPush-v0"
    assert s["world"]["control_period_source"] == "model.opt.timestep * frame_skip"
    assert [r["controller"] for r in s["results"]] == ["base", "refined"]
    assert all(len(rows) == 2 for rows in s["per_episode"].values())


def test_a_module_that_cannot_be_imported_is_named(tmp_path):
    res = CliRunner().invoke(app, ["run", *SMALL, "--world", "gym:no_such_module_here:Env-v0",
                                   "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "cannot import module 'no_such_module_here'" in " ".join(res.output.split())


def test_an_unregistered_namespace_hints_at_the_module_form():
    with pytest.raises(TwinloopError, match="MODULE:ENV_ID"):
        GymWorld("somepkg/Env-v0")


def test_a_third_party_env_world_is_seeded(block_push):
    w = make_world(block_push, WORLD)
    assert isinstance(w, GymWorld) and w.env_id == WORLD.removeprefix("gym:")
    a, b = w.reset(3), w.reset(3)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, w.reset(4))
    obs, info = w.step(block_push.hold_action(block_push.state_from_obs(a)))
    assert obs.shape == (len(block_push.obs_names),) and "success" in info


def _monitored(tmp_path, world):
    res = CliRunner().invoke(app, ["run", *SMALL, "--world", world, "--monitor", "flag", "--set", "monitor_episodes=2",
                                   "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    return json.loads((tmp_path / "summary.json").read_text())["monitor"]


def test_the_monitor_watches_a_gym_world_and_fires_when_it_differs_from_the_twin(tmp_path):
    same = _monitored(tmp_path / "same", WORLD)
    rough = _monitored(tmp_path / "rough", ROUGH)  # the block's friction 3x the twin's
    assert same["threshold"] == rough["threshold"] > 0  # calibrated in the twin's own scene both times
    assert same["nominal_world"]["world"] == "twin"
    assert same["alarms"] == 0
    assert rough["episodes_alarmed"] == 2


def test_the_monitors_nominal_world_takes_the_worlds_declared_noise():
    pytest.importorskip("pybullet")
    task = make_task("block-push")
    world = make_world(task, "bullet")
    try:
        nominal = monitor_world(RunConfig(task="block-push", world="bullet", monitor="flag"), task, world.period, world)
        assert world.period == task.control_period  # what a run sizes its episodes by
        np.testing.assert_array_equal(nominal.obs_noise, world.obs_noise)
        np.testing.assert_array_equal(nominal.params, task.param_space().nominal)
    finally:
        world.close()
