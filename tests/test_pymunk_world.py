"""The Pymunk world: a planar push scene rebuilt in a 2-D engine of another kind."""

from __future__ import annotations

import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.worlds import make_world

pytest.importorskip("pymunk")


@pytest.fixture(scope="module", params=["block-push", "push-t"])
def world(request):
    return make_world(make_task(request.param), "pymunk")


def test_it_loads_with_the_scenes_geometry(world):
    d = world.describe()
    assert d["engine"] == "pymunk" and d["task"] == world.task.name and world.period == world.task.control_period
    assert len(world.reset(0)) == len(world.task.obs_names)


def test_reset_is_seeded(world):
    a, b = world.reset(5), world.reset(5)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, world.reset(6))
    q = world.info()["qpos"]
    np.testing.assert_allclose(q[:6], world.task.initial_state(np.random.default_rng([6, 0]))[:6], atol=1e-12)


def _episode(world, seed, ticks=30):
    task = world.task
    proposer = task.default_proposer()
    proposer.reset(seed)
    obs = world.reset(seed)
    trace = []
    for _ in range(ticks):
        state = task.state_from_obs(obs)
        obs, info = world.step(np.clip(proposer.propose(obs, state)[0], task.action_low, task.action_high))
        trace.append(info["qpos"])
    return np.array(trace)


def test_the_same_seed_steps_the_same_episode(world):
    np.testing.assert_array_equal(_episode(world, 2), _episode(world, 2))


def test_the_scripted_push_moves_the_block_toward_its_goal(world):
    task = world.task
    start = task.error(world.task.initial_state(np.random.default_rng([1, 0]))[: task.model.nq])
    trace = _episode(world, 1, ticks=task.max_ticks)
    assert task.error(trace[-1]) < 0.5 * start


def test_bad_input_is_refused_with_its_reason():
    task = make_task("block-push")
    w = make_world(task, "pymunk")
    with pytest.raises(TwinloopError, match="before reset"):
        w.step(np.zeros(2))
    w.reset(0)
    with pytest.raises(TwinloopError, match="outside bounds"):
        w.step(np.array([1.0, 0.0]))
    with pytest.raises(TwinloopError, match="action"):
        w.step(np.zeros(3))
    with pytest.raises(TwinloopError, match="has no joint"):
        make_world(make_task("push-upright"), "pymunk")
    with pytest.raises(TwinloopError, match="floor_friction"):
        from twinloop.worlds.pymunk2d import PymunkWorld

        PymunkWorld(task, floor_friction=-1)
