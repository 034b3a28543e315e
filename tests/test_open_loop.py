"""The open-loop proposer: the task's script rehearsed once in the nominal model, then replayed."""

import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.policies import PROPOSERS, OpenLoopProposer, make_proposer
from twinloop.tasks import make_task
from twinloop.worlds import SimWorld


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


def test_open_loop_is_a_registered_proposer_choice(task):
    assert "open-loop" in PROPOSERS
    p = make_proposer(task, "open-loop")
    assert isinstance(p, OpenLoopProposer) and p.ticks == task.max_ticks


def test_the_plan_is_what_the_script_does_closed_loop_in_the_nominal_world(task):
    world, script = SimWorld(task), task.default_proposer()
    obs = world.reset(3)
    script.reset(3)
    p = OpenLoopProposer(task, task.default_proposer(), ticks=12)
    p.reset(3)
    plan = p.propose(obs, world.true_state())
    sent = []
    for _ in range(12):
        sent.append(np.clip(script.propose(obs, world.true_state())[0], task.action_low, task.action_high))
        obs, _ = world.step(sent[-1])
    assert plan.shape == (12, task.nu)
    np.testing.assert_allclose(plan, np.array(sent), atol=1e-12)


def test_later_calls_replay_the_rest_of_the_plan_whatever_they_observe(task):
    world = SimWorld(task)
    obs = world.reset(0)
    p = OpenLoopProposer(task, task.default_proposer(), ticks=6)
    plan = p.propose(obs, world.true_state())
    moved = world.true_state() + 0.05  # the world went elsewhere: the plan does not notice
    for i in range(1, 6):
        np.testing.assert_array_equal(p.propose(obs + 1.0, moved), plan[i:])
    np.testing.assert_array_equal(p.propose(obs, moved), plan[-1:])  # run out: the last action


def test_reset_plans_again_from_the_next_episodes_start(task):
    world = SimWorld(task)
    p = OpenLoopProposer(task, task.default_proposer(), ticks=5)
    first = p.propose(world.reset(0), world.true_state())
    p.reset(1)
    second = p.propose(world.reset(1), world.true_state())
    assert not np.allclose(first, second)
    p.reset(0)
    np.testing.assert_array_equal(p.propose(world.reset(0), world.true_state()), first)


def test_open_loop_refuses_no_proposer_and_a_bad_length(task):
    with pytest.raises(TwinloopError, match="proposer 'none'"):
        OpenLoopProposer(task, None)
    with pytest.raises(TwinloopError, match="ticks"):
        OpenLoopProposer(task, task.default_proposer(), ticks=0)
