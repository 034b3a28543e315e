"""Distilled base policies (behaviour cloning of refined actions) and the outer distill loop."""

import json
import sys

import numpy as np
import pytest

from twinloop.control import RefinerConfig
from twinloop.errors import TwinloopError
from twinloop.policies.distilled import (
    Demo,
    DistilledPolicy,
    PolicyConfig,
    chunk_targets,
    require_torch,
)
from twinloop.run.distill import DistillConfig, min_k, run_distill
from twinloop.tasks import make_task


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


def synthetic_demos(task, n=6, T=30, seed=0):
    """Demos whose action is a smooth function of the observation (learnable, not constant)."""
    rng = np.random.default_rng(seed)
    demos = []
    for _ in range(n):
        obs = rng.normal(0.0, 0.05, (T, len(task.obs_names)))
        act = np.clip(obs[:, 0:2] + 0.5 * (obs[:, 2:4] - obs[:, 0:2]) + 0.2 * np.sin(obs[:, 4:5]), -0.3, 0.3)
        demos.append(Demo(obs, act))
    return demos


CFG = PolicyConfig(chunk=5, hidden=(32, 32), epochs=40, batch_size=32, seed=0)


@pytest.fixture(scope="module")
def trained(torch, task):
    return DistilledPolicy.fit(task, synthetic_demos(task), CFG)


def test_training_reduces_loss_on_a_fixed_dataset(trained, task):
    policy, log = trained
    assert len(log.losses) == CFG.epochs
    assert log.losses[-1] < 0.5 * log.losses[0]
    assert policy.loss(synthetic_demos(task)) < log.losses[0]


def test_training_is_deterministic_for_a_seed(trained, task):
    policy, _ = trained
    again, _ = DistilledPolicy.fit(task, synthetic_demos(task), CFG)
    obs = synthetic_demos(task, n=1, seed=5)[0].obs[3]
    np.testing.assert_array_equal(policy.propose(obs, None), again.propose(obs, None))


def test_propose_returns_a_chunk_within_action_bounds(trained, task):
    policy, _ = trained
    chunk = policy.propose(np.full(len(task.obs_names), 0.2), None)
    assert chunk.shape == (CFG.chunk, task.nu)
    assert np.all(chunk >= task.action_low) and np.all(chunk <= task.action_high)


def test_sample_is_seeded_and_shaped(trained, task):
    policy, _ = trained
    obs = synthetic_demos(task, n=1, seed=3)[0].obs[0]
    a = policy.sample(obs, None, 7, np.random.default_rng(1))
    b = policy.sample(obs, None, 7, np.random.default_rng(1))
    c = policy.sample(obs, None, 7, np.random.default_rng(2))
    assert a.shape == (7, CFG.chunk, task.nu)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_saved_policy_reloads_with_identical_outputs(trained, task, tmp_path):
    policy, _ = trained
    path = policy.save(tmp_path / "p.pt")
    loaded = DistilledPolicy.load(path, task)
    obs = synthetic_demos(task, n=1, seed=4)[0].obs
    for o in obs[:5]:
        np.testing.assert_array_equal(policy.propose(o, None), loaded.propose(o, None))
    np.testing.assert_array_equal(policy.sample(obs[0], None, 3, np.random.default_rng(0)),
                                  loaded.sample(obs[0], None, 3, np.random.default_rng(0)))
    assert loaded.metadata()["task"] == "block-push" and loaded.metadata()["chunk"] == CFG.chunk


def test_loading_a_policy_for_another_task_fails_clearly(trained, tmp_path):
    policy, _ = trained
    path = policy.save(tmp_path / "p.pt")
    with pytest.raises(TwinloopError, match="trained for task 'block-push'"):
        DistilledPolicy.load(path, make_task("push-t"))


def test_loading_a_policy_with_another_action_dim_fails_clearly(torch, trained, task, tmp_path):
    policy, _ = trained
    path = policy.save(tmp_path / "p.pt")
    blob = torch.load(path, weights_only=True)
    blob["meta"]["action_dim"] = 3
    torch.save(blob, path)
    with pytest.raises(TwinloopError, match="3-dim actions"):
        DistilledPolicy.load(path, task)


