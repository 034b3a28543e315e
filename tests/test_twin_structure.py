"""Corrections for structure and the twin chosen by the control check: a contact model is a
structural choice that changes what the twin predicts, and the automatic choice takes the
candidate the held-out check ranks best, never one it ranks below the nominal twin."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from twinloop.calib.acceptance import AcceptanceConfig, horizon_errors
from twinloop.calib.structure import (
    CONTACT_MODELS,
    ClosedLoopScore,
    TwinCandidate,
    choose_structure,
    choose_twin,
    contact_model,
    fit_candidates,
    named_contact_model,
    validate_closed_loop,
)
from twinloop.calib.windows import record_trajectory
from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import TwinWorld

CHECK = AcceptanceConfig(horizon=0.3, stride=3)


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


def _episodes(task, world, seeds, ticks=25):
    return [record_trajectory(world, task.excitation(s), s, ticks) for s in seeds]


@pytest.fixture(scope="module")
def slippery(task):
    """Episodes of a world whose block slides on a quarter of the nominal friction."""
    space = task.param_space()
    x = space.nominal.copy()
    x[space.names.index("block_friction")] *= 0.25
    return x, _episodes(task, TwinWorld(task, x), range(3))


def _candidate(task, name, kind, params=None, model=None):
    twin = make_twin("mujoco", task.model if model is None else model, task.param_space())
    return TwinCandidate(name, kind, task, twin, None if params is None else np.asarray(params, float))


def test_a_contact_model_variant_changes_the_twins_rollouts(task):
    space = task.param_space()
    state = task.initial_state(np.random.default_rng(0))
    ctrl = np.tile(np.array([0.12, 0.0]), (1, 60, 1))  # drive the pusher through the block
    base = make_twin("mujoco", task.model, space).rollout_many(state[None], ctrl)
    for name in ("elliptic", "hard", "condim-4"):
        twin = make_twin("mujoco", named_contact_model(task.model, name), space)
        r = twin.rollout_many(state[None], ctrl)
        assert np.max(np.abs(r.qpos - base.qpos)) > 1e-4, name
    # the scene itself is untouched, and frictionless contacts let the block slide further
    assert task.model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL
    frictionless = make_twin("mujoco", contact_model(task.model, condim=1), space).rollout_many(state[None], ctrl)
    moved = np.linalg.norm(frictionless.qpos[0, 0, -1, 2:4] - state[2:4])
    assert moved > np.linalg.norm(base.qpos[0, 0, -1, 2:4] - state[2:4])


def test_bad_contact_models_are_refused_with_their_reason(task):
    with pytest.raises(TwinloopError, match="cone"):
        contact_model(task.model, cone="round")
    with pytest.raises(TwinloopError, match="solref"):
        contact_model(task.model, solref=(-0.01, 1))
    with pytest.raises(TwinloopError, match="solimp"):
        contact_model(task.model, solimp=(0.99, 0.9, 0.001))
    with pytest.raises(TwinloopError, match="condim"):
        contact_model(task.model, condim=2)
    with pytest.raises(TwinloopError, match="contact model"):
        named_contact_model(task.model, "rubber")
    assert set(CONTACT_MODELS) >= {"as-authored", "elliptic", "hard"}


def test_the_choice_is_the_candidate_the_check_ranks_best(task, slippery):
    truth, episodes = slippery
    space = task.param_space()
    wrong = space.nominal.copy()
    wrong[space.names.index("block_friction")] *= 2.5
    cands = [_candidate(task, "nominal", "nominal"), _candidate(task, "too-sticky", "calibration", wrong),
             _candidate(task, "true", "calibration", truth),
             _candidate(task, "contact:hard", "structure", model=named_contact_model(task.model, "hard"))]
    choice = choose_twin(task, episodes, cands, CHECK)
    errors, _, _ = horizon_errors(task, episodes, [(c.twin, c.params, c.delay) for c in cands], CHECK)
    assert choice.chosen.name == "true" == cands[int(np.argmin(errors))].name
    assert [r[0] for r in choice.ranking] == [cands[i].name for i in np.argsort(errors)]
    assert choice.ranking[0][3] and choice.nominal_error == pytest.approx(errors[0])
    assert choice.to_dict()["chosen"] == "true" and "true" in choice.reason


def test_a_candidate_the_check_ranks_below_nominal_is_never_chosen(task, slippery):
    _, episodes = slippery
    nominal_world = _episodes(task, TwinWorld(task), range(3))
    space = task.param_space()
    worse = [space.nominal * f for f in (0.5, 2.0)]
    cands = [_candidate(task, "nominal", "nominal")] + [_candidate(task, f"fit{i}", "calibration", x)
                                                         for i, x in enumerate(worse)]
    choice = choose_twin(task, nominal_world, cands, CHECK)  # the nominal twin is the world
    assert choice.chosen.name == "nominal" and not any(r[3] for r in choice.ranking)
    assert choice.ranking[0][0] == "nominal"
    # a candidate better than nominal, but by less than the margin, is not taken either
    truth, _ = slippery
    cands.append(_candidate(task, "true", "calibration", truth))
    errs = {r[0]: r[2] for r in choose_twin(task, episodes, cands, CHECK).ranking}
    gain = 1 - errs["true"] / errs["nominal"]
    strict = AcceptanceConfig(horizon=CHECK.horizon, stride=CHECK.stride, margin=min(0.999, gain + 0.01))
    assert choose_twin(task, episodes, cands, strict).chosen.name == "nominal"


def test_choose_twin_refuses_ambiguous_or_unjudgeable_candidates(task, slippery):
    _, episodes = slippery
    nominal = _candidate(task, "nominal", "nominal")
    with pytest.raises(TwinloopError, match="exactly one candidate of kind 'nominal'"):
        choose_twin(task, episodes, [nominal, _candidate(task, "n2", "nominal")], CHECK)
    with pytest.raises(TwinloopError, match="names must differ"):
        choose_twin(task, episodes, [nominal, _candidate(task, "nominal", "structure")], CHECK)
    with pytest.raises(TwinloopError, match="hold out more"):
        choose_twin(task, episodes[:1], [nominal], AcceptanceConfig(horizon=2.0, min_windows=50))


def test_fit_candidates_builds_the_nominal_and_each_structural_variant(task, slippery):
    _, episodes = slippery
    kin = make_task("block-push", pusher="kinematic")
    cands = fit_candidates(task, episodes, contact_models=("elliptic",), variants={"kinematic": kin},
                           timestep=0.01)
    assert [c.name for c in cands] == ["nominal", "contact:elliptic", "variant:kinematic"]
    assert cands[1].twin.model.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC and cands[2].task is kin
    assert all(c.twin.dt == pytest.approx(0.01) for c in cands)


def _fitted(task, estimate):
    """A posterior of ``task``'s space whose estimate is ``estimate`` (the rest: placeholders)."""
    from twinloop.calib.posterior import Posterior

    space = task.param_space()
    n = len(space)
    return Posterior(names=space.names, estimate=np.asarray(estimate, float), covariance=np.diag(space.prior_std**2),
                     interval=np.stack([space.low, space.high], 1), data_std=np.full(n, 0.1), correlation=np.eye(n),
                     identifiable=np.full(n, True), reasons=[""] * n, confounded=[], singular_values=np.ones(n),
                     particles=np.asarray(estimate, float)[None], low=space.low, high=space.high, method="cma",
                     train_error=(1.0, 1.0), holdout_error=(1.0, 1.0), n_evals=2, sim_steps=1, n_windows=1,
                     n_transitions=1, seconds=0.0, timestep=task.model.opt.timestep)


