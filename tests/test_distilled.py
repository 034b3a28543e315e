"""Distilled base policies (flow matching over action chunks) and the outer distill loop."""

import json
import sys
from dataclasses import replace

import numpy as np
import pytest
from pusht_moves import moved

from twinloop.calib.fit import CalibConfig
from twinloop.control import RefinerConfig
from twinloop.data import Dataset
from twinloop.errors import TwinloopError
from twinloop.policies.distilled import (
    Demo,
    DistilledPolicy,
    PolicyConfig,
    chunk_targets,
    context,
    fit_chunks,
    histories,
    local_linear,
    require_torch,
    split_episodes,
    train_steps,
    training_arrays,
)
from twinloop.run.distill import DistillConfig, goals, k_at, min_k, run_distill, stages
from twinloop.tasks import make_task
from twinloop.tasks.push_t import PushT


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


def synthetic_demos(task, n=4, T=25, H=3, seed=0):
    """Demos whose plan is a smooth, deterministic function of the observation."""
    rng = np.random.default_rng(seed)
    demos = []
    for _ in range(n):
        obs = rng.normal(0.0, 0.05, (T, len(task.obs_names)))
        first = np.clip(obs[:, 0:2] + 0.5 * (obs[:, 2:4] - obs[:, 0:2]) + 0.2 * np.sin(obs[:, 4:5]), -0.3, 0.3)
        plans = first[:, None, :] + 0.01 * np.arange(H)[None, :, None]
        demos.append(Demo(obs, first, plans))
    return demos


CFG = PolicyConfig(chunk=3, n_obs_steps=1, width=64, depth=2, steps=400, batch_size=64, lr=3e-3, ema=0.9, seed=0)


@pytest.fixture(scope="module")
def trained(torch, task):
    return DistilledPolicy.fit(task, synthetic_demos(task), CFG)


def test_policy_overfits_a_tiny_dataset(trained, task):
    policy, log = trained
    demos = synthetic_demos(task)
    assert log.losses[-1] < 0.1 * log.losses[0]
    errs = []
    for d in demos:
        policy.reset(0)
        for t in (0, 7, 19):
            errs.append(np.abs(policy.propose(d.obs[t], None) - d.plans[t]).max())
    # targets spread over ~0.05 m; the deterministic flow lands within a few mm of each one
    assert np.median(errs) < 0.004, errs


def test_training_is_deterministic_for_a_seed(trained, task):
    policy, _ = trained
    again, _ = DistilledPolicy.fit(task, synthetic_demos(task), CFG)
    obs = synthetic_demos(task, n=1, seed=5)[0].obs[3]
    np.testing.assert_array_equal(policy.propose(obs, None), again.propose(obs, None))


def test_sampling_is_seeded_by_the_callers_generator(trained, task):
    policy, _ = trained
    obs = synthetic_demos(task, n=1, seed=3)[0].obs[0]
    a = policy.sample(obs, None, 7, np.random.default_rng(1))
    b = policy.sample(obs, None, 7, np.random.default_rng(1))
    c = policy.sample(obs, None, 7, np.random.default_rng(2))
    assert a.shape == (7, CFG.chunk, task.nu)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_proposals_with_temperature_are_seeded_by_the_episode(task, trained):
    policy, _ = trained
    warm = DistilledPolicy(task, policy.net, policy.stats, PolicyConfig(**{**CFG.__dict__, "temperature": 1.0}), CFG.chunk)
    obs = synthetic_demos(task, n=1, seed=3)[0].obs[0]
    warm.reset(4)
    a = warm.propose(obs)
    warm.reset(4)
    np.testing.assert_array_equal(a, warm.propose(obs))
    warm.reset(5)
    assert not np.allclose(a, warm.propose(obs))


def test_propose_returns_a_chunk_within_action_bounds(trained, task):
    policy, _ = trained
    chunk = policy.propose(np.full(len(task.obs_names), 0.2), None)
    assert chunk.shape == (CFG.chunk, task.nu)
    assert np.all(chunk >= task.action_low) and np.all(chunk <= task.action_high)


def test_policy_sees_the_observation_history(torch, task):
    cfg = PolicyConfig(chunk=2, n_obs_steps=2, width=32, depth=1, steps=5, seed=0)
    policy, _ = DistilledPolicy.fit(task, synthetic_demos(task, n=2, T=10), cfg)
    o1, o2, o3 = synthetic_demos(task, n=1, T=3, seed=9)[0].obs
    policy.reset(0)
    policy.propose(o1)
    after_o1 = policy.propose(o3)
    np.testing.assert_array_equal(after_o1, policy.propose(o3))  # asked twice in a tick: same answer
    policy.reset(0)
    policy.propose(o2)
    assert not np.allclose(after_o1, policy.propose(o3))


def _with(policy, task, **changes):
    """The same network and stats under another execution config."""
    return DistilledPolicy(task, policy.net, policy.stats, PolicyConfig(**{**CFG.__dict__, **changes}), CFG.chunk)


