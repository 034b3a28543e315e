"""Policy evaluation: policy specs, the twin as a world, the noise estimate, engine variants,
ranking metrics with intervals, the evaluate loop and its command."""

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from twinloop.calib.noise import estimate_obs_noise
from twinloop.calib.windows import record_trajectory
from twinloop.cli import app
from twinloop.errors import TwinloopError
from twinloop.policies import NoisyProposer, make_proposer
from twinloop.run.engines import plan_changes
from twinloop.run.evaluate import EvaluateConfig, pool_evaluations, ranking_metrics, run_evaluation
from twinloop.run.policy import PolicySpec
from twinloop.twin.engine import Engine
from twinloop.worlds import ShiftedWorld, TwinWorld

# -- policy specs ----------------------------------------------------------------------------


def test_policy_spec_parses_proposer_optimizer_refiner_and_proposer_options():
    s = PolicySpec.parse("scripted+cem@k=16,iterations=2,noise=0.1")
    assert (s.proposer, s.optimizer, s.refiner.num_samples, s.refiner.iterations) == ("scripted", "cem", 16, 2)
    assert dict(s.proposer_options) == {"noise": 0.1} and s.refined
    alone = PolicySpec.parse("scripted@noise=0.3")
    assert alone.optimizer is None and not alone.refined


def test_policy_spec_label_is_canonical_and_parses_back():
    for text in ("scripted", "scripted@noise=0.3", "scripted+mppi@k=8", "none+cem@k=32,iterations=2"):
        s = PolicySpec.parse(text)
        assert s.label == text
        assert PolicySpec.parse(s.label) == s
    assert PolicySpec.parse("scripted+mppi@k=8,name=mine").label == "mine"


@pytest.mark.parametrize("text, message", [
    ("teleop", "unknown proposer 'teleop'"),
    ("scripted+ppo", "unknown optimizer 'ppo'"),
    ("none", "does nothing"),
    ("scripted@noise", "key=value"),
    ("scripted+mppi@k=1", "num_samples must be an integer >= 2"),
    ("scripted+mppi@backend=bullet", "unknown backend 'bullet'"),
])
def test_bad_policy_specs_are_named(text, message):
    with pytest.raises(TwinloopError, match=message):
        PolicySpec.parse(text)


def test_noisy_proposer_is_seeded_bounded_and_not_the_clean_one(push_t):
    clean, noisy = make_proposer(push_t, "scripted"), make_proposer(push_t, "scripted", noise=0.5)
    assert isinstance(noisy, NoisyProposer)
    w = TwinWorld(push_t)
    obs = w.reset(3)
    state = push_t.state_from_obs(obs)

    def chunk(seed):
        noisy.reset(seed)
        return noisy.propose(obs, state)

    np.testing.assert_array_equal(chunk(1), chunk(1))
    assert not np.allclose(chunk(1), chunk(2))
    clean.reset(1)
    assert not np.allclose(chunk(1), clean.propose(obs, state))
    assert np.all(chunk(1) >= push_t.action_low) and np.all(chunk(1) <= push_t.action_high)
    with pytest.raises(TwinloopError, match="does not take option"):
        make_proposer(push_t, "scripted", checkpoint="p.pt")


# -- the twin as a world ---------------------------------------------------------------------


def test_a_twin_world_with_a_shifted_worlds_values_is_that_world(push_t):
    shifted = ShiftedWorld(push_t, severity=3, seed=2)
    twin = TwinWorld(push_t, shifted.hidden_params, delay_steps=shifted.delay_steps,
                     obs_noise=shifted.obs_noise, engine=Engine(integrator="euler", cone="elliptic", timeconst=2.0))
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(twin.reset(7), shifted.reset(7))
    for _ in range(5):
        a = rng.uniform(push_t.action_low, push_t.action_high)
        np.testing.assert_array_equal(twin.step(a)[0], shifted.step(a)[0])


