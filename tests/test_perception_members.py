"""A fine stage of several networks (members): each trained as a one-network fine stage on its
own renders and seed, their estimates averaged; kept and completed from a checkpoint."""

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("torch")

from twinloop.errors import TwinloopError  # noqa: E402
from twinloop.perception import PerceptionConfig, load_perception, render_dataset, train_perception  # noqa: E402
from twinloop.perception.model import Perception, average, crop, decode  # noqa: E402
from twinloop.perception.train import first_stage, with_member  # noqa: E402
from twinloop.tasks import make_task  # noqa: E402

CFG = PerceptionConfig(samples=200, near_goal=0.5, epochs=1, size=32, width=8, batch=32, seed=0, threads=1, fine=16)


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    """A one-member model and its checkpoint."""
    model = train_perception(CFG, log=lambda _: None)[0]
    path = tmp_path_factory.mktemp("members") / "one.pt"
    model.save(path)
    return model, path


@pytest.fixture(scope="module")
def two(one):
    """The same model completed to two members from its checkpoint."""
    return train_perception(replace(CFG, coarse=str(one[1]), members=2), log=lambda _: None)


@pytest.fixture(scope="module")
def images():
    return render_dataset(make_task("push-t"), 6, np.random.default_rng(5), CFG.size, lambda: 1.0, near_goal=1.0)[0]


def test_average_is_the_mean_of_positions_and_the_circular_mean_of_angles(one):
    meta = one[0].meta  # push-t: x, y, yaw
    est = np.array([[[0.01, 0.02, np.pi - 0.1]], [[0.03, -0.02, -np.pi + 0.1]], [[0.02, 0.0, np.pi]]])
    out = average(meta, est)
    np.testing.assert_allclose(out[0, :2], [0.02, 0.0], atol=1e-12)
    assert abs(abs(out[0, 2]) - np.pi) < 1e-9  # across the wrap, not through zero
    np.testing.assert_allclose(average(meta, est[:1]), est[0])


def test_a_kept_member_is_unchanged_and_the_next_is_the_fine_stage_its_seed_trains(one, two, images):
    model, rep = two
    first, path = one
    assert model.meta.fine_members == 2 and len(model.fine_nets) == 2
    assert rep["fine_more"][0]["seed"] == CFG.seed + 1 and "fine_losses" not in rep  # member 0 kept, not retrained
    x = crop(model.meta, images)
    np.testing.assert_array_equal(model._run(model.fine_nets[0], x), first._run(first.fine_net, x))
    # member 1 is what a one-network fine stage trained on the same first stage with seed + 1 is
    alone = train_perception(replace(CFG, coarse=str(path), seed=CFG.seed + 1), log=lambda _: None)[0]
    assert alone.meta.fine_members == 1  # a coarse checkpoint with as many members as asked: replaced
    np.testing.assert_array_equal(model._run(model.fine_nets[1], x), alone._run(alone.fine_net, x))
    np.testing.assert_allclose(decode(model.meta, model._run(model.fine_nets[1], x), fine=True, member=1),
                               alone.fine_estimates(images), atol=1e-9)
    # the model's fine reading is the members' average, and differs from either alone
    both = model.fine_estimates(images)
    np.testing.assert_allclose(both, average(model.meta, [first.fine_estimates(images), alone.fine_estimates(images)]))
    assert np.abs(both - first.fine_estimates(images)).max() > 1e-5
    np.testing.assert_allclose(with_member(first, alone).fine_estimates(images), both)


def test_members_survive_a_round_trip(two, images, tmp_path):
    model = two[0]
    path = tmp_path / "two.pt"
    model.save(path)
    again = load_perception(path, "push-t")
    assert again.meta == model.meta and len(again.fine_nets) == 2
    np.testing.assert_allclose(again.predict_batch(images), model.predict_batch(images))


def test_bad_member_settings_are_refused(one, two):
    model = two[0]
    with pytest.raises(TwinloopError, match="needs a fine stage"):
        PerceptionConfig(members=2)
    with pytest.raises(TwinloopError, match="members"):
        PerceptionConfig(fine=16, size=32, members=0)
    with pytest.raises(TwinloopError, match="member"):
        Perception(model.meta, model.net, model.fine_nets[:1])
    with pytest.raises(TwinloopError, match="no fine stage member 2"):
        decode(model.meta, np.zeros((1, 4)), fine=True, member=2)
    with pytest.raises(TwinloopError, match="own fine crop"):
        with_member(first_stage(model), one[0])