def test_a_chunk_runs_for_execute_ticks_before_the_next_inference(trained, task):
    policy, _ = trained
    o = synthetic_demos(task, n=1, T=4, seed=6)[0].obs
    every, chunked = _with(policy, task), _with(policy, task, execute=3)
    every.reset(0)
    chunked.reset(0)
    first = chunked.propose(o[0])
    np.testing.assert_array_equal(first, every.propose(o[0]))
    every.propose(o[1])
    np.testing.assert_array_equal(chunked.propose(o[1]), first[[1, 2, 2]])  # its last action held
    every.propose(o[2])
    np.testing.assert_array_equal(chunked.propose(o[2]), first[[2, 2, 2]])
    # the fourth tick infers again, from the same observation history
    np.testing.assert_array_equal(chunked.propose(o[3]), every.propose(o[3]))


def test_temporal_ensembling_averages_what_overlapping_chunks_predict(trained, task):
    policy, _ = trained
    o = synthetic_demos(task, n=1, T=2, seed=7)[0].obs
    alone, ens = _with(policy, task), _with(policy, task, ensemble=0.0)
    alone.reset(0)
    ens.reset(0)
    c0 = alone.propose(o[0])
    np.testing.assert_array_equal(ens.propose(o[0]), c0)
    c1 = alone.propose(o[1])
    got = ens.propose(o[1])
    np.testing.assert_allclose(got[:2], 0.5 * (c0[1:] + c1[:2]))  # ticks both chunks cover
    np.testing.assert_allclose(got[2], c1[2])  # only the newer chunk reaches this far
    np.testing.assert_array_equal(ens.propose(o[1]), got)  # asked twice in a tick: same answer


def test_averaged_proposals_are_seeded_and_spread_less_than_one_sample(torch, task):
    # labels = a smooth function of the observation + teacher noise of 2 cm
    rng = np.random.default_rng(3)
    noisy = [Demo(d.obs, d.actions, d.plans + rng.normal(0.0, 0.02, d.plans.shape)) for d in synthetic_demos(task, n=8)]
    policy, _ = DistilledPolicy.fit(task, noisy, replace(CFG, steps=300))
    obs = synthetic_demos(task, n=1, seed=3)[0].obs[0]

    def proposals(average):
        p = DistilledPolicy(task, policy.net, policy.stats, replace(CFG, temperature=1.0, average=average), CFG.chunk)
        out = []
        for seed in range(12):
            p.reset(seed)
            out.append(p.propose(obs))
        return np.array(out)

    one, mean16 = proposals(1), proposals(16)
    np.testing.assert_array_equal(mean16, proposals(16))  # the same episode seeds, the same chunks
    assert mean16.std(axis=0).mean() < 0.5 * one.std(axis=0).mean()


def test_training_steps_grow_with_the_data_when_given_in_epochs():
    cfg = PolicyConfig(steps=50, epochs=2, batch_size=64)
    assert train_steps(cfg, 640) == 20
    assert train_steps(cfg, 6400) == 50  # at most `steps`
    assert train_steps(PolicyConfig(steps=50, batch_size=64), 6400) == 50


def test_held_out_episodes_are_whole_seeded_and_disjoint():
    demos = list(range(10))
    train, held = split_episodes(demos, 0.2, seed=3)
    assert len(held) == 2 and sorted(train + held) == demos
    assert split_episodes(demos, 0.2, seed=3) == (train, held)
    assert split_episodes(demos, 0.0, seed=3) == (demos, [])
    assert len(split_episodes(demos[:2], 0.01, seed=3)[1]) == 1  # some hold-out whenever asked


def test_training_keeps_the_weights_of_the_lowest_held_out_loss_and_stops_early(torch, task):
    demos = synthetic_demos(task, n=6)
    cfg = PolicyConfig(**{**CFG.__dict__, "val_fraction": 0.34, "val_every": 10, "patience": 2, "steps": 600})
    policy, log = DistilledPolicy.fit(task, demos, cfg)
    _, held = split_episodes(demos, cfg.val_fraction, cfg.seed)
    assert len(held) == 2 and log.val_samples == 2 * 25
    best = int(np.argmin(log.val_losses))
    assert log.best_step == log.val_steps[best]
    assert log.steps == log.val_steps[-1] < 600  # stopped: `patience` evaluations without a new best
    assert all(v >= log.val_losses[best] for v in log.val_losses[-2:])
    assert policy.loss(held, n_noise=4, seed=0) == pytest.approx(log.val_losses[best], rel=1e-5)


def test_saved_policy_reloads_with_identical_outputs(trained, task, tmp_path):
    policy, _ = trained
    path = policy.save(tmp_path / "p.pt")
    loaded = DistilledPolicy.load(path, task)
    obs = synthetic_demos(task, n=1, seed=4)[0].obs
    for o in obs[:5]:
        np.testing.assert_array_equal(policy.propose(o, None), loaded.propose(o, None))
    np.testing.assert_array_equal(policy.sample(obs[0], None, 3, np.random.default_rng(0)),
                                  loaded.sample(obs[0], None, 3, np.random.default_rng(0)))
    meta = loaded.metadata()
    assert meta["task"] == "block-push" and meta["chunk"] == CFG.chunk and meta["n_params"] == policy.n_params


@pytest.fixture(scope="module")
def framed(torch):
    push_t = make_task("push-t")
    return DistilledPolicy.fit(push_t, synthetic_demos(push_t), replace(CFG, frame=True, steps=150))[0]


