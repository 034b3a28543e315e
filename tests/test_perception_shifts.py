"""Test-time shift averaging: a perception model reads each image in shifted copies."""

import numpy as np
import pytest

pytest.importorskip("torch")

from twinloop.errors import TwinloopError  # noqa: E402
from twinloop.perception import load_perception, render_dataset  # noqa: E402
from twinloop.perception.model import SHIFTS, average, shifted  # noqa: E402
from twinloop.run.build import run_perception  # noqa: E402
from twinloop.run.compare import RunConfig  # noqa: E402
from twinloop.tasks import make_task  # noqa: E402


def test_a_shifted_image_moves_its_content_and_repeats_its_edge():
    img = np.zeros((1, 8, 8, 3), np.uint8)
    img[0, 4, 5] = 200
    img[0, 7, :] = 9  # the bottom row
    out = shifted(img, (1, 1))
    assert out.shape == img.shape
    assert out[0, 3, 4, 0] == 200 and out[0, 4, 5, 0] == 0
    assert (out[0, 7, :7] == 9).all() and (out[0, 6, :7] == 9).all()  # the edge row repeated
    assert shifted(img, (0, 0)) is img


def test_shifted_copies_are_read_and_averaged():
    one, four = load_perception("push-t", "push-t"), load_perception("push-t", "push-t", shifts=4)
    task = make_task("push-t")
    images, _ = render_dataset(task, 6, np.random.default_rng(3), one.meta.size, lambda: 2.0, near_goal=0.5)
    each = np.stack([one.predict_batch(shifted(images, d)) for d in SHIFTS])
    assert np.allclose(four.predict_batch(images), average(one.meta, each))
    assert not np.allclose(four.predict_batch(images), one.predict_batch(images))


def test_four_copies_read_held_out_reset_states_better_than_one():
    one, four = load_perception("push-t", "push-t"), load_perception("push-t", "push-t", shifts=4)
    task = make_task("push-t")
    images, truth = render_dataset(task, 120, np.random.default_rng(11), one.meta.size, lambda: 2.0,
                                   look_rng=np.random.default_rng([11, 7]))

    def err(model):
        p = model.predict_batch(images)
        return (np.linalg.norm(p[:, :2] - truth[:, :2], axis=1).mean(),
                np.abs(np.angle(np.exp(1j * (p[:, 2] - truth[:, 2])))).mean())

    (pos1, ang1), (pos4, ang4) = err(one), err(four)
    assert pos4 < pos1 and ang4 < ang1


def test_shift_counts_are_checked_and_reach_the_run():
    with pytest.raises(TwinloopError, match="perception shifts"):
        load_perception("push-t", "push-t", shifts=5)
    with pytest.raises(TwinloopError, match="camera.shifts"):
        RunConfig(observe="rgb", perception_shifts=0)
    cfg = RunConfig(observe="rgb", perception_shifts=2)
    assert run_perception(cfg, make_task("push-t")).shifts == 2


def test_push_t_reads_four_copies_by_default_and_the_flat_name_overrides_it():
    # (and rope-shape: results/tables/rope-rgb-shifts.json)
    from twinloop.run.config import configure, parse_sets
    from twinloop.tasks import task_defaults

    cfg, sources = configure(RunConfig, task_defaults("push-t"), cli={"experiment.task": "push-t"})
    assert cfg.camera.shifts == 4 and sources["camera.shifts"] == "task"
    cfg, sources = configure(RunConfig, task_defaults("push-t"), cli=parse_sets(RunConfig, ["perception_shifts=1"]))
    assert cfg.perception_shifts == 1 and sources["camera.shifts"] == "cli"
    towel, _ = configure(RunConfig, task_defaults("cloth-fold"), cli={"experiment.task": "cloth-fold"})
    assert towel.camera.shifts == 1  # the library's: the towel's camera results were measured with one copy