def test_the_nominal_twin_world_has_no_noise_no_delay_and_the_nominal_parameters(push_t):
    w = TwinWorld(push_t)
    assert w.delay_steps == 0 and not w.obs_noise.any()
    np.testing.assert_allclose(w.param_space.read(w.model), push_t.param_space().nominal)


def test_a_model_world_of_the_mujoco_twin_steps_like_the_twin_world(push_t):
    from twinloop.twin import make_twin
    from twinloop.worlds import ModelWorld

    model, sim = ModelWorld(push_t, make_twin("mujoco", push_t.model)), TwinWorld(push_t)
    np.testing.assert_allclose(model.reset(4), sim.reset(4), atol=1e-12)
    rng = np.random.default_rng(1)
    for _ in range(4):
        a = rng.uniform(push_t.action_low, push_t.action_high)
        (o1, i1), (o2, i2) = model.step(a), sim.step(a)
        np.testing.assert_allclose(o1, o2, atol=1e-9)
        np.testing.assert_allclose(i1["qpos"], i2["qpos"], atol=1e-9)


def test_engine_settings_parse_apply_and_leave_the_model_alone(push_t):
    e = Engine.parse("integrator=rk4+timeconst=2+iterations=3")
    assert e == Engine(integrator="rk4", timeconst=2.0, iterations=3) and Engine.parse(e.label) == e
    m = e.apply(push_t.model)
    assert m.opt.iterations == 3 and m.opt.integrator != push_t.model.opt.integrator
    np.testing.assert_allclose(m.geom_solref[:, 0], 2 * push_t.model.geom_solref[:, 0])
    assert Engine.parse("default") == Engine() and Engine().label == "default"
    for bad, message in (("cone=round", "unknown cone"), ("timeconst=-1", "timeconst"), ("mass=2", "knob")):
        with pytest.raises(TwinloopError, match=message):
            Engine.parse(bad)


def test_a_finer_timestep_keeps_the_delay_in_seconds(push_t):
    w = TwinWorld(push_t, delay_steps=4, engine=Engine(timestep=0.0025))
    assert w.delay_steps == 8 and w.substeps == 2 * push_t.substeps
    with pytest.raises(TwinloopError, match="does not divide"):
        TwinWorld(push_t, engine=Engine(timestep=0.003))


def test_noise_estimate_finds_the_position_noise_within_a_third(push_t):
    world = ShiftedWorld(push_t, severity=2, seed=0)
    trajs = [record_trajectory(world, push_t.excitation(s), s, 60) for s in range(4)]
    est = estimate_obs_noise(push_t, trajs, world.hidden_params, delay_steps=world.delay_steps)
    positions = [i for i, u in enumerate(push_t.obs_units()) if u in ("m", "rad")]
    ratio = est[positions] / world.obs_noise[positions]
    assert np.all((ratio > 0.67) & (ratio < 1.33)), ratio
    quiet = estimate_obs_noise(push_t, [record_trajectory(TwinWorld(push_t, world.hidden_params), push_t.excitation(s), s, 60)
                                        for s in range(4)], world.hidden_params)
    assert np.all(quiet[positions] < 0.2 * world.obs_noise[positions])


# -- ranking metrics -------------------------------------------------------------------------


def test_ranking_metrics_of_a_perfect_twin_and_intervals_around_the_point():
    rng = np.random.default_rng(0)
    world = (rng.random((6, 20)) < np.linspace(0.05, 0.95, 6)[:, None]).astype(float)
    perfect = ranking_metrics(world.copy(), world, n_boot=200)
    assert perfect["pearson"] == 1.0 and perfect["mmrv"] == 0.0 and perfect["max_abs_error"] == 0.0
    noisy = (rng.random((6, 20)) < np.linspace(0.05, 0.95, 6)[:, None]).astype(float)
    m = ranking_metrics(noisy, world, n_boot=300)
    for k in ("pearson", "spearman", "mmrv"):
        lo, hi = m[f"{k}_ci"]
        assert lo <= m[k] + 1e-9 and m[k] <= hi + 1e-9 and hi - lo > 0