def test_a_posteriors_structure_choice_is_what_run_plans_with(tmp_path, task, slippery):
    import json

    from twinloop.run.compare import RunConfig, build

    truth, episodes = slippery
    post = _fitted(task, truth)
    choice, post.structure = choose_structure(task, episodes, post, ("elliptic",), CHECK)
    assert choice.chosen.note["params"] == "fit" and post.structure["params"] == "fit"
    assert {r[0] for r in choice.ranking} == {"nominal", "calibrated", "contact:elliptic", "contact:elliptic+fit"}
    # a structure choice survives the file, and run builds its twin in the chosen contact model
    post.structure = {**post.structure, "contact_model": "elliptic", "params": "nominal"}
    (tmp_path / "p.json").write_text(json.dumps(post.to_dict(), allow_nan=False))
    refiner = build(RunConfig(task="block-push", posterior=str(tmp_path / "p.json")), check_twin=False)[3]
    assert refiner.twin.model.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC and refiner.params is None
    post.structure = {**post.structure, "contact_model": None, "params": "fit"}
    (tmp_path / "p.json").write_text(json.dumps(post.to_dict(), allow_nan=False))
    refiner = build(RunConfig(task="block-push", posterior=str(tmp_path / "p.json")), check_twin=False)[3]
    assert refiner.twin.model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL
    np.testing.assert_allclose(refiner.params[0], truth)


def test_calibrate_refuses_structures_it_cannot_choose():
    from twinloop.calib.fit import CalibConfig
    from twinloop.run.calibrate import CalibrateConfig

    with pytest.raises(TwinloopError, match="structures"):
        CalibrateConfig(structures=("rubber",))
    with pytest.raises(TwinloopError, match="holdout > 0"):
        CalibrateConfig(structures=("elliptic",), calib=CalibConfig(holdout_fraction=0.0))
    with pytest.raises(TwinloopError, match="drop params"):
        CalibrateConfig(structures=("elliptic",), params=("block_mass",))


