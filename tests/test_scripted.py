"""Scripted base proposers: chunk shapes, seeding, and that their pushes make progress."""

import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.policies import ScriptedConfig, make_proposer
from twinloop.tasks import make_task
from twinloop.tasks.base import Task
from twinloop.tasks.block_push import ScriptedBlockPush
from twinloop.tasks.push_t import ScriptedPushT
from twinloop.worlds import SimWorld


@pytest.fixture(scope="module", params=["push-t", "block-push"])
def task(request):
    return make_task(request.param)


def start(task, seed=0):
    s = task.initial_state(np.random.default_rng(seed))
    return task.state_from_obs(task_obs(task, s)), task_obs(task, s)


def task_obs(task, s):
    import mujoco

    d = mujoco.MjData(task.model)
    d.qpos[:], d.qvel[:] = s[: task.model.nq], s[task.model.nq :]
    mujoco.mj_forward(task.model, d)
    return task.obs_from_data(task.model, d)


def test_the_scripted_proposer_is_the_tasks_own(task):
    p = make_proposer(task, "scripted")
    assert isinstance(p, ScriptedPushT if task.name == "push-t" else ScriptedBlockPush)
    assert p.H == round(1.0 / task.control_period)


def test_a_task_without_a_script_is_refused_by_name():
    class Other(Task):
        name = "other"

    with pytest.raises(TwinloopError, match="'other' has no scripted proposer"):
        make_proposer(Other(), "scripted")


def test_propose_gives_one_second_of_targets_within_bounds(task):
    p = task.default_proposer()
    state, obs = start(task)
    chunk = p.propose(obs, state)
    assert chunk.shape == (p.H, task.nu)
    assert np.all(chunk >= task.action_low) and np.all(chunk <= task.action_high)
    np.testing.assert_array_equal(chunk, task.default_proposer().propose(obs, state))


def test_propose_moves_the_pusher_toward_the_block_first(task):
    p = task.default_proposer()
    state, obs = start(task, 3)
    chunk = p.propose(obs, state)
    d0 = np.linalg.norm(state[0:2] - state[2:4])
    assert np.linalg.norm(chunk[-1] - state[2:4]) < d0


def test_sample_is_seeded_varied_and_in_bounds(task):
    p = task.default_proposer()
    state, obs = start(task, 1)
    a = p.sample(obs, state, 8, np.random.default_rng(5))
    assert a.shape == (8, p.H, task.nu)
    np.testing.assert_array_equal(a, p.sample(obs, state, 8, np.random.default_rng(5)))
    assert not np.allclose(a, p.sample(obs, state, 8, np.random.default_rng(6)))
    assert np.ptp(a[:, -1], axis=0).max() > 1e-3
    assert np.all(a >= task.action_low) and np.all(a <= task.action_high)


def test_sample_rejects_bad_arguments(task):
    p = task.default_proposer()
    state, obs = start(task)
    with pytest.raises(TwinloopError, match="n >= 1"):
        p.sample(obs, state, 0, np.random.default_rng(0))
    with pytest.raises(TwinloopError, match="state"):
        p.propose(obs, state[:3])


def test_config_is_checked():
    with pytest.raises(TwinloopError, match="push_speed"):
        ScriptedConfig(push_speed=0.0)
    with pytest.raises(TwinloopError, match="top_k"):
        ScriptedConfig(top_k=0)


def test_the_detour_keeps_the_pusher_off_the_block():
    from twinloop.tasks.push_t import distance_to_t

    task = make_task("push-t")
    p = task.default_proposer()
    # right yaw, but up and right of the goal: the push must come from the block's far side,
    # and the pusher starts between the block and the goal
    s = np.zeros(task.nstate)
    s[:6] = [0.02, 0.02, 0.1, 0.1, 0.0, np.pi / 4]
    pose = s[[2, 3, 5]]

    def segments(path):
        t = np.linspace(0, 1, 20)[None, :, None]
        return (path[:-1, None] + t * (path[1:] - path[:-1])[:, None]).reshape(-1, 2)

    path = np.concatenate([s[None, 0:2], p.propose(None, s)])  # a second of going around
    straight = np.array([path[0], path[-1]])
    assert distance_to_t(pose, segments(straight)).min() < task.pusher_radius  # a detour was needed
    assert distance_to_t(pose, segments(path)).min() > task.pusher_radius


def test_scripted_pushes_bring_the_block_closer_to_the_goal(task):
    p = task.default_proposer()
    world = SimWorld(task)
    errors = []
    for seed in (0, 1):
        obs = world.reset(seed)
        p.reset(seed)
        e0 = float(task.error(world.data.qpos))
        for _ in range(40):
            obs, info = world.step(p.propose(obs, task.state_from_obs(obs))[0])
        errors.append((e0, float(task.error(info["qpos"]))))
    assert all(e1 < e0 for e0, e1 in errors), errors


def test_reset_forgets_the_last_contact(task):
    p = task.default_proposer()
    state, obs = start(task)
    p.propose(obs, state)
    assert p._last is not None
    p.reset(0)
    assert p._last is None
