"""Every world keeps the world contract a recording run relies on: a step period, a clock in
``info`` and episodes a dataset check verifies."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.data import Dataset, check
from twinloop.twin import make_twin
from twinloop.worlds import make_world
from twinloop.worlds.twin import ModelWorld

runner = CliRunner()


def test_a_world_without_its_own_period_steps_the_task_control_period(block_push):
    w = ModelWorld(block_push, make_twin("mujoco", block_push.model))
    assert w.period == block_push.control_period


def test_the_bullet_world_has_a_period_and_a_tick_clock(block_push):
    pytest.importorskip("pybullet")
    world = make_world(block_push, "bullet", noise=0)
    try:
        assert world.period == block_push.control_period
        world.reset(0)
        _, info = world.step(block_push.hold_action(block_push.initial_state(np.random.default_rng(0))))
        assert info["tick"] == 1 and info["time"] == pytest.approx(block_push.control_period)
    finally:
        world.close()


def test_run_in_the_bullet_world_records_episodes_that_verify(tmp_path):
    pytest.importorskip("pybullet")
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "--task", "block-push", "--world", "bullet", "--episodes", "1", "--max-ticks", "4",
                              "--num-samples", "8", "--no-video", "--out", str(out)])
    assert res.exit_code == 0, res.output
    for side in ("base", "refined"):
        c = check(out / "episodes" / side)
        assert c.ok and c.episodes == 1 and c.verified == 1, c.problems
        ds = Dataset(out / "episodes" / side)
        assert ds.info["fps"] == pytest.approx(10.0) and ds.info["twinloop"]["world"]["world"] == "bullet"
    assert json.loads((out / "summary.json").read_text())["task"] == "block-push"
