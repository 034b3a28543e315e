"""block-push: cost terms, success test, 4-fold yaw symmetry, obs/state maps, start states."""

import mujoco
import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.tasks.base import Traj


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


def goal_qpos(task, pusher=(0.04, 0.0)):
    g = task.goal
    return np.array([pusher[0], pusher[1], g[0], g[1], 0.0, g[2]])


def static_traj(qpos, T=10, ctrl=None):
    q = np.broadcast_to(qpos, (T + 1, len(qpos))).copy()
    u = np.broadcast_to(q[:-1, 0:2] if ctrl is None else ctrl, (T, 2)).copy()
    return Traj(qpos=q, qvel=np.zeros((T + 1, 6)), sensordata=np.zeros((T + 1, 6)), ctrl=u)


def total(task, traj):
    return float(sum(task.cost_terms(traj).values()))


def test_success_at_the_goal_and_not_when_displaced_or_turned(task):
    q = goal_qpos(task)
    assert task.success(q)
    assert not task.success(q + [0, 0, 0.02, 0, 0, 0])
    assert not task.success(q + [0, 0, 0, 0, 0, 0.3])
    assert task.success(q + [0, 0, 0.01, 0, 0, 0.1])  # inside 1.5 cm and 0.15 rad


def test_a_cube_turned_a_quarter_turn_is_at_the_goal(task):
    q = goal_qpos(task) + [0, 0, 0, 0, 0, np.pi / 2]
    assert task.success(q)
    assert task.error(q) == pytest.approx(0.0, abs=1e-12)
    assert total(task, static_traj(q)) == pytest.approx(total(task, static_traj(goal_qpos(task))), abs=1e-9)


def test_error_is_zero_at_the_goal_and_grows_with_distance(task):
    q = goal_qpos(task)
    errs = [float(task.error(q + [0, 0, d, 0, 0, 0])) for d in (0.0, 0.01, 0.05)]
    assert errs[0] == pytest.approx(0.0, abs=1e-12)
    assert errs[0] < errs[1] < errs[2]
    assert errs[2] == pytest.approx(0.05)


def test_cost_is_lower_at_the_goal_than_away(task):
    away = goal_qpos(task) + [-0.2, 0.05, -0.2, 0.05, 0, 0.4]
    assert total(task, static_traj(goal_qpos(task))) < total(task, static_traj(away))


@pytest.mark.parametrize(
    "delta_q, delta_u, terms",
    [
        ([0, 0, 0.02, 0, 0, 0], 0.0, {"block_position", "final_position", "reach"}),
        ([0, 0, 0, 0, 0, 0.3], 0.0, {"block_yaw", "final_yaw"}),
        ([-0.1, 0, 0, 0, 0, 0], [-0.1, 0.0], {"reach"}),
        ([0, 0, 0, 0, 0, 0], 0.05, {"effort"}),
    ],
)
def test_each_residual_responds_to_its_own_quantity(task, delta_q, delta_u, terms):
    q0 = goal_qpos(task)
    u0 = np.broadcast_to(q0[0:2], (10, 2))
    base = task.cost_terms(static_traj(q0, ctrl=u0))
    moved = task.cost_terms(static_traj(q0 + delta_q, ctrl=u0 + np.asarray(delta_u)))
    for name in base:
        if name in terms:
            assert float(moved[name]) > float(base[name]) + 1e-6, name
        else:
            assert float(moved[name]) == pytest.approx(float(base[name]), abs=1e-9), name


def test_state_from_obs_round_trips_obs_from_data(task):
    m = task.model
    d = mujoco.MjData(m)
    d.qpos[:] = [-0.1, 0.05, 0.02, -0.03, 0.0, 0.4]
    d.qvel[:] = [0.1, -0.2, 0.03, 0.04, 0.0, 0.5]
    mujoco.mj_forward(m, d)
    s = task.state_from_obs(task.obs_from_data(m, d))
    np.testing.assert_allclose(s, np.concatenate([d.qpos, d.qvel]))


def test_state_from_obs_rejects_bad_observations(task):
    with pytest.raises(TwinloopError, match="observation"):
        task.state_from_obs(np.zeros(4))


def test_initial_state_is_seeded_and_starts_away_from_the_goal(task):
    a = task.initial_state(np.random.default_rng(1))
    np.testing.assert_array_equal(a, task.initial_state(np.random.default_rng(1)))
    assert not np.array_equal(a, task.initial_state(np.random.default_rng(2)))
    for seed in range(20):
        s = task.initial_state(np.random.default_rng(seed))
        assert not task.success(s[:6])
        assert np.linalg.norm(s[0:2] - s[2:4]) > task.half + task.pusher_radius  # not overlapping


def test_param_space_reads_nominal_from_the_model(task):
    space = task.param_space()
    np.testing.assert_allclose(space.read(task.model), space.nominal)
