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

CFG = PerceptionConfig(samples=600, epochs=6, size=32, width=8, batch=32, lr=3e-3, seed=0, threads=1)


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


def test_an_unknown_checkpoint_names_the_shipped_models():
    with pytest.raises(TwinloopError, match="shipped model .*push-t"):
        load_perception("no-such-model")