def test_a_policy_in_the_blocks_frame_turns_and_shifts_its_chunk_with_the_scene(framed):
    g = np.array([0.03, -0.02, 0.7])
    obs = synthetic_demos(framed.task, n=1, seed=5)[0].obs[3]
    turned = DistilledPolicy(PushT(goal=moved(g, np.r_[0, 0, framed.task.goal, np.zeros(5)])[2:5]), framed.net,
                             framed.stats, framed.config, framed.horizon)
    chunk = framed.propose(obs, None)
    assert np.abs(chunk - obs[0:2]).max() > 1e-3  # it learned something other than holding still
    c, s = np.cos(g[2]), np.sin(g[2])
    np.testing.assert_allclose(turned.propose(moved(g, obs), None), chunk @ np.array([[c, -s], [s, c]]).T + g[:2],
                               atol=1e-5)


def test_a_policy_in_its_frame_reloads_in_it(framed, tmp_path):
    loaded = DistilledPolicy.load(framed.save(tmp_path / "p.pt"), framed.task)
    obs = synthetic_demos(framed.task, n=1, seed=4)[0].obs[0]
    assert loaded.config.frame
    np.testing.assert_array_equal(loaded.propose(obs, None), framed.propose(obs, None))


def test_a_residual_policy_learns_the_chunk_less_the_scripted_one(task):
    d = synthetic_demos(task, n=1, T=4, H=3)[0]
    _, y, _ = training_arrays(task, [d], replace(CFG, residual=True), 3)
    script = task.default_proposer()
    script.reset(None)
    base = np.stack([script.propose(o, task.state_from_obs(o))[:3] for o in d.obs])  # replayed in order
    np.testing.assert_allclose(y.reshape(4, 3, 2), d.plans - base)


def test_a_residual_policy_asks_its_script_once_per_observation(torch, task):
    policy, _ = DistilledPolicy.fit(task, synthetic_demos(task, n=2), replace(CFG, residual=True, steps=20))
    asked = []
    propose = policy._base.propose
    policy._base.propose = lambda obs, state: asked.append(1) or propose(obs, state)
    obs = synthetic_demos(task, n=1, seed=3)[0].obs
    policy.reset(0)
    policy.propose(obs[0], None)
    policy.sample(obs[0], None, 4, np.random.default_rng(0))
    policy.propose(obs[0], None)
    policy.propose(obs[1], None)
    assert len(asked) == 2


def test_a_residual_policy_needs_a_task_with_a_script(torch, task, monkeypatch):
    monkeypatch.setattr(task, "default_proposer", lambda: None)
    with pytest.raises(TwinloopError, match="residual=True needs a task with a scripted proposer"):
        DistilledPolicy.fit(task, synthetic_demos(task, n=1), replace(CFG, residual=True))


def test_a_neighbours_policy_proposes_the_mean_label_of_the_nearest_samples(torch, task):
    demos = synthetic_demos(task)
    one, log = DistilledPolicy.fit(task, demos, replace(CFG, learner="neighbours", neighbours=1))
    assert one.n_params == 0 and log.samples == 100 and not log.losses
    one.reset(0)
    np.testing.assert_allclose(one.propose(demos[1].obs[7], None), demos[1].plans[7], atol=1e-12)  # its own label
    two, _ = DistilledPolicy.fit(task, demos, replace(CFG, learner="neighbours", neighbours=2))
    two.reset(0)
    got = two.propose(demos[1].obs[7], None)
    assert not np.allclose(got, demos[1].plans[7])  # another sample's label in the mean


def test_a_neighbours_policy_reloads_with_identical_outputs(torch, task, tmp_path):
    demos = synthetic_demos(task)
    policy, _ = DistilledPolicy.fit(task, demos, replace(CFG, learner="neighbours", residual=True))
    loaded = DistilledPolicy.load(policy.save(tmp_path / "nn.pt"), task)
    policy.reset(0), loaded.reset(0)
    for o in synthetic_demos(task, n=1, seed=4)[0].obs[:3]:
        np.testing.assert_array_equal(loaded.propose(o, None), policy.propose(o, None))
    with pytest.raises(TwinloopError, match="no flow-matching loss"):
        loaded.loss(demos)