def _summary(world_out, twin_out, seeds, world="shifted", estimate=None, noise=0.001):
    """A summary.json's pooled parts: per-episode outcomes of policies (rows) on ``seeds``."""
    def side(out):
        return {f"p{i}": [{"seed": s, "success": bool(o)} for s, o in zip(seeds, row, strict=True)]
                for i, row in enumerate(out)}
    sides = {"world": side(world_out), "calibrated": side(twin_out), "calibrated-physics": side(twin_out)}
    return {"world": world, "per_episode": sides, "evaluation": {"calibration": {
        "estimate": estimate or {"friction": 0.7}, "delay_steps": 4, "obs_noise": {"x": noise}}}}


def test_pooled_runs_on_disjoint_seeds_are_one_evaluation_of_all_their_episodes():
    rng = np.random.default_rng(1)
    w, t = ((rng.random((3, 30)) < np.array([[0.1], [0.5], [0.9]])).astype(float) for _ in range(2))
    seeds = list(range(30))
    pieces = [_summary(w[:, :12], t[:, :12], seeds[:12]), _summary(w[:, 12:], t[:, 12:], seeds[12:])]
    pooled = pool_evaluations(pieces, "calibrated", n_boot=100)
    whole = ranking_metrics(t, w, n_boot=100)
    assert pooled["episodes"] == 30 and pooled["pearson"] == whole["pearson"] and pooled["mmrv"] == whole["mmrv"]
    assert [p["world_success"] for p in pooled["policies"]] == list(w.mean(axis=1))


def test_pooling_refuses_repeated_seeds_other_worlds_other_twins_and_uneven_counts():
    one = np.ones((2, 4))
    with pytest.raises(TwinloopError, match="seed twice"):
        pool_evaluations([_summary(one, one, [0, 1, 2, 3]), _summary(one, one, [3, 4, 5, 6])], "calibrated")
    with pytest.raises(TwinloopError, match="world differs"):
        pool_evaluations([_summary(one, one, [0, 1, 2, 3]), _summary(one, one, [4, 5, 6, 7], world="nominal")],
                         "calibrated")
    with pytest.raises(TwinloopError, match="calibration differs"):
        pool_evaluations([_summary(one, one, [0, 1, 2, 3]),
                          _summary(one, one, [4, 5, 6, 7], estimate={"friction": 0.9})], "calibrated")
    other_noise = [_summary(one, one, [0, 1, 2, 3]), _summary(one, one, [4, 5, 6, 7], noise=0.002)]
    with pytest.raises(TwinloopError, match="calibration differs"):  # the calibrated twin-world carries its noise
        pool_evaluations(other_noise, "calibrated")
    assert pool_evaluations(other_noise, "calibrated-physics")["episodes"] == 8  # the physics alone does not
    uneven = _summary(one, one, [0, 1, 2, 3])
    uneven["per_episode"]["world"]["p0"] = uneven["per_episode"]["world"]["p0"][:2]
    uneven["per_episode"]["calibrated"]["p0"] = uneven["per_episode"]["calibrated"]["p0"][:2]
    with pytest.raises(TwinloopError, match="different episode counts"):
        pool_evaluations([uneven], "calibrated")
    with pytest.raises(TwinloopError, match="no twin 'nominal'"):
        pool_evaluations([_summary(one, one, [0, 1, 2, 3])], "nominal")


# -- engines and plans -----------------------------------------------------------------------


def test_refinement_plans_repeat_under_the_same_engine_and_move_under_another(block_push):
    spec = PolicySpec.parse("scripted+mppi@k=16")
    w = TwinWorld(block_push)
    obs = np.stack([w.reset(s) for s in range(4)])
    res = plan_changes(block_push, [spec], [Engine(), Engine(timeconst=20.0, integrator="euler")], obs)
    row = res[spec.label]
    assert row["default"]["changed"] == 0.0 and row["default"]["first_action_change"] == 0.0
    assert row["integrator=euler+timeconst=20"]["changed"] > 0


