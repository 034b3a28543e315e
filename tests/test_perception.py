"""Perception trained on the twin's renders: it learns, it loads, a controller runs from images."""

import numpy as np
import pytest

pytest.importorskip("torch")

from twinloop.control import Controller, Refiner, RefinerConfig  # noqa: E402
from twinloop.errors import TwinloopError  # noqa: E402
from twinloop.perception import (  # noqa: E402
    CameraEstimator,
    PerceptionConfig,
    load_perception,
    render_dataset,
    train_perception,
)
from twinloop.plan import make_optimizer  # noqa: E402
from twinloop.run.experiment import run_episode  # noqa: E402
from twinloop.tasks import make_task  # noqa: E402
from twinloop.twin import make_twin  # noqa: E402
from twinloop.worlds import ShiftedWorld  # noqa: E402
from twinloop.worlds.camera import CameraSpec, CameraWorld  # noqa: E402

CFG = PerceptionConfig(samples=600, near_goal=0.0, epochs=6, size=32, width=8, batch=32, lr=3e-3, seed=0, threads=1)


@pytest.fixture(scope="module")
def model():
    return train_perception(CFG, log=lambda _: None)[0]


def test_model_beats_a_constant_predictor_on_held_out_renders(model):
    task = make_task("push-t")
    rng, look = np.random.default_rng(99), np.random.default_rng(98)
    images, truth = render_dataset(task, 100, rng, CFG.size, lambda: 2.0, look_rng=look)
    pred = model.predict_batch(images)
    err = np.linalg.norm(pred[:, :2] - truth[:, :2], axis=1).mean()
    const = np.linalg.norm(np.array(model.meta.mean[:2]) - truth[:, :2], axis=1).mean()
    assert err < 0.6 * const


def test_checkpoint_round_trip_predicts_the_same(model, tmp_path):
    path = tmp_path / "p.pt"
    model.save(path)
    again = load_perception(path, "push-t")
    images = np.random.default_rng(0).integers(0, 255, (4, CFG.size, CFG.size, 3), dtype=np.uint8)
    assert np.allclose(again.predict_batch(images), model.predict_batch(images))
    with pytest.raises(TwinloopError, match="for task 'push-t', not 'pivot'"):
        load_perception(path, "pivot")


def test_controller_runs_end_to_end_from_images(model):
    task = make_task("push-t")
    world = CameraWorld(ShiftedWorld(task, 2, 0), 2, 0, (CameraSpec(size=CFG.size),))
    refiner = Refiner(task, make_twin("mujoco", task.model, task.param_space()), make_optimizer("mppi"),
                      RefinerConfig(num_samples=8, horizon=0.3))
    est = CameraEstimator(task, model)
    ctl = Controller(refiner, task.default_proposer(), estimator=est)
    r = run_episode(world, ctl, seed=3, max_ticks=3)
    assert r.ticks == 3
    assert len(r.recorder) == 3 and np.isfinite(est.last_obs).all()
    assert np.array_equal(ctl.last_state, task.state_from_obs(est.last_obs))


def test_camera_estimator_refuses_a_plain_observation(model):
    task = make_task("push-t")
    with pytest.raises(TwinloopError, match="camera world's observations"):
        CameraEstimator(task, model).estimate(np.zeros(len(task.obs_names)))


def test_shipped_push_t_model_reads_the_block_pose_on_held_out_appearance():
    shipped = load_perception("push-t", "push-t")
    task = make_task("push-t")
    rng, look = np.random.default_rng(5), np.random.default_rng([5, 7])
    images, truth = render_dataset(task, 20, rng, shipped.meta.size, lambda: 2.0, look_rng=look)
    pred = shipped.predict_batch(images)
    assert np.linalg.norm(pred[:, :2] - truth[:, :2], axis=1).mean() < 0.01  # m
    assert np.degrees(np.abs(np.angle(np.exp(1j * (pred[:, 2] - truth[:, 2]))))).mean() < 5.0



