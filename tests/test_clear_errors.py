"""Bad input at the Python API is refused with a message naming the argument, never a bare
IndexError, TypeError or AttributeError from deep inside, and never a silent answer."""

from __future__ import annotations

import numpy as np
import pytest

from twinloop.calib import CalibConfig, calibrate
from twinloop.calib.gap import GapConfig, gap
from twinloop.control import Refiner, RefinerConfig
from twinloop.data import Dataset, EpisodeRecorder, check_recorded_on, recorded_on
from twinloop.errors import TwinloopError, as_array
from twinloop.plan import make_optimizer
from twinloop.plan.spline import Plan
from twinloop.tasks import TASKS, make_task
from twinloop.twin import make_twin
from twinloop.twin.base import scene_fingerprint
from twinloop.worlds import SimWorld
from twinloop.worlds.shifted import ShiftedWorld


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_success_test_refuses_a_wrong_shape_naming_qpos(name):
    task = make_task(name)
    for bad in (np.zeros(3), 0.5):
        with pytest.raises(TwinloopError, match=r"qpos must have shape"):
            task.success(bad)


def test_param_space_check_refuses_a_scalar_naming_the_shape(block_push):
    with pytest.raises(TwinloopError, match=r"params must have shape \(3,\)"):
        block_push.param_space().check(0.5)


def test_param_space_apply_refuses_what_is_not_a_model(block_push):
    space = block_push.param_space()
    with pytest.raises(TwinloopError, match="model must be a mujoco.MjModel, got str"):
        space.apply("model", space.nominal)


def test_a_nan_prior_is_named_as_the_prior_not_as_controls(block_push):
    refiner = Refiner(block_push, make_twin("mujoco", block_push.model), make_optimizer("mppi"),
                      RefinerConfig(num_samples=4, horizon=0.3))
    s0 = block_push.initial_state(np.random.default_rng(0))
    plan = refiner.refine(s0).plan
    with pytest.raises(TwinloopError, match="prior plan knots contains NaN"):
        refiner.refine(s0, prior=Plan(np.full_like(plan.knots, np.nan), plan.spec))


def test_worlds_without_a_task_are_refused():
    for make in (ShiftedWorld, SimWorld):
        with pytest.raises(TwinloopError, match="needs a task"):
            make(None)


def test_a_gym_world_reset_with_no_seed_names_the_seed():
    pytest.importorskip("gymnasium")
    from twinloop.worlds.gym import GymWorld

    with pytest.raises(TwinloopError, match="seed must be an integer >= 0, got None"):
        GymWorld("Pendulum-v1").reset(None)


@pytest.mark.parametrize("ragged", [[[1, 2], [3]], [[1.0], [2.0, 3.0], []]])
def test_a_ragged_array_names_its_argument(ragged):
    with pytest.raises(TwinloopError, match="ctrl must be a rectangular array"):
        as_array(ragged, "ctrl")


def test_a_world_refuses_a_model_of_another_scene(block_push, push_t):
    with pytest.raises(TwinloopError, match="not a model of the scene of task 'block-push'"):
        SimWorld(block_push, model=push_t.model)


def test_a_world_accepts_its_own_scene_with_other_physics(block_push):
    space = block_push.param_space()
    w = SimWorld(block_push, model=space.apply(block_push.model, space.high))
    assert np.isfinite(w.reset(0)).all()


# -- episodes carry their task and scene -------------------------------------------------------


def _dataset(root, task, n=2, T=12, record_on=True):
    info = {"fps": 1.0 / task.control_period, **(recorded_on(task) if record_on else {"task": task.name})}
    ds = Dataset.create(root, info)
    for i in range(n):
        rng = np.random.default_rng(i)
        rec = EpisodeRecorder.for_task(task, i)
        s = task.initial_state(rng)
        for k in range(T):
            rec.add(k * task.control_period, np.zeros(len(task.obs_names)), task.hold_action(s), twin_state=s)
        rec.finish(False)
        ds.write(rec)
    return Dataset(root)


def test_the_scene_fingerprint_ignores_physics_and_tells_scenes_apart(block_push, push_t):
    space = block_push.param_space()
    assert scene_fingerprint(block_push.model) == scene_fingerprint(space.apply(block_push.model, space.high))
    assert scene_fingerprint(block_push.model) != scene_fingerprint(push_t.model)
    assert scene_fingerprint(block_push.model) != scene_fingerprint(make_task("block-push", contacts="pairs").model)


def test_episodes_read_back_with_their_task_and_scene(tmp_path, push_t):
    ep = _dataset(tmp_path / "d", push_t).read(0)
    assert (ep.task, ep.scene) == ("push-t", scene_fingerprint(push_t.model))


def test_calibrate_refuses_episodes_of_another_task_from_python(tmp_path, push_t, block_push):
    eps = _dataset(tmp_path / "d", push_t).episodes()
    with pytest.raises(TwinloopError, match="recorded on task 'push-t', not 'block-push'"):
        calibrate(block_push, eps, config=CalibConfig(max_evals=3))


def test_gap_refuses_episodes_of_another_task(tmp_path, push_t, block_push):
    eps = _dataset(tmp_path / "d", push_t).episodes()
    with pytest.raises(TwinloopError, match="recorded on task 'push-t'"):
        gap(block_push, eps, config=GapConfig(n_boot=10))


def test_episodes_of_the_same_task_on_another_scene_are_refused(tmp_path):
    pairs = make_task("block-push", contacts="pairs")
    eps = _dataset(tmp_path / "d", pairs).episodes()
    with pytest.raises(TwinloopError, match="another scene of task 'block-push'"):
        check_recorded_on(make_task("block-push"), eps)


def test_datasets_that_do_not_name_a_scene_still_load_and_calibrate(tmp_path, block_push):
    eps = _dataset(tmp_path / "d", block_push, record_on=False).episodes()
    assert eps[0].scene is None and eps[0].task == "block-push"
    check_recorded_on(block_push, eps)  # nothing to compare: accepted


def test_a_dataset_refuses_a_recorder_of_another_task(tmp_path, push_t, block_push):
    ds = Dataset.create(tmp_path / "d", {"fps": 10, **recorded_on(block_push)})
    rec = EpisodeRecorder.for_task(push_t, 0)
    s = push_t.initial_state(np.random.default_rng(0))
    rec.add(0.0, np.zeros(len(push_t.obs_names)), push_t.hold_action(s), twin_state=s)
    with pytest.raises(TwinloopError, match="recorded on task 'push-t'"):
        ds.write(rec)