# -- the loop and its command ----------------------------------------------------------------

TINY = EvaluateConfig(task="block-push", policies=("scripted", "scripted+mppi@k=8", "scripted@noise=0.5"),
                      episodes=2, max_ticks=8, calib_episodes=2, calib_ticks=20, n_boot=50,
                      engines=("timeconst=2",), plan_states=3)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    from dataclasses import replace

    return run_evaluation(replace(TINY, out=str(tmp_path_factory.mktemp("eval"))), log=lambda m: None)


def test_evaluate_writes_the_summary_schema_plot_and_world_episodes(evaluated):
    out = evaluated["config"]["experiment"]["out"]
    on_disk = json.loads(open(f"{out}/summary.json").read())
    ev = on_disk["evaluation"]
    assert {"pearson", "pearson_ci", "spearman", "mmrv", "mmrv_ci", "policies", "twins", "calibration"} <= set(ev)
    assert ev["twin"] == "calibrated" and set(ev["twins"]) == {"nominal", "calibrated"}
    assert [p["name"] for p in ev["policies"]] == ["scripted", "scripted+mppi@k=8", "scripted@noise=0.5"]
    for p in ev["policies"]:
        assert {"name", "twin_success", "world_success", "world_ci", "twin_ci"} <= set(p)
        assert p["twin_success"] == p["twins"]["calibrated"]["success"]
    assert [r["controller"] for r in on_disk["results"]] == [p["name"] for p in ev["policies"]]
    assert set(on_disk["per_episode"]) == {"world", "nominal", "calibrated", "calibrated | timeconst=2"}
    assert ev["engines"]["variants"][0]["engine"] == "timeconst=2"
    assert "scripted+mppi@k=8" in ev["engines"]["plan_changes"]
    cal = ev["calibration"]
    assert set(cal["truth"]) == set(cal["estimate"]) and cal["truth_delay_steps"] == 4
    import os

    assert os.path.getsize(f"{out}/evaluation.png") > 5000
    assert os.path.isdir(f"{out}/episodes/world/scripted+mppi_k=8")


def test_a_run_with_world_from_reuses_the_recorded_world_outcomes_instead_of_running_the_world(evaluated, tmp_path):
    from dataclasses import replace

    earlier = json.loads(open(f"{evaluated['config']['experiment']['out']}/summary.json").read())
    flipped = earlier["per_episode"]["world"]["scripted"][0]
    flipped["success"] = not flipped["success"]  # a world re-run could not reproduce this
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    cfg = replace(TINY, engines=(), world_from=str(tmp_path / "earlier.json"), out=str(tmp_path / "new"))
    now = run_evaluation(cfg, log=lambda m: None)
    assert now["per_episode"]["world"] == earlier["per_episode"]["world"]
    assert now["results"] == earlier["results"]
    assert now["per_episode"]["calibrated"] == evaluated["per_episode"]["calibrated"]
    assert now["evaluation"]["policies"][0]["world_success"] == np.mean(
        [e["success"] for e in earlier["per_episode"]["world"]["scripted"]])
    assert now["evaluation"]["world_from"] == cfg.world_from
    assert not (tmp_path / "new" / "episodes").exists()


@pytest.mark.parametrize(("change", "message"), [
    ({"seed": 1}, "ran seeds 0..1 (2), this run needs 100000..100001"),
    ({"episodes": 3}, "this run needs 0..2 (3)"),
    ({"policies": ("scripted", "scripted+cem@k=8")}, "no world episodes of policy 'scripted+cem@k=8'"),
    ({"world_seed": 1}, "its world is"),
    ({"max_ticks": 9}, "its max_ticks is 8, this run's is 9"),
])
def test_world_from_refuses_other_seeds_policies_worlds_and_lengths(evaluated, tmp_path, change, message):
    from dataclasses import replace

    cfg = replace(TINY, world_from=f"{evaluated['config']['experiment']['out']}/summary.json", out=str(tmp_path), **change)
    with pytest.raises(TwinloopError, match=re.escape(message)):
        run_evaluation(cfg, log=lambda m: None)


