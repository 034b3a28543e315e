"""An episode succeeds only when the task's success test holds for its dwell: an object that
slides through its goal has not reached it."""

from __future__ import annotations

import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.run.experiment import run_episode
from twinloop.tasks import TASKS, make_task
from twinloop.worlds.base import World


class _Scripted(World):
    """A world whose success verdict follows a script, one entry per step."""

    name = "scripted"

    def __init__(self, task, verdicts, terminate_at=None):
        self.task, self.verdicts, self.terminate_at = task, list(verdicts), terminate_at
        self.t = 0

    def reset(self, seed):
        self.t = 0
        return np.zeros(len(self.task.obs_names))

    def step(self, action):
        self.t += 1
        return np.zeros(len(self.task.obs_names)), self.info()

    def info(self):
        out = {"time": self.t * self.period, "tick": self.t}
        if self.t:
            out["success"] = self.verdicts[min(self.t, len(self.verdicts)) - 1]
            if self.terminate_at == self.t:
                out["terminated"] = True
        return out


class _Hold:
    """A controller that always sends the hold action."""

    n_fallbacks, last = 0, None

    def __init__(self, task):
        self.task = task

    def reset(self, seed):
        pass

    def act(self, obs, info=None):
        return self.task.hold_action(self.task.state_from_obs(obs))

    def stop(self):
        pass


@pytest.fixture()
def task():
    t = make_task("block-push")  # 0.1 s ticks
    t.success_dwell = 0.3  # three ticks
    return t


def _run(task, verdicts, **kw):
    return run_episode(_Scripted(task, verdicts, **kw), _Hold(task), 0, max_ticks=10, record=False)


def test_a_goal_passed_through_is_no_success(task):
    r = _run(task, [False, True, False] + [False] * 7)
    assert not r.success and r.ticks == 10


def test_a_goal_held_for_the_dwell_succeeds_and_ends_the_episode(task):
    r = _run(task, [False, True, True, True, True] + [False] * 5)
    assert r.success and r.ticks == 4  # met at ticks 2, 3, 4: held for three ticks


def test_a_goal_held_too_short_at_the_end_is_no_success(task):
    r = _run(task, [False] * 8 + [True, True])
    assert not r.success and r.ticks == 10


def test_a_world_that_ends_the_episode_gives_its_verdict_there(task):
    r = _run(task, [False, True], terminate_at=2)
    assert r.success and r.ticks == 2


def test_no_dwell_counts_the_first_tick_that_meets_the_test(task):
    task.success_dwell = 0.0
    r = _run(task, [False, True, False])
    assert r.success and r.ticks == 2


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_registered_task_declares_a_dwell_of_at_least_two_ticks(name):
    task = make_task(name)
    assert task.dwell_ticks() >= 2


def test_a_bad_dwell_is_named(task):
    task.success_dwell = float("nan")
    with pytest.raises(TwinloopError, match="success_dwell"):
        task.dwell_ticks()
