"""rope-shape seen through a camera: its renders, its training shapes, a model that learns them."""

import mujoco
import numpy as np
import pytest

pytest.importorskip("torch")

from twinloop.perception import PerceptionConfig, render_dataset, train_perception  # noqa: E402
from twinloop.tasks import make_task  # noqa: E402
from twinloop.worlds.camera import task_cameras  # noqa: E402


@pytest.fixture(scope="module")
def task():
    return make_task("rope-shape")


def test_rope_renders_are_deterministic_per_seed(task):
    def draw(seed):
        return render_dataset(task, 3, np.random.default_rng(seed), 32, lambda: 2.0, near_goal=0.5)

    (a, ka), (b, kb), (c, kc) = draw(1), draw(1), draw(2)
    assert np.array_equal(a, b) and np.array_equal(ka, kb)
    assert not np.array_equal(a, c) and not np.allclose(ka, kc)
    assert ka.shape == (3, 10)  # x and y of p0, p2, p4, p6, p8


def test_rope_training_shapes_are_seeded_and_lie_where_the_swing_takes_them(task):
    nq = task.model.nq
    states = [task.near_goal_state(np.random.default_rng([3, i])) for i in range(30)]
    assert np.array_equal(task.near_goal_state(np.random.default_rng([3, 0])), states[0])
    assert not np.array_equal(states[0], states[1])
    kp = np.array([task.keypoint_positions(s[:nq]) for s in states])
    reset = np.array([task.keypoint_positions(task.initial_state(np.random.default_rng([3, i]))[:nq]) for i in range(30)])
    # the reset leaves the free end at the far right; the manipulated shapes mostly carry it over
    assert reset[:, 8, 0].min() > 0.1
    assert np.mean(kp[:, 8, 0] < 0.0) > 0.5
    # every point within the camera's view of the table (0.23 m either side of its aim point)
    cam = task_cameras(task)[0]
    half = cam.distance * np.tan(np.radians(task.model.vis.global_.fovy / 2))
    assert np.abs(kp[..., :2] - np.array(cam.lookat[:2])).max() < half - 0.01


def test_tiny_rope_model_beats_a_constant_predictor(task):
    cfg = PerceptionConfig(task="rope-shape", samples=200, near_goal=0.5, epochs=6, size=32, width=8, batch=16,
                           lr=3e-3, seed=0, threads=1)
    model = train_perception(cfg, log=lambda _: None)[0]
    images, truth = render_dataset(task, 60, np.random.default_rng(99), cfg.size, lambda: 2.0,
                                   look_rng=np.random.default_rng(98), near_goal=0.5)
    pred = model.predict_batch(images)

    def point_error(p):
        return np.linalg.norm((p - truth).reshape(len(truth), 5, 2), axis=2).mean()

    assert point_error(pred) < 0.6 * point_error(np.broadcast_to(model.meta.mean, truth.shape))


def test_shipped_rope_model_reads_the_points_on_held_out_appearance(task):
    from twinloop.perception import load_perception

    shipped = load_perception("rope-shape", "rope-shape")
    images, truth = render_dataset(task, 20, np.random.default_rng(5), shipped.meta.size, lambda: 2.0,
                                   look_rng=np.random.default_rng([5, 7]), near_goal=0.5)
    pred = shipped.predict_batch(images)
    assert np.linalg.norm((pred - truth).reshape(20, 5, 2), axis=2).mean() < 0.012  # m


def test_the_held_end_is_placed_under_the_fingers_as_the_towels_corner_is(task):
    """The robot knows what its grasp holds (Seen.held): while the grasp holds the rope's end
    near the fingers, the camera's reading of it gives way to the fingers' position."""
    from twinloop.tasks.seen import held_seen

    names = list(task.obs_names)
    end = [names.index(f"{task.grasp_point}_{c}") for c in "xyz"]
    obs = task.obs_from_data(task.model, mujoco.MjData(task.model))
    obs[:3] = (0.10, 0.02, 0.12)  # the fingers, mid-swing
    obs[end] = (0.12, 0.02, 0.12)  # the image reads the end 2 cm off, within twice the capture radius
    obs[names.index("grasp")] = 1.0
    held = held_seen(task, obs)
    radius = float(task.model.geom_size[task.model.geom("finger").id, 0])
    assert task.seen.held
    np.testing.assert_allclose(held[end], (0.10, 0.02, 0.12 - radius))
    np.testing.assert_array_equal(np.delete(held, end), np.delete(obs, end))
    obs[names.index("grasp")] = 0.0  # let go: the image's reading stands
    np.testing.assert_array_equal(held_seen(task, obs), obs)