def linear_demos(task, n=4, T=25, H=3, seed=0):
    """Demos whose plan is an affine map of the observation (every action well inside bounds)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(0.0, 0.5, (len(task.obs_names), task.nu))
    demos = []
    for _ in range(n):
        obs = rng.normal(0.0, 0.05, (T, len(task.obs_names)))
        first = 0.05 + obs @ a
        demos.append(Demo(obs, first, first[:, None, :] + 0.01 * np.arange(H)[None, :, None]))
    return demos


def test_local_linear_reproduces_an_affine_map_at_the_query():
    rng = np.random.default_rng(1)
    dx, w = rng.normal(size=(12, 3)), rng.normal(size=(3, 2))
    y = np.array([0.5, -1.0]) + dx @ w
    np.testing.assert_allclose(local_linear(dx, y, ridge=0.0), [0.5, -1.0], atol=1e-12)
    assert not np.allclose(y.mean(axis=0), [0.5, -1.0])  # the mean of the same samples is biased


def test_local_linear_falls_back_to_the_mean_of_its_samples():
    rng = np.random.default_rng(2)
    dx, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 2))
    np.testing.assert_allclose(local_linear(dx[:1], y[:1], ridge=0.0), y[0])  # one sample: its target
    np.testing.assert_allclose(local_linear(dx, y, ridge=1e12), y.mean(axis=0), atol=1e-9)  # slopes forced to zero


def test_a_local_policy_reproduces_a_linear_map_where_the_mean_of_neighbours_does_not(torch, task):
    demos, probe = linear_demos(task), linear_demos(task, n=1, seed=0)
    unseen = probe[0].obs[0] + 0.01  # between the samples, not one of them
    want = 0.05 + unseen @ np.random.default_rng(0).normal(0.0, 0.5, (len(task.obs_names), task.nu))
    local, _ = DistilledPolicy.fit(task, demos, replace(CFG, learner="local", neighbours=40, ridge=0.0))
    local.reset(0)
    np.testing.assert_allclose(local.propose(unseen, None)[0], want, atol=1e-9)
    mean, _ = DistilledPolicy.fit(task, demos, replace(CFG, learner="neighbours", neighbours=40))
    mean.reset(0)
    assert np.abs(mean.propose(unseen, None)[0] - want).max() > 1e-3


def test_a_memory_with_fewer_samples_than_its_k_uses_them_all(torch, task):
    demo = linear_demos(task, n=1, T=3)
    for learner in ("neighbours", "local"):
        policy, log = DistilledPolicy.fit(task, demo, replace(CFG, learner=learner, neighbours=64))
        assert log.samples == 3
        policy.reset(0)
        got = policy.propose(demo[0].obs[1] + 0.003, None)
        assert np.all(np.isfinite(got)) and got.shape == (3, task.nu)
    one, _ = DistilledPolicy.fit(task, [Demo(demo[0].obs[:1], demo[0].actions[:1], demo[0].plans[:1])],
                                 replace(CFG, learner="local", neighbours=64, relative=False))
    one.reset(0)
    np.testing.assert_allclose(one.propose(demo[0].obs[2], None), demo[0].plans[0], atol=1e-12)  # the only label


def test_a_local_policy_reloads_with_its_ridge_and_identical_outputs(torch, task, tmp_path):
    demos = synthetic_demos(task)
    policy, _ = DistilledPolicy.fit(task, demos, replace(CFG, learner="local", neighbours=16, ridge=0.5, residual=True))
    loaded = DistilledPolicy.load(policy.save(tmp_path / "local.pt"), task)
    assert (loaded.config.learner, loaded.config.neighbours, loaded.config.ridge) == ("local", 16, 0.5)
    policy.reset(0), loaded.reset(0)
    for o in synthetic_demos(task, n=1, seed=4)[0].obs[:3]:
        np.testing.assert_array_equal(loaded.propose(o, None), policy.propose(o, None))


def test_a_negative_ridge_is_refused():
    with pytest.raises(TwinloopError, match="ridge"):
        PolicyConfig(ridge=-1.0)


def test_a_task_without_a_policy_frame_is_seen_in_the_world_frame(task):
    hist = synthetic_demos(task, n=1)[0].obs[:6].reshape(3, 2, -1)
    np.testing.assert_array_equal(context(task, hist, frame=True), context(task, hist))


def test_loading_a_policy_for_another_task_fails_clearly(trained, tmp_path):
    policy, _ = trained
    path = policy.save(tmp_path / "p.pt")
    with pytest.raises(TwinloopError, match="trained for task 'block-push'"):
        DistilledPolicy.load(path, make_task("push-t"))


def test_loading_an_older_mlp_policy_names_its_version(torch, trained, task, tmp_path):
    policy, _ = trained
    path = policy.save(tmp_path / "p.pt")
    blob = torch.load(path, weights_only=True)
    blob["meta"]["format_version"] = 1
    torch.save(blob, path)
    with pytest.raises(TwinloopError, match="format version 1.*older twinloop"):
        DistilledPolicy.load(path, task)


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


def test_bad_policy_config_names_the_field():
    with pytest.raises(TwinloopError, match="n_obs_steps"):
        PolicyConfig(n_obs_steps=0)
    with pytest.raises(TwinloopError, match="ema"):
        PolicyConfig(ema=1.0)
    with pytest.raises(TwinloopError, match="execute"):
        PolicyConfig(chunk=3, execute=4)
    with pytest.raises(TwinloopError, match="val_fraction"):
        PolicyConfig(val_fraction=1.0)
    with pytest.raises(TwinloopError, match="epochs"):
        PolicyConfig(epochs=0)
    with pytest.raises(TwinloopError, match="average"):
        PolicyConfig(average=4)  # at temperature 0 every flow is the same chunk
    with pytest.raises(TwinloopError, match="learner"):
        PolicyConfig(learner="forest")
    with pytest.raises(TwinloopError, match="labels"):
        PolicyConfig(labels="future")
    with pytest.raises(TwinloopError, match="smooth"):
        PolicyConfig(smooth=3)  # a plan is not smoothed


def test_repeated_samples_are_dropped_once(task):
    d = synthetic_demos(task, n=1, T=6)[0]
    x, y, dup = training_arrays(task, [d, d], CFG, 3)
    assert dup == 6 and len(x) == len(y) == 6


def test_plans_are_the_labels_when_given(task):
    d = synthetic_demos(task, n=1, T=4, H=3)[0]
    _, y, _ = training_arrays(task, [d], CFG, 3)
    anchor = d.obs[:, 0:2]  # block-push's hold action: the pusher's position
    np.testing.assert_allclose(y.reshape(4, 3, 2), d.plans - anchor[:, None, :])


def test_decision_labels_are_the_next_ticks_first_plan_actions(task):
    d = synthetic_demos(task, n=1, T=5, H=3)[0]
    d.plans = d.plans + np.arange(5)[:, None, None] * 0.01  # every plan differs from the others
    _, y, _ = training_arrays(task, [d], replace(CFG, labels="decisions"), 3)
    decided = d.plans[:, 0]
    expected = np.stack([decided[np.minimum(t + np.arange(3), 4)] for t in range(5)])  # the last one held
    np.testing.assert_allclose(y.reshape(5, 3, 2), expected - d.obs[:, None, 0:2])


def test_smoothed_decisions_average_the_neighbouring_ticks(task):
    d = synthetic_demos(task, n=1, T=5, H=3)[0]
    _, y, _ = training_arrays(task, [d], replace(CFG, labels="decisions", smooth=3), 3)
    first = y.reshape(5, 3, 2)[:, 0] + d.obs[:, 0:2]
    np.testing.assert_allclose(first[2], d.plans[1:4, 0].mean(axis=0))
    np.testing.assert_allclose(first[0], (2 * d.plans[0, 0] + d.plans[1, 0]) / 3)  # the first held before the start


def test_chunk_targets_hold_the_last_action_past_the_end():
    a = np.arange(8, dtype=float).reshape(4, 2)
    y = chunk_targets(a, 3)
    assert y.shape == (4, 3, 2)
    np.testing.assert_array_equal(y[0], a[0:3])
    np.testing.assert_array_equal(y[3], np.tile(a[3], (3, 1)))


def test_fit_chunks_cuts_or_holds_plans():
    p = np.arange(12, dtype=float).reshape(2, 3, 2)
    np.testing.assert_array_equal(fit_chunks(p, 2), p[:, :2])
    np.testing.assert_array_equal(fit_chunks(p, 4)[:, 3], p[:, 2])


def test_histories_repeat_the_first_observation():
    obs = np.arange(4, dtype=float)[:, None]
    np.testing.assert_array_equal(histories(obs, 3)[:, :, 0], [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3]])


def test_min_k_is_the_smallest_k_within_five_points_of_the_best():
    assert min_k({8: 0.5, 16: 0.82, 32: 0.85, 64: 0.8}) == 16
    assert min_k({8: 0.9, 16: 0.7, 32: 0.9}) == 8
    assert min_k({}) is None


def test_k_at_is_the_smallest_k_reaching_the_level():
    assert k_at({4: 0.5, 8: 0.95, 16: 0.9}, 0.9) == 8
    assert k_at({4: 0.5}, 0.9) is None


def test_goals_compare_the_k_each_controller_needs():
    rounds = [{"base_success": b, "k_at_goal": k, "train_seconds": 10.0 * i}
              for i, (b, k) in enumerate([(0.2, None), (0.4, 16), (0.65, 8)])]
    baselines = {"refined": {"k_at_goal": None, "k_success": {"8": 0.5, "32": 0.8}},
                 "scripted+refined": {"k_at_goal": 8, "k_success": {"8": 0.9, "32": 1.0}}}
    g = goals({"rounds": rounds, "baselines": baselines}, 0.9)
    assert g["base_rising"] and g["base_last"] == 0.65 and g["max_train_seconds"] == 20.0
    assert g["k_at_goal"]["refined"]["at_half_k"]  # never reached by 32: needs more than 2 x 8
    assert not g["k_at_goal"]["scripted+refined"]["at_half_k"] and g["k_at_goal"]["scripted+refined"]["ratio"] == 1.0
    rounds[2]["base_success"] = 0.4
    assert not goals({"rounds": rounds, "baselines": baselines}, 0.9)["base_rising"]


def test_distill_config_rejects_bad_values():
    with pytest.raises(TwinloopError, match="rounds"):
        DistillConfig(rounds=0)
    with pytest.raises(TwinloopError, match="world"):
        DistillConfig(world="moon")
    with pytest.raises(TwinloopError, match="k_sweep"):
        DistillConfig(k_sweep=(1, 8))
    with pytest.raises(TwinloopError, match="twin_dagger or dagger_episodes"):
        DistillConfig(rounds=2, twin_dagger=0, dagger_episodes=0)
    # each purpose's episode seeds stay in their own range: no round's DAgger starts repeat another's
    for bad in ({"twin_dagger": 2001}, {"dagger_episodes": 1001}, {"rounds": 11}, {"calib_episodes": 10_001},
                {"alone_episodes": 50_001}):
        with pytest.raises(TwinloopError, match=next(iter(bad))):
            DistillConfig(**bad)
    cfg = DistillConfig(rounds=10, twin_dagger=2000, dagger_episodes=1000, calib_episodes=10_000, collect=9000)
    ranges = [cfg.eval_seeds(), cfg.collect_seeds(), cfg.calib_seeds(),
              *(f(r) for r in range(1, cfg.rounds) for f in (cfg.dagger_seeds, cfg.twin_dagger_seeds))]
    assert len(set().union(*map(set, ranges))) == sum(map(len, ranges))
    assert max(map(max, ranges)) < 100_000 <= DistillConfig(seed=1).eval_seeds()[0]
    with pytest.raises(TwinloopError, match="teacher"):
        DistillConfig(teacher="oracle")


TINY_CALIB = CalibConfig(method="cma", max_evals=6, cma_popsize=3, delay_steps=0, errors_in_variables=False)


def test_tiny_distill_loop_writes_rounds_and_aggregates_data_on_disk(torch, tmp_path):
    cfg = DistillConfig(task="block-push", world="shifted", collect=2, twin_dagger=1, dagger_episodes=1, episodes=2,
                        alone_episodes=3, rounds=2, refiner=RefinerConfig(num_samples=8, horizon=0.3), k_sweep=(4,),
                        calib=TINY_CALIB, calib_episodes=1, calib_ticks=10, baselines=("refined",),
                        policy=PolicyConfig(steps=10, width=16, depth=1), max_ticks=6, seed=1,
                        out=str(tmp_path / "run"))
    summary = run_distill(cfg, log=lambda msg: None)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [r["controller"] for r in on_disk["results"]] == ["distilled", "distilled+refined", "refined"]
    for r in on_disk["results"]:
        lo, hi = r["success_ci"]
        assert 0 <= lo <= r["success_rate"] <= hi <= 1
    rounds = on_disk["rounds"]
    assert [r["round"] for r in rounds] == [1, 2]
    assert set(rounds[0]) >= {"base_success", "refined_success", "min_k", "k_at_goal", "train_seconds", "base_ci"}
    # the policy alone on its own count of episodes (the first of the same seeds), the refined on 2
    assert [r["base_episodes"] for r in rounds] == [3, 3]
    assert [len(on_disk["per_episode"][c]) for c in ("distilled", "distilled+refined")] == [3, 2]
    assert [e["seed"] for e in on_disk["per_episode"]["distilled"]][:2] == \
        [e["seed"] for e in on_disk["per_episode"]["distilled+refined"]]
    assert set(rounds[0]["k_success"]) == {"4", "8"} and set(on_disk["baselines"]["refined"]["k_success"]) == {"4", "8"}
    # round 2 trains on round 1's data plus one twin DAgger episode and one world episode
    assert rounds[0]["train_episodes"] == {"twin": 2, "world": 0}
    assert rounds[1]["train_episodes"] == {"twin": 3, "world": 1}
    twin = Dataset(tmp_path / "run" / "data" / "twin" / "dagger_r1")
    ep = twin.read(0)  # the DAgger episode: the policy acted, the teacher's plans are the labels
    assert ep.plans is not None and ep.plans.shape == (len(ep), 3, 2)
    assert not np.allclose(ep.actions, ep.plans[:, 0])
    assert (tmp_path / "run" / "policy_round2.pt").is_file() and (tmp_path / "run" / "posterior.json").is_file()
    assert on_disk["goals"]["base_last"] == rounds[-1]["base_success"]
    assert summary["rounds"] == rounds and summary["complete"]
    # the same run in pieces of one stage each, resumed, ends in the same rounds and episodes
    pieces = replace(cfg, out=str(tmp_path / "pieces"))
    mode, calls = "new", 0
    while True:
        part = run_distill(pieces, log=lambda msg: None, mode=mode, budget_s=0)
        mode, calls = "resume", calls + 1
        if part["complete"]:
            break
    # collect, baseline at K=4 and 8, train/alone/K=4/K=8/aggregate twin/aggregate world 1, train/alone/K=4/K=8 2
    assert calls == len(stages(cfg)) == 13
    timeless = ("train_seconds",)
    assert [{k: v for k, v in r.items() if k not in timeless} for r in part["rounds"]] == \
        [{k: v for k, v in r.items() if k not in timeless} for r in rounds]
    assert part["per_episode"] == on_disk["per_episode"]


def test_resuming_with_another_config_fails_clearly(torch, tmp_path):
    cfg = DistillConfig(task="block-push", world="nominal", collect=1, episodes=1, rounds=1, k_sweep=(),
                        refiner=RefinerConfig(num_samples=4, horizon=0.3), calib=TINY_CALIB, calib_episodes=1,
                        calib_ticks=10, baselines=(), policy=PolicyConfig(steps=2, width=16, depth=1), max_ticks=3,
                        out=str(tmp_path / "run"))
    first = run_distill(cfg, log=lambda msg: None, budget_s=0)
    assert not first["complete"] and "rounds" in first
    with pytest.raises(TwinloopError, match=r"differs in \['collect'\]"):
        run_distill(replace(cfg, collect=2), log=lambda msg: None, mode="resume")
    with pytest.raises(TwinloopError, match="not empty"):
        run_distill(cfg, log=lambda msg: None)


def test_distill_command_runs_and_rejects_bad_input_clearly(torch, tmp_path):
    from typer.testing import CliRunner

    from twinloop.cli import app

    out = tmp_path / "cli"
    args = ["distill", "--task", "block-push", "--world", "nominal", "--rounds", "1", "--collect", "1",
            "--episodes", "1", "-k", "4", "--k-sweep", "", "--baselines", "", "--calib-episodes", "1",
            "--calib-evals", "60", "--steps", "2", "--width", "16", "--depth", "1", "--max-ticks", "4",
            "--out", str(out)]
    res = CliRunner().invoke(app, [*args, "--budget", "0.001"])  # one stage, then stop
    assert res.exit_code == 0, res.output
    assert not json.loads((out / "summary.json").read_text())["complete"]
    res = CliRunner().invoke(app, [*args, "--resume"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"]
    assert [r["controller"] for r in summary["results"]] == ["distilled", "distilled+refined"]
    assert summary["rounds"][0]["min_k"] == 4  # K alone is the sweep
    bad = CliRunner().invoke(app, ["distill", "--k-sweep", "8,x", "--out", str(out)])
    assert bad.exit_code == 2 and "k_sweep='8,x': expected a comma-separated list of integers" in bad.output


def test_a_saved_policy_is_usable_from_an_evaluate_policy_spec(trained, task, tmp_path):
    from twinloop.run.experiment import run_episodes
    from twinloop.run.policy import PolicySpec, policy_controller
    from twinloop.worlds import SimWorld

    policy, _ = trained
    path = policy.save(tmp_path / "p.pt")
    controller = policy_controller(task, PolicySpec.parse(f"distilled+mppi@k=4,horizon=0.3,checkpoint={path}"))
    assert isinstance(controller.proposer, DistilledPolicy)
    obs = synthetic_demos(task, n=1, seed=2)[0].obs[0]
    np.testing.assert_array_equal(controller.proposer.propose(obs), policy.propose(obs))
    r = run_episodes(SimWorld(task), controller, [0], max_ticks=3, record=False)[0]
    assert r.ticks == 3 and r.fallbacks == 0


def test_collection_noise_perturbs_the_sent_actions_not_the_labels_and_is_seeded(tmp_path):
    from twinloop.control import Controller, Refiner
    from twinloop.plan import make_optimizer
    from twinloop.run.distill import Labelled
    from twinloop.run.experiment import run_episodes
    from twinloop.twin import make_twin
    from twinloop.worlds import SimWorld

    task = make_task("block-push")
    info = {"fps": 1.0 / task.control_period, "task": task.name}

    def episode(name, noise, seed=3):
        refiner = Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi"), RefinerConfig(num_samples=4, horizon=0.3))
        ds = Dataset.create(tmp_path / name, info)
        lab = Labelled(Controller(refiner, task.default_proposer()), None, ds, noise=noise)
        run_episodes(SimWorld(task), lab, [seed], max_ticks=4, record=False, progress=lab.finish)
        return ds.read(0)

    clean, noisy, again = episode("a", 0.0), episode("b", 0.05), episode("c", 0.05)
    np.testing.assert_array_equal(clean.actions, clean.plans[:, 0])  # without noise the label is what was sent
    np.testing.assert_array_equal(noisy.plans[0], clean.plans[0])  # the first label, before any noise acted
    assert 0.005 < np.abs(noisy.actions - noisy.plans[:, 0]).mean() < 0.1  # ~5% of a 0.6 m range
    np.testing.assert_array_equal(noisy.actions, again.actions)


def test_a_teacher_tick_whose_refinement_fails_is_labelled_with_the_plan_it_fell_back_to(tmp_path):
    from twinloop.control import Controller, Refiner
    from twinloop.plan import make_optimizer
    from twinloop.run.distill import Labelled
    from twinloop.run.experiment import run_episodes
    from twinloop.twin import make_twin
    from twinloop.worlds import SimWorld

    task = make_task("block-push")
    refiner = Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi"), RefinerConfig(num_samples=4, horizon=0.3))
    refine, calls = refiner.refine, []

    def flaky(*args, **kw):  # the third tick's refinement fails (a diverged twin, a bad plan ...)
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("twin diverged")
        return refine(*args, **kw)

    refiner.refine = flaky
    ds = Dataset.create(tmp_path / "d", {"fps": 1.0 / task.control_period, "task": task.name})
    lab = Labelled(Controller(refiner, task.default_proposer()), None, ds)
    run_episodes(SimWorld(task), lab, [0], max_ticks=4, record=False, progress=lab.finish)
    ep = ds.read(0)
    assert len(ep.plans) == 4 and ep.plans.shape[1:] == (refiner.spec.horizon_ticks, task.nu)
    np.testing.assert_array_equal(ep.actions[2], ep.plans[2, 0])  # the fallback's plan sent its first action


@pytest.mark.parametrize("warm", [True, False])
def test_the_teacher_is_warm_started_only_when_configured(tmp_path, warm):
    from twinloop.run.distill import DistillRun

    cfg = DistillConfig(task="block-push", world="nominal", teacher_warm=warm, out=str(tmp_path))
    run = DistillRun(cfg, tmp_path, log=lambda msg: None)
    assert run.teacher(None).warm_start is warm
    assert run.controller(run.scripted, 8).warm_start  # the controllers evaluated are always warm-started


def test_a_run_on_the_nominal_twin_collects_there_without_touching_the_world(tmp_path):
    from twinloop.run.distill import DistillRun

    cfg = DistillConfig(task="block-push", world="shifted", posterior="nominal", out=str(tmp_path))
    run = DistillRun(cfg, tmp_path, log=lambda msg: None)

    def refuse(seed):
        raise AssertionError("the world was reset for calibration")

    run.world.reset = refuse
    run.calibrate()
    for i in range(3):
        tw = run.twin_world(i)
        np.testing.assert_array_equal(tw.params, run.task.param_space().nominal)
        assert tw.delay_steps == 0 and not np.any(tw.obs_noise)
    assert not (tmp_path / "posterior.json").exists()  # nothing was calibrated


def test_prior_twin_worlds_are_seeded_draws_from_the_prior_without_touching_the_world(tmp_path):
    from twinloop.run.distill import DistillRun

    def worlds(seed):
        cfg = DistillConfig(task="rope-shape", world="shifted", posterior="prior", seed=seed, out=str(tmp_path))
        run = DistillRun(cfg, tmp_path, log=lambda msg: None)

        def refuse(seed):
            raise AssertionError("the world was reset for calibration")

        run.world.reset = refuse
        run.calibrate()
        return run, [run.twin_world(i) for i in range(6)]

    run, tws = worlds(0)
    space = run.task.param_space()
    params = np.array([tw.params for tw in tws])
    assert all(tw.delay_steps == 0 and not np.any(tw.obs_noise) for tw in tws)
    assert len({tuple(p) for p in params}) == 6  # a different model per twin-world
    assert np.all(params >= space.low) and np.all(params <= space.high)
    assert not np.allclose(params, space.nominal)
    np.testing.assert_array_equal(params, [tw.params for tw in worlds(0)[1]])  # seeded
    assert not np.allclose(params, [tw.params for tw in worlds(1)[1]])
    assert not (tmp_path / "posterior.json").exists()  # nothing was calibrated


def test_a_comparison_run_takes_a_distilled_policy_as_its_base(trained, task, tmp_path):
    from twinloop.run.compare import RunConfig, run_comparison

    policy, _ = trained
    path = policy.save(tmp_path / "p.pt")
    cfg = RunConfig(task=task.name, proposer="distilled", checkpoint=str(path), episodes=1, max_ticks=2, video=False,
                    record=False, refiner=RefinerConfig(num_samples=4, horizon=0.2), out=str(tmp_path / "run"))
    summary = run_comparison(cfg, log=lambda m: None)
    assert [r["controller"] for r in summary["results"]] == ["base", "refined"]
    assert summary["config"]["checkpoint"] == str(path)
    with pytest.raises(TwinloopError, match="does not take option"):  # only the distilled proposer loads a file
        run_comparison(replace(cfg, proposer="scripted", out=str(tmp_path / "s")), log=lambda m: None)
    with pytest.raises(TwinloopError, match="needs checkpoint"):
        run_comparison(replace(cfg, checkpoint=None, out=str(tmp_path / "n")), log=lambda m: None)


def test_prior_shift_twin_worlds_draw_a_delay_and_noise_level_beside_the_same_models(tmp_path):
    from twinloop.run.distill import DistillRun
    from twinloop.worlds.shifted import DELAY_STEPS, noise_scales

    def worlds(shift, seed=0):
        cfg = DistillConfig(task="rope-shape", posterior="prior", prior_shift=shift, seed=seed, out=str(tmp_path))
        run = DistillRun(cfg, tmp_path, log=lambda msg: None)
        run.calibrate()
        return [run.twin_world(i) for i in range(12)]

    plain, shifted = worlds(False), worlds(True)
    np.testing.assert_array_equal([tw.params for tw in shifted], [tw.params for tw in plain])  # the same models
    task = make_task("rope-shape")
    levels = [DELAY_STEPS.index(tw.delay_steps) for tw in shifted]
    for tw, level in zip(shifted, levels):
        np.testing.assert_array_equal(tw.obs_noise, noise_scales(task, level))  # delay and noise of one level
    assert len(set(levels)) >= 3 and max(levels) > 0
    assert levels == [DELAY_STEPS.index(tw.delay_steps) for tw in worlds(True)]  # seeded
    assert levels != [DELAY_STEPS.index(tw.delay_steps) for tw in worlds(True, seed=1)]
    with pytest.raises(TwinloopError, match="prior_shift .* needs posterior='prior' or 'nominal', got None"):
        DistillConfig(task="rope-shape", prior_shift=True)


def test_prior_shift_around_the_nominal_twin_draws_delay_and_noise_and_keeps_its_physics(tmp_path):
    from twinloop.run.distill import DistillRun
    from twinloop.worlds.shifted import DELAY_STEPS, noise_scales

    def worlds(shift):
        cfg = DistillConfig(task="rope-shape", posterior="nominal", prior_shift=shift, out=str(tmp_path))
        run = DistillRun(cfg, tmp_path, log=lambda msg: None)
        run.calibrate()
        return [run.twin_world(i) for i in range(12)]

    task = make_task("rope-shape")
    plain, shifted = worlds(False), worlds(True)
    for tw in plain + shifted:
        np.testing.assert_array_equal(tw.params, task.param_space().nominal)  # physics never drawn
    assert all(tw.delay_steps == 0 and not np.any(tw.obs_noise) for tw in plain)
    levels = [DELAY_STEPS.index(tw.delay_steps) for tw in shifted]
    for tw, level in zip(shifted, levels):
        np.testing.assert_array_equal(tw.obs_noise, noise_scales(task, level))
    assert len(set(levels)) >= 3 and max(levels) > 0