def _scorer(table, calls):
    """A closed-loop score read from ``table`` ``{name: (successes, final error)}`` of 4 episodes
    (what the world's refined episodes gave), recording which candidates were run."""
    def score(c):
        calls.append(c.name)
        k, err = table[c.name]
        return ClosedLoopScore(c.name, k, 4, err)
    return score


def _ranked_candidates(task, slippery):
    truth, episodes = slippery
    space = task.param_space()
    near = truth.copy()
    near[space.names.index("block_friction")] *= 1.3
    worse = space.nominal * 2.0
    cands = [_candidate(task, "nominal", "nominal"), _candidate(task, "true", "calibration", truth),
             _candidate(task, "near", "calibration", near), _candidate(task, "worse", "calibration", worse)]
    choice = choose_twin(task, episodes, cands, CHECK)
    passed = [r[0] for r in choice.ranking if r[3]]
    assert passed[0] == "true" and "worse" not in passed  # what the prediction check says
    return cands, choice, passed


def test_a_candidate_the_check_prefers_but_that_controls_worse_is_not_chosen(task, slippery):
    cands, choice, passed = _ranked_candidates(task, slippery)
    calls = []
    table = {"nominal": (1, 0.02), "true": (0, 0.05), "near": (3, 0.004), "worse": (4, 0.001)}
    settled = validate_closed_loop(choice, cands, _scorer(table, calls), top=3)
    assert settled.chosen.name == "near" != choice.chosen.name
    assert [s.name for s in settled.closed_loop] == ["near", "nominal", "true"]
    # a candidate the prediction check ranks below the nominal twin is never run, so never chosen
    assert "worse" not in calls and calls[0] == "nominal" and set(calls) == {"nominal", *passed}
    assert settled.to_dict()["closed_loop"][0]["name"] == "near" and "closed loop" in settled.reason
    # the prediction check's own ranking is kept beside the validation's
    assert settled.ranking == choice.ranking


def test_the_nominal_twin_stays_unless_a_candidate_controls_strictly_better(task, slippery):
    cands, choice, _ = _ranked_candidates(task, slippery)
    tie = {"nominal": (2, 0.01), "true": (2, 0.01), "near": (1, 0.001), "worse": (4, 0.0)}
    settled = validate_closed_loop(choice, cands, _scorer(tie, []))
    assert settled.chosen.name == "nominal" and "no candidate" in settled.reason
    # same successes, smaller final error: strictly better
    closer = {**tie, "true": (2, 0.005)}
    assert validate_closed_loop(choice, cands, _scorer(closer, [])).chosen.name == "true"
    calls = []
    assert validate_closed_loop(choice, cands, _scorer(closer, calls), top=0).chosen.name == "nominal"
    assert calls == ["nominal"]


def test_closed_loop_validation_refuses_scores_it_cannot_read(task, slippery):
    cands, choice, _ = _ranked_candidates(task, slippery)
    with pytest.raises(TwinloopError, match="must name it"):
        validate_closed_loop(choice, cands, lambda c: ClosedLoopScore("other", 1, 4, 0.0))
    with pytest.raises(TwinloopError, match="candidates choose_twin ranked"):
        validate_closed_loop(choice, cands[:2], _scorer({}, []))


def test_a_finer_twin_step_is_a_structural_candidate_with_the_same_physics(task, slippery):
    _, episodes = slippery
    coarse = 2 * task.model.opt.timestep
    cands = fit_candidates(task, episodes, contact_models=("hard",), timestep=coarse,
                           timesteps=(task.model.opt.timestep,))
    by = {c.name: c for c in cands}
    fine = by[f"nominal@{task.model.opt.timestep * 1000:g}ms"]
    assert fine.kind == "structure" and fine.twin.dt == task.model.opt.timestep and by["nominal"].twin.dt == coarse
    assert "contact:hard@" not in " ".join(by)  # only the nominal twin and calibrations are re-stepped
    # in a world simulated at the scene's step, the twin at that step predicts far better than the coarse one
    errs = {r[0]: r[2] for r in choose_twin(task, _episodes(task, TwinWorld(task), range(2)), cands, CHECK).ranking}
    assert errs[fine.name] < errs["nominal"] / 3 and min(errs, key=errs.get) == fine.name
    with pytest.raises(TwinloopError, match="does not divide"):
        fit_candidates(task, [], contact_models=(), timesteps=(0.007,))
    with pytest.raises(TwinloopError, match="twin timestep"):
        fit_candidates(task, [], contact_models=(), timesteps=(task.model.opt.timestep / 2,))
