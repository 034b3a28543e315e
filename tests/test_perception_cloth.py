"""cloth-fold seen through a camera: its renders, its folds, a model that learns them, a
controller that folds from images."""

import numpy as np
import pytest

pytest.importorskip("torch")

from twinloop.control import Controller, Refiner, RefinerConfig  # noqa: E402
from twinloop.perception import (  # noqa: E402
    CameraEstimator,
    PerceptionConfig,
    render_dataset,
    train_perception,
)
from twinloop.plan import make_optimizer  # noqa: E402
from twinloop.run.experiment import run_episode  # noqa: E402
from twinloop.tasks import make_task  # noqa: E402
from twinloop.tasks.seen import held_seen  # noqa: E402
from twinloop.twin import make_twin  # noqa: E402
from twinloop.worlds import ShiftedWorld  # noqa: E402
from twinloop.worlds.camera import (  # noqa: E402
    Appearance,
    CameraWorld,
    SceneCamera,
    coloured,
    task_cameras,
    with_size,
)

CFG = PerceptionConfig(task="cloth-fold", samples=240, near_goal=0.75, epochs=8, size=32, width=8, batch=16,
                       lr=3e-3, seed=0, threads=1)


@pytest.fixture(scope="module")
def task():
    return make_task("cloth-fold")


@pytest.fixture(scope="module")
def model():
    return train_perception(CFG, log=lambda _: None)[0]


def test_cloth_renders_and_keypoints_are_deterministic_per_seed(task):
    def draw(seed):
        return render_dataset(task, 3, np.random.default_rng(seed), 32, lambda: 2.0, near_goal=0.5)

    (a, ka), (b, kb), (c, kc) = draw(1), draw(1), draw(2)
    assert np.array_equal(a, b) and np.array_equal(ka, kb)
    assert not np.array_equal(a, c) and not np.allclose(ka, kc)
    assert ka.shape == (3, 27)  # x, y and z of the 3x3 grid of corners, edge midpoints and centre


def test_folds_are_seeded_and_include_lifted_and_folded_towels_in_the_cameras_view(task):
    nq = task.model.nq
    states = [task.near_goal_state(np.random.default_rng([3, i])) for i in range(40)]
    assert np.array_equal(task.near_goal_state(np.random.default_rng([3, 0])), states[0])
    kp = np.array([task.keypoint_positions(s[:nq]) for s in states])
    a = kp[:, [k.name for k in task.points].index("corner_a")]
    assert np.mean(a[:, 2] > 0.03) > 0.1  # the corner in the air
    assert np.mean(a[:, 0] < 0.0) > 0.5  # laid over toward c (it starts at x = 0.15)
    # every point in the camera's field of view (fovy, square images)
    cam = task_cameras(task)[0]
    az, el = np.radians(cam.azimuth), np.radians(cam.elevation)
    fwd = np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, fwd)
    rel = kp.reshape(-1, 3) - (np.array(cam.lookat) - cam.distance * fwd)
    depth = rel @ fwd
    half = np.tan(np.radians(task.model.vis.global_.fovy / 2))
    assert (depth > 0).all()
    assert np.abs(rel @ right / depth).max() < half and np.abs(rel @ up / depth).max() < half


def test_the_towel_is_drawn_where_its_vertices_are_and_recoloured_by_an_appearance(task):
    assert "cloth" in coloured(task.model)
    assert not any("cloth" in n for n in coloured(make_task("push-t").model))  # push-t's draws unchanged
    cam = SceneCamera(task.model, with_size(task_cameras(task), 48))
    try:
        flat = task.initial_state(np.random.default_rng(0))[: task.model.nq]
        folded = next(s for s in (task.near_goal_state(np.random.default_rng([4, i])) for i in range(20))
                      if task.keypoint_positions(s[: task.model.nq])[6, 0] < -0.05)[: task.model.nq]
        a, b = (next(iter(cam.render(q).values())).astype(int) for q in (flat, folded))
        assert np.abs(a - b).mean() > 3.0  # the fold shows (a stale flex would draw the same towel)
        cam.set_appearance(Appearance(colour={"cloth": (-0.4, 0.3, 0.3)}))
        c = next(iter(cam.render(flat).values())).astype(int)
        assert np.abs(a - c).mean() > 3.0
    finally:
        cam.close()


def test_tiny_cloth_model_beats_a_constant_predictor_on_held_out_renders(task, model):
    images, truth = render_dataset(task, 60, np.random.default_rng(99), CFG.size, lambda: 2.0,
                                   look_rng=np.random.default_rng(98), near_goal=0.75)
    pred = model.predict_batch(images)

    def point_error(p):
        return np.linalg.norm((p - truth).reshape(len(truth), 9, 3), axis=2).mean()

    assert point_error(pred) < 0.7 * point_error(np.broadcast_to(model.meta.mean, truth.shape))


def test_cloth_controller_runs_end_to_end_from_images(task, model):
    world = CameraWorld(ShiftedWorld(task, 2, 0), 2, 0, with_size(task_cameras(task), CFG.size))
    refiner = Refiner(task, make_twin("mujoco", task.model, task.param_space()), make_optimizer("mppi"),
                      RefinerConfig(num_samples=4, horizon=0.4))
    est = CameraEstimator(task, model)
    ctl = Controller(refiner, task.default_proposer(), estimator=est)
    try:
        r = run_episode(world, ctl, seed=3, max_ticks=2)
    finally:
        world.close()
    assert r.ticks == 2
    names = list(task.obs_names)
    seen = [names.index(k) for k in task.seen.keypoints]
    assert np.isfinite(est.last_obs).all()
    assert np.array_equal(held_seen(task, est.last_obs), est.last_obs)  # what a held corner's placing gives
    free = [i for i, k in enumerate(task.seen.keypoints) if not k.startswith(task.grasp_point)]
    assert np.array_equal(est.last_obs[np.array(seen)[free]], est.last_keypoints[free])
    assert np.array_equal(ctl.last_state, task.state_from_obs(est.last_obs))


def test_a_held_corner_is_placed_under_the_fingers_only_while_the_grasp_holds_it_near_them(task):
    names = list(task.obs_names)
    a = [names.index(f"corner_a_{c}") for c in "xyz"]
    obs = task.obs_from_data(task.model, task._scratch)
    obs[:3] = (0.02, -0.03, 0.15)  # the fingers, mid-swing
    obs[a] = (0.05, -0.03, 0.15)  # the image reads the corner 3 cm off: beyond the capture radius
    obs[6] = 1.0
    held = held_seen(task, obs)
    assert np.allclose(held[a], (0.02, -0.03, 0.15 - 0.008))  # under the 8 mm finger
    assert np.array_equal(np.delete(held, a), np.delete(obs, a))  # nothing else touched
    assert np.array_equal(held_seen(task, np.where(np.arange(len(obs)) == 6, 0.0, obs)), np.where(np.arange(len(obs)) == 6, 0.0, obs))
    far = obs.copy()
    far[a] = (0.2, -0.03, 0.15)  # read 18 cm away: not what the fingers hold
    assert np.array_equal(held_seen(task, far), far)
