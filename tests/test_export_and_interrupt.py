"""Run episodes carry their refined plans into a LeRobot export that `dataset check` verifies;
Ctrl-C stops a command between engine calls and keeps what was recorded."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import typer
from rich.progress import TimeRemainingColumn
from typer.testing import CliRunner

import twinloop.twin.mujoco as mj_backend
from twinloop.cli import app
from twinloop.cli.common import guard, progress_bar
from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.data import Dataset, check, export_lerobot, recorded_on
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.run.experiment import run_episodes
from twinloop.twin import make_twin
from twinloop.worlds import SimWorld

runner = CliRunner()


def _controller(task, horizon=0.3):
    refiner = Refiner(task, make_twin("mujoco", task.model, nthread=1), make_optimizer("mppi"),
                      RefinerConfig(num_samples=8, horizon=horizon))
    return Controller(refiner, task.default_proposer())


@pytest.fixture(scope="module")
def recorded(block_push, tmp_path_factory):
    root = tmp_path_factory.mktemp("run") / "refined"
    ds = Dataset.create(root, {"fps": 10, **recorded_on(block_push)})
    run_episodes(SimWorld(block_push), _controller(block_push), [0, 1], dataset=ds, max_ticks=4)
    return root


def test_run_episodes_record_the_plan_each_tick_sent(recorded, block_push):
    ep = Dataset(recorded).read(0)
    assert ep.plans is not None and ep.plans.shape == (4, 3, block_push.nu)
    np.testing.assert_allclose(ep.plans[:, 0], ep.actions)  # the plan's first action is the one sent


def test_the_lerobot_export_keeps_the_plans_and_verifies(recorded, tmp_path):
    out = export_lerobot(recorded, tmp_path / "export")
    assert "refine.plan" in pq.read_table(out / "data" / "chunk-000" / "file-000.parquet").column_names
    res = check(out)
    assert res.ok and (res.episodes, res.frames, res.verified) == (2, 8, 2), res.problems


def test_an_export_missing_a_declared_column_is_caught(recorded, tmp_path):
    out = export_lerobot(recorded, tmp_path / "export")
    data = out / "data" / "chunk-000" / "file-000.parquet"
    pq.write_table(pq.read_table(data).drop_columns(["refine.plan"]), data)
    res = check(out)
    assert not res.ok and "missing ['refine.plan']" in res.problems[0]


def test_an_export_with_a_frame_dropped_is_caught(recorded, tmp_path):
    out = export_lerobot(recorded, tmp_path / "export")
    data = out / "data" / "chunk-000" / "file-000.parquet"
    pq.write_table(pq.read_table(data).slice(1), data)
    assert not check(out).ok


def test_dataset_export_command_writes_a_verified_export(recorded, tmp_path):
    res = runner.invoke(app, ["dataset", "export", str(recorded), str(tmp_path / "x")])
    assert res.exit_code == 0 and "2 episodes, 8 frames, verified" in res.output, res.output
    assert json.loads((tmp_path / "x" / "meta" / "info.json").read_text())["codebase_version"] == "v3.0"
    res = runner.invoke(app, ["dataset", "check", str(tmp_path / "x")])
    assert res.exit_code == 0 and "all verified" in res.output, res.output
    res = runner.invoke(app, ["dataset", "export", str(recorded), str(tmp_path / "x")])
    assert res.exit_code == 2 and "--overwrite" in res.output


# -- sensible ranges, progress, Ctrl-C ---------------------------------------------------------


def test_a_horizon_longer_than_the_episode_is_refused_with_its_unit(block_push):
    with pytest.raises(TwinloopError, match=r"horizon 500 s is longer than a whole episode .* \(8 s = 80 ticks of 0.1 s\)"):
        _controller(block_push, horizon=500)


def test_progress_bars_show_the_time_remaining():
    assert any(isinstance(c, TimeRemainingColumn) for c in progress_bar().columns)


def test_long_rollouts_run_in_chunks_with_the_same_result(push_t, monkeypatch):
    twin = make_twin("mujoco", push_t.model, push_t.param_space(), nthread=1)
    s = push_t.initial_state(np.random.default_rng(0))
    u = np.random.default_rng(1).uniform(push_t.action_low, push_t.action_high, (6, 40, push_t.nu))
    whole = twin.rollout(s, u, params=push_t.param_space().sample_prior(np.random.default_rng(2), 2))
    calls = []
    real = twin._pool.rollout
    monkeypatch.setattr(twin._pool, "rollout", lambda *a, **kw: calls.append(1) or real(*a, **kw), raising=False)
    monkeypatch.setattr(mj_backend, "CHUNK_STEPS", 100)  # two trajectories of 41 steps per call
    chunked = twin.rollout(s, u, params=push_t.param_space().sample_prior(np.random.default_rng(2), 2))
    assert len(calls) == 6
    np.testing.assert_array_equal(whole.qpos, chunked.qpos)
    np.testing.assert_array_equal(whole.sensordata, chunked.sensordata)


class _Interrupted(SimWorld):
    """Ctrl-C arrives at the given tick of the second episode."""

    def __init__(self, task, at):
        super().__init__(task)
        self.at, self.episodes = at, 0

    def reset(self, seed):
        self.episodes += 1
        return super().reset(seed)

    def step(self, action):
        if self.episodes == 2 and self.t == self.at:
            raise KeyboardInterrupt
        return super().step(action)


def test_ctrl_c_keeps_every_finished_episode_and_the_cut_ones_frames(block_push, tmp_path):
    ds = Dataset.create(tmp_path / "d", {"fps": 10, **recorded_on(block_push)})
    with pytest.raises(KeyboardInterrupt):
        run_episodes(_Interrupted(block_push, at=2), _controller(block_push), [0, 1, 2], dataset=ds, max_ticks=4)
    res = check(tmp_path / "d")
    assert res.ok and res.episodes == 2 and res.frames == 4 + 3, res.problems
    assert not Dataset(tmp_path / "d").read(1).success


def test_the_cli_reports_ctrl_c_in_one_line_with_exit_code_130(capsys):
    @guard
    def command():
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as exit_:
        command()
    assert exit_.value.exit_code == 130
    assert "interrupted:" in capsys.readouterr().out
