"""The command line: `run` writes the shared summary schema, datasets and a video; bad input exits 2."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.control import RefinerConfig
from twinloop.data.dataset import Dataset
from twinloop.errors import TwinloopError
from twinloop.run.compare import RunConfig, build
from twinloop.tasks import make_task

runner = CliRunner()
SMALL = ["--task", "block-push", "--episodes", "2", "--max-ticks", "6", "-k", "8"]


def run(tmp_path, *extra):
    res = runner.invoke(app, ["run", *SMALL, "--out", str(tmp_path), *extra])
    assert res.exit_code == 0, res.output
    return json.loads((tmp_path / "summary.json").read_text())


def test_run_writes_the_shared_summary_schema(tmp_path):
    s = run(tmp_path, "--no-video")
    assert {"task", "world", "seed", "episodes", "results"} <= set(s)
    assert s["task"] == "block-push" and s["episodes"] == 2
    names = [r["controller"] for r in s["results"]]
    assert names == ["base", "refined"]
    for r in s["results"]:
        assert {"controller", "success_rate", "success_ci", "mean_final_error", "control_hz"} <= set(r)
        lo, hi = r["success_ci"]
        assert 0 <= lo <= r["success_rate"] <= hi <= 1
    assert (tmp_path / "comparison.png").stat().st_size > 0
    rows = [r for rows in s["per_episode"].values() for r in rows]  # each episode's fastest body
    assert all(r["peak_body_speed"] > 0 and r["peak_body"] in ("pusher", "block") for r in rows)


def test_run_rehearses_behind_the_actuation_delay_it_is_given(tmp_path):
    s = run(tmp_path, "--no-video", "--no-record", "--set", "planner.refiner.actuation_delay=0.02")
    assert s["config"]["planner"]["refiner"]["actuation_delay"] == 0.02
    cfg = RunConfig(task="block-push", refiner=RefinerConfig(horizon=0.5, actuation_delay=0.02))
    assert build(cfg, check_twin=False)[3].delay_steps == 2  # 10 ms twin steps


def test_run_plans_under_prior_particles_when_asked(tmp_path):
    s = run(tmp_path, "--no-video", "--no-record", "--set", "planner.particles=3", "--set", "planner.refiner.risk=worst")
    assert s["config"]["planner"]["particles"] == 3 and s["config"]["planner"]["refiner"]["risk"] == "worst"
    space = make_task("block-push").param_space()
    _, _, _, refiner = build(RunConfig(task="block-push", particles=3))
    assert refiner.params.shape == (3, len(space))
    np.testing.assert_array_equal(refiner.params[0], space.nominal)
    assert not np.allclose(refiner.params[1:], space.nominal)
    np.testing.assert_array_equal(build(RunConfig(task="block-push", particles=3))[3].params, refiner.params)
    assert build(RunConfig(task="block-push"))[3].params is None


def test_run_plans_with_the_knots_it_is_given(tmp_path):
    s = run(tmp_path, "--no-video", "--no-record", "--set", "planner.refiner.n_knots=3")
    assert s["config"]["planner"]["refiner"]["n_knots"] == 3


def test_a_world_seed_runs_new_episodes_in_the_same_world(tmp_path):
    s = run(tmp_path, "--no-video", "--no-record", "--seed", "1", "--world-seed", "0")
    assert [e["seed"] for e in s["per_episode"]["refined"]] == [100_000, 100_001]
    assert {e["world_seed"] for e in s["per_episode"]["refined"]} == {0}
    hidden = lambda **kw: build(RunConfig(task="block-push", **kw), check_twin=False)[1].describe()["params"]  # noqa: E731
    assert s["world"]["params"] == hidden(seed=0) == hidden(seed=1, world_seed=0) != hidden(seed=1)


def test_a_run_split_at_first_episode_runs_the_episodes_of_one_run(tmp_path):
    whole = run(tmp_path / "whole", "--no-video", "--no-record", "--episodes", "3")
    piece = run(tmp_path / "piece", "--no-video", "--no-record", "--episodes", "1", "--set", "experiment.first_episode=2")
    assert piece["per_episode"]["refined"] == whole["per_episode"]["refined"][2:]


def test_a_world_seed_with_a_world_per_episode_is_refused():
    with pytest.raises(TwinloopError, match="world_seed=0 names one world"):
        RunConfig(task="block-push", world_seed=0, world_per_episode=True)


def test_proposal_samples_need_a_stochastic_proposer_and_room_in_the_batch():
    with pytest.raises(TwinloopError, match="proposer 'open-loop' draws none"):
        build(RunConfig(task="block-push", proposer="open-loop", proposal_samples=2), check_twin=False)
    with pytest.raises(TwinloopError, match="proposal_samples"):
        RunConfig(task="block-push", proposal_samples=31)  # K=32: the incumbent and the prior take two


def test_run_records_every_episode_as_a_dataset(tmp_path):
    run(tmp_path, "--no-video")
    ds = Dataset(tmp_path / "episodes" / "refined")
    assert len(ds) == 2
    ep = ds.read(0)
    assert ep.actions.shape[1] == 2 and len(ep.actions) <= 6
    assert ep.world_qpos is not None and ep.refine["cost"].shape == (len(ep),)


def test_same_seed_same_results(tmp_path):
    a = run(tmp_path / "a", "--no-video", "--no-record")
    b = run(tmp_path / "b", "--no-video", "--no-record")
    assert a["per_episode"] == b["per_episode"]
    c = run(tmp_path / "c", "--no-video", "--no-record", "--seed", "1")
    assert c["per_episode"] != a["per_episode"]


def test_world_per_episode_gives_each_episode_its_own_world_for_both_controllers(tmp_path):
    a = run(tmp_path / "a", "--no-video", "--no-record", "--world-per-episode", "--seed", "1")
    assert a["world_per_episode"] and a["config"]["experiment"]["world_per_episode"] and a["world"]["world_per_episode"]
    base, refined = a["per_episode"]["base"], a["per_episode"]["refined"]
    assert [r["world_seed"] for r in base] == [r["seed"] for r in base] == [100_000, 100_001]
    assert [r["world_params"] for r in base] == [r["world_params"] for r in refined]
    assert base[0]["world_params"] != base[1]["world_params"]
    assert run(tmp_path / "b", "--no-video", "--no-record", "--world-per-episode", "--seed", "1")["per_episode"] \
        == a["per_episode"]


def test_one_world_rows_name_the_run_seed_as_world_seed(tmp_path):
    s = run(tmp_path, "--no-video", "--no-record", "--seed", "2")
    assert not s["world_per_episode"]
    assert {r["world_seed"] for rows in s["per_episode"].values() for r in rows} == {2}


def test_run_renders_a_video_with_ghosts(tmp_path):
    from twinloop.viz.video import RenderingUnavailable, gl_backend

    try:
        gl_backend()
    except RenderingUnavailable as exc:
        pytest.skip(str(exc))
    s = run(tmp_path, "--episodes", "1", "--no-record")
    assert (tmp_path / "refined_episode.mp4").stat().st_size > 10_000
    assert s["video"].endswith("refined_episode.mp4")


def test_an_arm_task_runs_from_the_cli_with_its_own_optimizer_and_noise(tmp_path):
    res = runner.invoke(app, ["run", "--task", "peg-insert", "--episodes", "1", "--max-ticks", "2", "-k", "4",
                              "--no-video", "--no-record", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "summary.json").read_text())
    assert [r["controller"] for r in s["results"]] == ["base", "refined"]
    assert (s["config"]["planner"]["optimizer"], s["config"]["planner"]["noise"]) == ("predictive", 0.05)
    assert s["world"]["params"].keys() >= {"peg_friction", "peg_com_x", "arm_stiffness"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--task", "push-q"], "unknown task 'push-q'"),
        (["--optimizer", "ppo"], "unknown optimizer 'ppo'"),
        (["--set", "planner.backend=bullet"], "unknown backend 'bullet'"),
        (["--world", "mars"], "unknown world 'mars'"),
        (["--world", "gym"], "names no gymnasium env"),
        (["--set", "planner.twin_timestep=0.1"], "does not decide as 0.005 s does"),
        (["--set", "planner.twin_timestep=0.1"], "plan at the scene's own step with --set planner.twin_timestep=0.005"),
        (["--episodes", "0"], "episodes must be an integer >= 1, got 0"),
        (["-k", "1"], "num_samples must be an integer >= 2, got 1"),
        (["--seed", "-1"], "seed must be an integer >= 0, got -1"),
        (["--horizon", "inf"], "horizon (s) must be a finite number > 0, got inf"),
        (["--horizon", "nan"], "horizon (s) must be a finite number > 0, got nan"),
        (["--severity", "7"], "severity must be an integer >= 0 and <= 3, got 7"),
        (["--noise", "-0.1"], "MPPI noise must be a finite number > 0, got -0.1"),
        (["--set", "planner.particles=-1"], "particles must be an integer >= 0, got -1"),
        (["--set", "planner.refiner.prior_margin=1.5"], "prior_margin must be a finite number >= 0 and < 1, got 1.5"),
        (["--set", "planner.refiner.actuation_delay=-0.01"], "actuation_delay (s) must be a finite number >= 0, got -0.01"),
        (["--set", "planner.refiner.actuation_delay=0.6", "--set", "planner.refiner.horizon=0.5"],
         "actuation_delay 0.6 s is not shorter than the horizon 0.5 s"),
        (["--world-per-episode", "--world", "nominal"], "world 'nominal' takes none"),
        (["--world-per-episode", "--world", "gym:Pusher-v5"], "world 'gym:Pusher-v5' takes none"),
        (["--world-per-episode", "--world", "remote:127.0.0.1:5555"], "world 'remote:127.0.0.1:5555' takes none"),
        (["--world-per-episode", "--world", "bullet"], "world 'bullet' takes none"),
        (["--world-per-episode", "--realtime"], "world_per_episode cannot run in real time"),
        (["--monitor", "panic"], "unknown monitor 'panic'"),
        (["--monitor", "flag", "--realtime"], "monitor='flag' watches the synchronous refined controller"),
        (["--monitor", "fallback", "--proposer", "none"], "monitor='fallback' falls back to the base proposer; "
                                                          "proposer 'none' has none"),
        (["--monitor", "adapt"], "monitor='adapt' refits the actuators' parameters; task 'block-push' has none"),
        (["--monitor", "flag", "--set", "monitor_episodes=0"], "monitor_episodes must be an integer >= 1, got 0"),
    ],
)
def test_bad_options_exit_with_a_clear_message(tmp_path, args, message):
    res = runner.invoke(app, ["run", *SMALL, "--out", str(tmp_path), "--no-video", *args])
    assert res.exit_code == 2
    assert message in " ".join(res.output.split())


def test_a_newly_registered_task_appears_in_the_cli_without_editing_it(tmp_path):
    from twinloop.tasks import TASKS, register_task
    from twinloop.tasks.block_push import BlockPush

    class Dummy(BlockPush):
        """Dummy: the block-push scene under another name, registered by a test."""

        name = "dummy-push"

        def default_proposer(self):
            return None

    assert "dummy-push" not in runner.invoke(app, ["tasks"]).output
    register_task("dummy-push", Dummy)
    try:
        _run_the_dummy(tmp_path)
    finally:
        TASKS.pop("dummy-push")


def _run_the_dummy(tmp_path):
    import numpy as np

    listed = runner.invoke(app, ["tasks"])
    assert listed.exit_code == 0 and "dummy-push" in listed.output
    res = runner.invoke(app, ["run", "--task", "dummy-push", "--proposer", "none", "--episodes", "1",
                              "--max-ticks", "3", "-k", "4", "--no-video", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["task"] == "dummy-push" and [r["controller"] for r in s["results"]] == ["refined"]
    assert np.isfinite(s["results"][0]["mean_final_error"])
    res = runner.invoke(app, ["run", "--task", "dummy-push", "--out", str(tmp_path / "b"), "--no-video"])
    assert res.exit_code == 2 and "has no scripted proposer" in res.output


def test_world_help_lists_the_registered_forms():
    out = " ".join(runner.invoke(app, ["run", "--help"]).output.split())
    assert "gym:ENV_ID" in out and "remote:ADDRESS" in out and "--realtime" in out and "--set" in out


def test_run_in_real_time_reports_deadline_misses_and_plan_cycles(tmp_path):
    s = run(tmp_path, "--no-video", "--realtime", "--set", "async_control.budget=0.03", "--episodes", "1")
    refined = s["results"][1]["realtime"]
    assert refined["ticks"] > 6 and refined["cycles"] >= 1  # 6 control ticks = 60 world ticks at 100 Hz
    assert 0 <= refined["misses"] <= refined["ticks"]
    assert s["config"]["realtime"] and s["config"]["async_control"]["budget"] == 0.03
    ep = Dataset(tmp_path / "episodes" / "refined").read(0)
    assert len(ep) > 6  # one frame per world tick


def test_run_against_a_served_world(tmp_path):
    import threading

    from twinloop.tasks import make_task
    from twinloop.worlds import ShiftedWorld
    from twinloop.worlds.remote import WorldServer

    server = WorldServer(ShiftedWorld(make_task("block-push"), severity=2, seed=0), token="t0k")
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        s = run(tmp_path, "--no-video", "--world", f"remote:{server.address}", "--token", "t0k")
        local = run(tmp_path / "local", "--no-video")
    finally:
        server.stop()
        thread.join(timeout=5)
        server.close()
    assert s["world"]["served"]["world"] == "shifted" and "token" not in s["config"]
    # the client does not know the served world's seed nor its fastest body; the episodes are the same
    for name, rows in s["per_episode"].items():
        assert [r.pop("world_seed") for r in rows] == [None] * len(rows)
        assert [r.pop("world_seed") for r in local["per_episode"][name]] == [0] * len(rows)
        assert all(r.pop("peak_body_speed") > 0 and r.pop("peak_body") for r in local["per_episode"][name])
    assert s["per_episode"] == local["per_episode"]


def test_a_monitored_run_calibrates_its_threshold_and_lists_each_episodes_alarms(tmp_path):
    # push-upright, severity-3 world seeds 0-3: seed 3's arm is half as stiff as the twin's,
    # seed 0's twice, and the monitor, calibrated on nominal episodes with the same noise and
    # delay (its twin predicting one tick of its own steps), sees them
    args = ["run", "--task", "push-upright", "--proposer", "open-loop", "--world-per-episode", "--episodes", "4",
            "--severity", "3", "--max-ticks", "20", "--monitor", "flag", "--set", "monitor_episodes=2", "--no-video",
            "--no-record",
            "--set", "planner.refiner.accept=always"]  # the refiner's own plans, as the threshold was measured
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    m = s["monitor"]
    assert m["action"] == "flag" and m["threshold"] > 0 and m["nominal_seeds"] == [50_000, 50_001]
    assert m["nominal_world"]["params"] == m["nominal_world"]["nominal"]  # the twin's own parameters
    rows = s["per_episode"]["refined"]
    assert all("alarms" not in r for r in s["per_episode"]["base"])  # the monitor watches the refined controller
    assert sum(len(r["alarms"]) for r in rows) == m["alarms"] >= 1
    assert all(a["score"] > a["threshold"] == m["threshold"] for r in rows for a in r["alarms"])
    assert all(r["refits"] == [] for r in rows)  # flag: watches, never acts
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["per_episode"] == s["per_episode"]


def test_run_repair_on_a_task_without_one_exits_with_its_reason(tmp_path):
    res = runner.invoke(app, ["run", *SMALL, "--out", str(tmp_path), "--set", "grasp.repair=true", "--no-video", "--no-record"])
    assert res.exit_code == 2 and "task 'block-push' has no repair primitive" in res.output
    res = runner.invoke(app, ["run", *SMALL, "--out", str(tmp_path), "--set", "grasp.commit=0.2", "--no-video"])
    assert res.exit_code == 2 and "repair_commit=0.2 needs repair=True" in res.output
    res = runner.invoke(app, ["run", *SMALL, "--out", str(tmp_path), "--set", "grasp.reach=0.3", "--no-video"])
    assert res.exit_code == 2 and "repair_reach=0.3 needs repair=True" in res.output
    res = runner.invoke(app, ["run", *SMALL, "--out", str(tmp_path), "--set", "grasp.regrasp_reach=0.6", "--no-video"])
    assert res.exit_code == 2 and "repair_regrasp_reach=0.6 needs repair=True" in res.output
    res = runner.invoke(app, ["run", *SMALL, "--out", str(tmp_path), "--set", "grasp.repair=true", "--set", "grasp.regrasp_reach=-1",
                              "--no-video"])
    assert res.exit_code == 2 and "repair_regrasp_reach must be a finite number > 0, got -1" in res.output


def _posterior_file(path, task_name: str, shift: float = 1.1, samples: int = 4, names=None):
    """A posterior.json for ``task_name`` whose estimate is the nominal x ``shift`` (clipped to the
    bounds) and whose samples spread around it."""
    from twinloop.calib.posterior import Posterior

    space = make_task(task_name).param_space()
    n = len(space)
    est = np.clip(space.nominal * shift, space.low, space.high)
    rng = np.random.default_rng(0)
    parts = np.clip(est + 0.1 * space.prior_std * rng.standard_normal((samples, n)), space.low, space.high)
    parts[0] = est
    post = Posterior(names=list(names or space.names), estimate=est, covariance=np.diag(space.prior_std**2),
                     interval=np.stack([space.low, space.high], 1), data_std=np.full(n, 0.1),
                     correlation=np.eye(n), identifiable=np.ones(n, bool), reasons=[""] * n, confounded=[],
                     singular_values=np.ones(n), particles=parts, low=space.low, high=space.high, method="cma",
                     train_error=(1.0, 1.0), holdout_error=(1.0, 1.0), n_evals=2, sim_steps=1, n_windows=1,
                     n_transitions=1, seconds=0.0)
    path.write_text(json.dumps(post.to_dict()))
    return est, parts


def test_run_plans_with_a_saved_posterior_when_asked(tmp_path):
    est, parts = _posterior_file(tmp_path / "posterior.json", "block-push")
    space = make_task("block-push").param_space()
    assert not np.allclose(est, space.nominal)
    s = run(tmp_path / "out", "--no-video", "--no-record", "--posterior", str(tmp_path / "posterior.json"))
    assert s["config"]["planner"]["posterior"] == str(tmp_path / "posterior.json")
    assert len(s["planning_params"]) == 1 and list(s["planning_params"][0].values()) == pytest.approx(est.tolist())
    assert list(s["planning_params"][0]) == space.names
    refiner = build(RunConfig(task="block-push", posterior=str(tmp_path / "posterior.json")), check_twin=False)[3]
    np.testing.assert_allclose(refiner.params, est[None])
    # with particles: the posterior's samples (its estimate first), not the prior's
    refiner = build(RunConfig(task="block-push", particles=3, posterior=str(tmp_path / "posterior.json")),
                    check_twin=False)[3]
    np.testing.assert_allclose(refiner.params, parts[:3])
    assert run(tmp_path / "nominal", "--no-video", "--no-record")["planning_params"] is None


def test_the_robust_rule_judges_under_the_calibration_when_asked(tmp_path):
    """Asked to (accept_under='calibration'), with a calibration it plans with, the refined
    controller's acceptance rule weighs the refined plan against the base under the
    calibration's samples (its estimate first); by default, and without one, under the
    nominal values and the prior's draws."""
    from twinloop.control.hooks import RobustAcceptance
    from twinloop.run.build import controller_in_world

    est, parts = _posterior_file(tmp_path / "posterior.json", "block-push", samples=6)

    def rule(**kw):
        _, ctl = controller_in_world(RunConfig(task="block-push", **kw), "refined")
        (hook,) = [h for h in ctl.hooks if isinstance(h, RobustAcceptance)]
        hook.reset(0)
        return hook

    under = RefinerConfig(accept="robust", accept_under="calibration")
    hook = rule(posterior=str(tmp_path / "posterior.json"), refiner=under)
    np.testing.assert_allclose(hook.params, parts)  # 6 samples, fewer than the rule's 8
    np.testing.assert_allclose(hook.params[0], est)
    nominal = make_task("block-push").param_space().nominal
    for prior in (rule(), rule(refiner=under), rule(posterior=str(tmp_path / "posterior.json"))):
        assert len(prior.params) == 8
        np.testing.assert_allclose(prior.params[0], nominal)
    with pytest.raises(TwinloopError, match="accept_under"):
        RefinerConfig(accept_under="posterior")
    with pytest.raises(TwinloopError, match="P >= 2"):
        RobustAcceptance(params=parts[:1])


def test_a_bad_posterior_is_refused_naming_the_problem(tmp_path):
    good = tmp_path / "posterior.json"
    _posterior_file(good, "block-push")
    other = tmp_path / "other.json"
    _posterior_file(other, "block-push", names=make_task("block-push").param_space().names[::-1])  # other order
    broken = tmp_path / "broken.json"
    broken.write_text('{"names": ["x"]}')
    cases = [(tmp_path / "missing.json", [], "does not exist"), (other, [], "not the task's"),
             (broken, [], "not a readable posterior.json"), (good, ["--set", "planner.particles=5"], "holds 4 samples")]
    for path, extra, msg in cases:
        res = runner.invoke(app, ["run", *SMALL, "--out", str(tmp_path / "o"), "--no-video", "--posterior", str(path),
                                  *extra])
        assert res.exit_code == 2 and msg in res.output, (path, res.output)
    data = json.loads(good.read_text())  # an estimate outside the task's bounds
    data["estimate"][0] = 1e6
    good.write_text(json.dumps(data))
    with pytest.raises(TwinloopError, match="outside its bounds"):
        build(RunConfig(task="block-push", posterior=str(good)), check_twin=False)