def test_shipped_push_t_model_reads_the_pose_near_the_goal_within_3_mm_and_2_degrees():
    # where the 95% coverage test decides; a model trained on reset states only errs more there
    shipped = load_perception("push-t", "push-t")
    task = make_task("push-t")
    rng, look = np.random.default_rng(5), np.random.default_rng([5, 7])
    images, truth = render_dataset(task, 40, rng, shipped.meta.size, lambda: 2.0, look_rng=look, near_goal=1.0)
    pred = shipped.predict_batch(images)
    assert np.linalg.norm(pred[:, :2] - truth[:, :2], axis=1).mean() < 0.003  # m
    assert np.degrees(np.abs(np.angle(np.exp(1j * (pred[:, 2] - truth[:, 2]))))).mean() < 2.0

def test_an_unknown_checkpoint_names_the_shipped_models():
    with pytest.raises(TwinloopError, match="shipped model .*push-t"):
        load_perception("no-such-model")


def test_near_goal_states_put_the_block_near_its_goal_and_the_pusher_beside_it():
    from twinloop.tasks.push_t import PUSHER_RADIUS, distance_to_t

    task = make_task("push-t")
    states = np.array([task.near_goal_state(np.random.default_rng([3, i])) for i in range(150)])
    pos, rot, gap = task.NEAR_GOAL
    assert np.linalg.norm(states[:, 2:4] - task.goal[:2], axis=1).max() <= pos
    assert np.abs(np.angle(np.exp(1j * (states[:, 5] - task.goal[2])))).max() <= rot
    clear = np.array([distance_to_t(s[[2, 3, 5]], s[:2]) for s in states]) - PUSHER_RADIUS
    assert clear.min() >= 0.0005 and clear.max() <= gap
    assert any(task.success(s[:6]) for s in states)  # the goal itself is drawn, unlike a reset
    again = task.near_goal_state(np.random.default_rng([3, 0]))
    np.testing.assert_array_equal(again, states[0])


def test_training_renders_draw_the_stated_fraction_near_the_goal():
    task = make_task("push-t")
    _, kp = render_dataset(task, 200, np.random.default_rng(4), 16, lambda: 0.0, near_goal=0.5)
    near = np.linalg.norm(kp[:, :2] - task.goal[:2], axis=1) <= task.NEAR_GOAL[0]
    assert 0.35 < near.mean() < 0.65
    assert near.mean() > 0.3 + np.mean(
        [np.linalg.norm(task.initial_state(np.random.default_rng([4, i]))[2:4] - task.goal[:2]) <= task.NEAR_GOAL[0]
         for i in range(200)])


def test_without_near_goal_the_renders_follow_the_reset_distribution():
    task = make_task("push-t")
    _, kp = render_dataset(task, 20, np.random.default_rng(6), 16, lambda: 0.0, look_rng=np.random.default_rng(1),
                           near_goal=0.0)
    rng = np.random.default_rng(6)
    reset = np.array([task.initial_state(rng)[[2, 3, 5]] for _ in range(20)])
    np.testing.assert_allclose(kp, reset, atol=1e-9)


def test_near_goal_training_is_refused_for_a_task_that_draws_no_such_states():
    from twinloop.tasks.push_t import PushT

    class NoNear(PushT):
        def near_goal_state(self, rng):
            return None

    with pytest.raises(TwinloopError, match="near-goal states"):
        render_dataset(NoNear(), 4, np.random.default_rng(0), 16, lambda: 0.0, near_goal=0.5)
    with pytest.raises(TwinloopError, match="near_goal"):
        PerceptionConfig(near_goal=1.5)


def test_evaluation_reports_the_error_near_the_goal(model):
    from twinloop.perception import evaluate_perception

    ev = evaluate_perception(model, 2, (5,), 10)
    assert ev["frames"] == 10 and ev["near_goal"]["frames"] == 10
    assert ev["near_goal"]["position_error_mean_mm"] != ev["position_error_mean_mm"]
    assert ev["near_goal"]["angle_error_mean_deg"] > 0