def test_runs_with_one_calib_seed_calibrate_on_the_same_excitation_whatever_their_episode_seeds():
    assert EvaluateConfig(seed=2, calib_seed=0).calib_seeds() == EvaluateConfig(seed=0).calib_seeds()
    assert EvaluateConfig(seed=2).calib_seeds() != EvaluateConfig(seed=0).calib_seeds()
    with pytest.raises(TwinloopError, match="calib_seed must be an integer >= 0, got -1"):
        EvaluateConfig(calib_seed=-1)


def test_evaluation_and_calibration_seeds_keep_their_own_ranges():
    for bad, field in (({"episodes": 90_001}, "episodes <= 90000"), ({"calib_episodes": 10_001}, "calib_episodes <= 10000")):
        with pytest.raises(TwinloopError, match=field):
            EvaluateConfig(**bad)
    cfg = EvaluateConfig(episodes=90_000, calib_episodes=10_000)
    ranges = [cfg.episode_seeds(), cfg.calib_seeds(), EvaluateConfig(seed=1).episode_seeds()]
    assert len(set().union(*map(set, ranges))) == sum(map(len, ranges))


TIMING = ("wall_time_s", "control_hz")


def _strip(x):
    """A summary without its timings (the only thing an executor may change), as JSON text
    (so that NaN, an undefined Kendall tau, equals itself)."""
    def drop(y):
        if isinstance(y, dict):
            return {k: drop(v) for k, v in y.items() if k not in TIMING and k != "out"}
        return [drop(v) for v in y] if isinstance(y, list) else y

    return json.dumps(drop(x), sort_keys=True)


@pytest.fixture(scope="module")
def ray_executor():
    pytest.importorskip("ray")
    from twinloop.run.executor import make_executor

    ex = make_executor("ray", num_cpus=2)
    yield ex
    ex.close()


def test_serial_and_ray_executors_give_identical_evaluation_summaries(evaluated, ray_executor, tmp_path):
    from dataclasses import replace

    on_ray = run_evaluation(replace(TINY, out=str(tmp_path)), log=lambda m: None, executor=ray_executor)
    assert _strip(on_ray) == _strip(evaluated)


def test_serial_and_ray_executors_give_identical_run_summaries(ray_executor, tmp_path):
    from twinloop.control import RefinerConfig
    from twinloop.run.compare import RunConfig, run_comparison

    cfg = RunConfig(task="block-push", episodes=3, max_ticks=6, refiner=RefinerConfig(num_samples=8), video=False)
    serial = run_comparison(RunConfig(**{**cfg.__dict__, "out": str(tmp_path / "s")}), log=lambda m: None)
    ray = run_comparison(RunConfig(**{**cfg.__dict__, "out": str(tmp_path / "r")}), log=lambda m: None,
                         executor=ray_executor)
    assert _strip(serial) == _strip(ray)


def test_evaluate_command_rejects_bad_input_clearly(tmp_path):
    runner = CliRunner()
    for args, message in ((["-p", "scripted", "-p", "teleop"], "unknown proposer 'teleop'"),
                          (["-p", "scripted"], "at least two"),
                          (["--twins", "perfect"], "unknown twin 'perfect'"),
                          (["--engines", "cone=round"], "unknown cone 'round'"),
                          (["--executor", "slurm"], "unknown executor 'slurm'"),
                          (["--calib-window", "0"], "window must be an integer >= 1, got 0"),
                          (["--calib-start-iterations", "-1"], "start_iterations must be an integer >= 0, got -1"),
                          (["--calib-seed", "-1"], "calib_seed must be an integer >= 0, got -1"),
                          (["--world-from", "/nonexistent/summary.json"], "does not exist")):
        res = runner.invoke(app, ["evaluate", "--out", str(tmp_path), *args])
        assert res.exit_code == 2, res.output
        assert message in " ".join(res.output.split())
