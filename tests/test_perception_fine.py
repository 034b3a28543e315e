"""A perception model's fine stage: a crop around the near-goal focus read at a finer patch size,
used near the goal and blended into the first stage towards the region's edge."""

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("torch")

from twinloop.errors import TwinloopError  # noqa: E402
from twinloop.perception import PerceptionConfig, load_perception, render_dataset, train_perception  # noqa: E402
from twinloop.perception.model import FINE_INNER, blend, crop, fine_weight  # noqa: E402
from twinloop.tasks import make_task  # noqa: E402
from twinloop.worlds.camera import SceneCamera, task_cameras  # noqa: E402

CFG = PerceptionConfig(samples=300, near_goal=0.5, epochs=2, size=32, width=8, batch=32, seed=0, threads=1, fine=16)


@pytest.fixture(scope="module")
def task():
    return make_task("push-t")


@pytest.fixture(scope="module")
def model():
    return train_perception(CFG, log=lambda _: None)[0]


def test_a_pixel_is_where_the_camera_draws_the_point(task):
    # the pusher moved from off the image to a point: the changed pixels' centroid is its pixel
    cam = SceneCamera(task.model, task_cameras(task)[:1])
    try:
        q = task.initial_state(np.random.default_rng(0))[: task.model.nq].copy()
        q[2:4] = 0.4  # the block off the image
        for point in ((0.0, 0.0), (0.1, 0.05), (-0.15, 0.12)):
            off, on = q.copy(), q.copy()
            off[0:2], on[0:2] = (0.4, -0.4), point
            d = np.abs(next(iter(cam.render(on).values())).astype(float)
                       - next(iter(cam.render(off).values())).astype(float)).sum(-1)
            rows, cols = np.nonzero(d > 30)
            w = d[rows, cols]
            seen = np.array([(rows * w).sum(), (cols * w).sum()]) / w.sum()
            assert np.linalg.norm(cam.pixel([*point, 0.0]) - seen) < 1.5  # px (the pusher's top is nearer the camera)
    finally:
        cam.close()


def test_the_fine_crop_lies_in_the_image_around_the_goal(model, task):
    r, c, side = model.meta.fine_crop
    assert side == CFG.fine and model.meta.fine_patch == model.meta.patch // 2
    assert 0 <= r <= CFG.size - side and 0 <= c <= CFG.size - side
    cam = SceneCamera(task.model, (replace(task_cameras(task)[0], size=CFG.size),))
    try:
        row, col = cam.pixel(task.near_goal_focus())
    finally:
        cam.close()
    assert abs(r + side / 2 - 0.5 - row) <= 0.5 and abs(c + side / 2 - 0.5 - col) <= 0.5
    centre = np.array(model.meta.fine_centre)
    assert np.linalg.norm(centre[:2] - task.goal[:2]) < 0.003 and abs(centre[2] - task.goal[2]) < 0.03
    assert task.NEAR_GOAL[0] * 0.7 < model.meta.fine_gate[0] <= task.NEAR_GOAL[0] + 0.003
    assert task.NEAR_GOAL[1] * 0.7 < model.meta.fine_gate[1] <= task.NEAR_GOAL[1] + 0.03
    images = np.zeros((2, CFG.size, CFG.size, 3), np.uint8)
    assert crop(model.meta, images).shape == (2, side, side, 3)


def test_the_fine_share_is_whole_inside_falls_linearly_and_wraps_angles(model):
    meta = model.meta
    centre = np.array(meta.fine_centre)
    pos, ang = meta.fine_gate
    half = (1 + FINE_INNER) / 2
    kp = np.array([centre, centre + [FINE_INNER * pos * 0.99, 0, 0], centre + [half * pos, 0, 0],
                   centre + [0, 0, half * ang], centre + [0, 0, 2 * np.pi - half * ang], centre + [0, 1.01 * pos, 0],
                   centre + [0.5 * pos, 0, 1.01 * ang]])
    np.testing.assert_allclose(fine_weight(meta, kp), [1, 1, 0.5, 0.5, 0.5, 0, 0], atol=1e-9)
    coarse, fine = np.array([[0.0, 0.0, np.pi - 0.1]]), np.array([[0.01, 0.02, -np.pi + 0.1]])
    out = blend(meta, coarse, fine, np.array([0.5]))
    np.testing.assert_allclose(out[0, :2], [0.005, 0.01])
    assert abs(abs(out[0, 2]) - np.pi) < 1e-9  # across the wrap, not through zero


def test_the_fine_stage_acts_inside_its_region_only_and_survives_a_round_trip(model, task, tmp_path):
    from twinloop.perception.model import decode

    images, _ = render_dataset(task, 8, np.random.default_rng(3), CFG.size, lambda: 1.0, near_goal=1.0)
    first = type(model)(replace(model.meta, fine_crop=()), model.net).predict_batch(images)
    fine = decode(model.meta, model._run(model.fine_net, crop(model.meta, images)), fine=True)
    # the region moved away from every first-stage estimate: the first stage alone
    away = type(model)(replace(model.meta, fine_centre=(5.0, 5.0, 0.0)), model.net, model.fine_net)
    np.testing.assert_array_equal(away.predict_batch(images), first)
    # the region around every estimate, wide: the fine stage alone
    wide = type(model)(replace(model.meta, fine_centre=tuple(first.mean(axis=0)), fine_gate=(10.0, 10.0)), model.net,
                       model.fine_net)
    np.testing.assert_allclose(wide.predict_batch(images), fine, atol=1e-6)
    assert np.abs(fine - first).max() > 1e-4
    path = tmp_path / "fine.pt"
    model.save(path)
    again = load_perception(path, "push-t")
    assert again.meta == model.meta
    np.testing.assert_allclose(again.predict_batch(images), model.predict_batch(images))


def test_only_the_fine_stage_is_trained_on_a_kept_first_stage(model, tmp_path):
    path = tmp_path / "coarse.pt"
    model.save(path)
    cfg = replace(CFG, coarse=str(path), seed=1, epochs=1)
    again, rep = train_perception(cfg, log=lambda _: None)
    images = np.random.default_rng(0).integers(0, 255, (3, CFG.size, CFG.size, 3), dtype=np.uint8)
    np.testing.assert_allclose(again._run(again.net, images), model._run(model.net, images))
    assert "fine_losses" in rep and "losses" not in rep


def test_bad_fine_settings_are_refused(task):
    with pytest.raises(TwinloopError, match="crop's side"):
        PerceptionConfig(size=32, fine=33)
    with pytest.raises(TwinloopError, match="crop's side"):
        PerceptionConfig(size=32, fine=48)
    with pytest.raises(TwinloopError, match="fine stage to train"):
        PerceptionConfig(coarse="push-t")
    with pytest.raises(TwinloopError, match="near_goal_focus"):
        train_perception(PerceptionConfig(task="rope-shape", samples=16, epochs=1, size=32, fine=16, threads=1),
                         log=lambda _: None)
