"""`twinloop run --posterior P --set planner.validate.episodes=N`: the candidate twins a calibration ranked are
settled in closed loop in the run's world, on seeds held out from the measured ones, and the run
plans with the nominal twin unless a candidate controls strictly better."""

from __future__ import annotations

import json

import mujoco
import numpy as np
import pytest
from test_twin_structure import CHECK, _episodes, _fitted

from twinloop.calib.structure import choose_structure
from twinloop.control import RefinerConfig
from twinloop.errors import TwinloopError
from twinloop.run.compare import RunConfig, build, run_comparison
from twinloop.run.sections import TwinValidationConfig as V
from twinloop.run.validation import validation_seeds
from twinloop.tasks import make_task
from twinloop.worlds import TwinWorld

TINY = RefinerConfig(num_samples=8, horizon=0.3)


@pytest.fixture(scope="module")
def far_off(tmp_path_factory):
    """A posterior whose fit (a block 6x heavier and 3x grippier) predicts the episodes it was
    judged on far better than the nominal twin, so the prediction check chooses it, with the
    contact model ``elliptic`` ranked beside it: ``(path, fitted values)``."""
    task = make_task("block-push")
    space = task.param_space()
    x = space.nominal.copy()
    x[space.names.index("block_mass")] = 3.0
    x[space.names.index("block_friction")] = 1.5
    post = _fitted(task, x)
    choice, post.structure = choose_structure(task, _episodes(task, TwinWorld(task, x), range(3)), post,
                                              ("elliptic",), CHECK)
    assert choice.chosen.name == "calibrated"  # what the prediction check alone would plan with
    path = tmp_path_factory.mktemp("posterior") / "posterior.json"
    path.write_text(json.dumps(post.to_dict(), allow_nan=False))
    return str(path), x


def _run(posterior, out, **kw) -> RunConfig:
    return RunConfig(task="block-push", world="nominal", episodes=1, max_ticks=30, refiner=TINY, posterior=posterior,
                     out=str(out), video=False, record=False, **kw)


def test_a_candidate_that_controls_worse_in_the_runs_world_is_not_planned_with(tmp_path, far_off):
    path, _ = far_off
    summary = run_comparison(_run(path, tmp_path / "out", validate=V(episodes=2, top=1)), log=lambda _: None)
    v = summary["twin_validation"]
    assert v["prediction_check_choice"] == "calibrated" and v["chosen"] == "nominal"
    scores = {s["name"]: s for s in v["scores"]}
    assert set(scores) == {"nominal", "calibrated"}  # the nominal twin and the top candidate, no other
    assert scores["calibrated"]["final_error_median"] > scores["nominal"]["final_error_median"]
    assert all(s["episodes"] == 2 for s in v["scores"]) and "closed loop" in v["reason"]
    # the run planned with the nominal twin, and says why
    assert summary["planning_twin"]["candidate"] == "nominal" and not summary["planning_twin"]["used"]
    assert summary["planning_twin"]["reason"] == v["reason"] and summary["planning_params"] is None
    # held-out seeds; the config recorded is the one asked for
    measured = {e["seed"] for rows in summary["per_episode"].values() for e in rows}
    assert not measured & set(v["seeds"]) and len(v["seeds"]) == 2
    assert summary["config"]["planner"]["validate"]["episodes"] == 2 and summary["config"]["planner"]["candidate"] is None


def test_a_named_candidate_is_rebuilt_from_the_posterior(far_off):
    path, x = far_off
    refiner = build(RunConfig(task="block-push", posterior=path, candidate="contact:elliptic+fit"), check_twin=False)[3]
    assert refiner.twin.model.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
    np.testing.assert_allclose(refiner.params[0], x)
    refiner = build(RunConfig(task="block-push", posterior=path, candidate="nominal"), check_twin=False)[3]
    assert refiner.twin.model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL and refiner.params is None
    with pytest.raises(TwinloopError, match="contact:elliptic"):  # the error lists the ranked ones
        build(RunConfig(task="block-push", posterior=path, candidate="rubber"), check_twin=False)


def test_validation_seeds_never_meet_the_measured_or_monitor_seeds(far_off):
    path, _ = far_off
    cfg = RunConfig(task="block-push", posterior=path, validate=V(episodes=5), episodes=20, seed=3)
    assert not set(validation_seeds(cfg)) & set(cfg.experiment.episode_seeds())
    with pytest.raises(TwinloopError, match="must be held out"):
        RunConfig(task="block-push", posterior=path, validate=V(episodes=5, seed=300_005), episodes=20, seed=3)
    with pytest.raises(TwinloopError, match="must be held out"):
        RunConfig(task="block-push", posterior=path, validate=V(episodes=5), episodes=20, seed=3, first_episode=69_990)
    with pytest.raises(TwinloopError, match="monitor's"):
        RunConfig(task="block-push", posterior=path, validate=V(episodes=2, seed=50_000), monitor="flag")


def test_bad_validation_input_is_refused_with_its_reason(tmp_path, far_off):
    path, x = far_off
    with pytest.raises(TwinloopError, match="validate.episodes"):
        RunConfig(task="block-push", posterior=path, validate=V(episodes=-1))
    with pytest.raises(TwinloopError, match="give posterior"):
        RunConfig(task="block-push", validate=V(episodes=2))
    with pytest.raises(TwinloopError, match="pass one of them"):
        RunConfig(task="block-push", posterior=path, validate=V(episodes=2), candidate="nominal")
    plain = tmp_path / "plain.json"  # a calibration without --structures ranks no candidates
    plain.write_text(json.dumps(_fitted(make_task("block-push"), x).to_dict(), allow_nan=False))
    with pytest.raises(TwinloopError, match="records no candidate twins"):
        run_comparison(_run(str(plain), tmp_path / "out", validate=V(episodes=2)), log=lambda _: None)


def test_default_validation_seeds_stay_in_their_seed_block():
    with pytest.raises(TwinloopError, match="validate.episodes must be <= 30000"):
        RunConfig(task="block-push", posterior="posterior.json", validate=V(episodes=30_001))
    cfg = RunConfig(task="block-push", posterior="posterior.json", validate=V(episodes=30_000))
    assert max(validation_seeds(cfg)) < min(RunConfig(task="block-push", seed=1).experiment.episode_seeds())
    assert len(validation_seeds(RunConfig(task="block-push", posterior="p.json", validate=V(episodes=40_000,
                                                                                            seed=10**6)))) == 40_000