def test_loading_something_else_fails_clearly(torch, task, tmp_path):
    bad = tmp_path / "junk.pt"
    bad.write_text("not a policy")
    with pytest.raises(TwinloopError, match="not a readable twinloop policy"):
        DistilledPolicy.load(bad, task)
    with pytest.raises(TwinloopError, match="no distilled policy"):
        DistilledPolicy.load(tmp_path / "missing.pt", task)


def test_without_torch_building_a_policy_names_the_learn_extra(task, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(TwinloopError, match=r"twinloop\[learn\]"):
        require_torch()
    with pytest.raises(TwinloopError, match=r"twinloop\[learn\]"):
        DistilledPolicy.fit(task, synthetic_demos(task, n=1))


def test_training_without_demos_fails_clearly(torch, task):
    with pytest.raises(TwinloopError, match="no demonstrations"):
        DistilledPolicy.fit(task, [], CFG)


def test_chunk_targets_hold_the_last_action_past_the_end():
    a = np.arange(8, dtype=float).reshape(4, 2)
    y = chunk_targets(a, 3)
    assert y.shape == (4, 3, 2)
    np.testing.assert_array_equal(y[0], a[0:3])
    np.testing.assert_array_equal(y[3], np.tile(a[3], (3, 1)))


def test_min_k_is_the_smallest_k_within_five_points_of_the_best():
    assert min_k({8: 0.5, 16: 0.82, 32: 0.85, 64: 0.8}) == 16
    assert min_k({8: 0.9, 16: 0.7, 32: 0.9}) == 8
    assert min_k({}) is None


def test_distill_config_rejects_bad_values():
    with pytest.raises(TwinloopError, match="rounds"):
        DistillConfig(rounds=0)
    with pytest.raises(TwinloopError, match="world"):
        DistillConfig(world="moon")
    with pytest.raises(TwinloopError, match="k_sweep"):
        DistillConfig(k_sweep=(1, 8))
    with pytest.raises(TwinloopError, match="dagger_episodes"):
        DistillConfig(rounds=2, dagger_episodes=0)


def test_tiny_distill_loop_on_block_push_writes_rounds_and_aggregates_data(torch, tmp_path):
    cfg = DistillConfig(task="block-push", world="nominal", collect=2, episodes=2, dagger_episodes=1,
                        rounds=2, refiner=RefinerConfig(num_samples=8), k_sweep=(4, 8),
                        policy=PolicyConfig(epochs=3), max_ticks=8, seed=1,
                        out=str(tmp_path / "run"))
    summary = run_distill(cfg, log=lambda msg: None)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["task"] == "block-push" and on_disk["episodes"] == 2
    names = [r["controller"] for r in on_disk["results"]]
    assert names[:2] == ["distilled", "distilled+refined"]
    for r in on_disk["results"]:
        lo, hi = r["success_ci"]
        assert 0 <= lo <= r["success_rate"] <= hi <= 1
    rounds = on_disk["rounds"]
    assert [r["round"] for r in rounds] == [1, 2]
    assert set(rounds[0]) >= {"round", "base_success", "refined_success", "min_k", "base_ci", "refined_ci"}
    assert rounds[0]["min_k"] in (4, 8)
    # round 2 trains on round 1's data plus the DAgger episode from the world
    assert rounds[1]["train_episodes"] == rounds[0]["train_episodes"] + 1
    assert (tmp_path / "run" / "policy_round2.pt").is_file()
    assert summary["rounds"] == rounds


def test_distill_command_runs_and_rejects_bad_input_clearly(torch, tmp_path):
    from typer.testing import CliRunner

    from twinloop.cli import app

    out = tmp_path / "cli"
    args = ["distill", "--task", "block-push", "--world", "nominal", "--collect", "1", "--episodes", "1",
            "-k", "4", "--k-sweep", "", "--no-baseline", "--epochs", "2", "--max-ticks", "4", "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert [r["controller"] for r in summary["results"]] == ["distilled", "distilled+refined"]
    assert summary["rounds"][0]["min_k"] is None  # no sweep asked for
    bad = CliRunner().invoke(app, ["distill", "--k-sweep", "8,x", "--out", str(out)])
    assert bad.exit_code == 2 and "k-sweep" in bad.output
