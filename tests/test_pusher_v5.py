"""pusher-v5: a world others wrote (Gymnasium's Pusher-v5) and a twin built from its own XML."""

import gymnasium as gym
import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import GymWorld, SimWorld, make_world


@pytest.fixture(scope="module")
def task():
    return make_task("pusher-v5")


def test_twin_is_built_from_the_installed_gymnasium_scene(task):
    assert "gymnasium" in task.xml_path.parts and task.xml_path.name == "pusher_v5.xml"
    env = gym.make("Pusher-v5").unwrapped
    m = task.model
    assert (m.nq, m.nv, m.nu) == (env.model.nq, env.model.nv, env.model.nu)
    assert m.opt.timestep == env.model.opt.timestep
    np.testing.assert_array_equal(m.actuator_ctrlrange, env.model.actuator_ctrlrange)


def test_twin_steps_exactly_as_the_env(task):
    """Same state, same torques: the twin's rollout ends where the env's step does."""
    env = gym.make("Pusher-v5")
    env.reset(seed=3)
    u = env.unwrapped
    state = np.concatenate([u.data.qpos, u.data.qvel])
    rng = np.random.default_rng(0)
    actions = rng.uniform(-2, 2, (4, 7))
    for a in actions:
        env.step(a.astype(np.float32))
    twin = make_twin("mujoco", task.model)
    ctrl = np.repeat(actions.astype(np.float32).astype(float), task.substeps, axis=0)
    r = twin.rollout(state, ctrl)
    np.testing.assert_allclose(r.qpos[0, 0, -1], u.data.qpos, atol=1e-9)
    np.testing.assert_allclose(r.qvel[0, 0, -1], u.data.qvel, atol=1e-9)


def test_state_from_the_env_observation_is_the_env_state(task):
    env = gym.make("Pusher-v5")
    obs, _ = env.reset(seed=7)
    u = env.unwrapped
    s = task.state_from_obs(obs)
    m = task.model
    np.testing.assert_allclose(s[: m.nq], u.data.qpos, atol=1e-12)
    np.testing.assert_allclose(s[m.nq : m.nq + 7], u.data.qvel[:7], atol=1e-12)
    assert not s[m.nq + 7 :].any()  # puck and goal velocities are not observed


def test_success_is_the_puck_within_5_cm_of_the_goal(task):
    q = np.zeros(task.model.nq)
    assert task.success(q)  # the puck starts at the goal in the scene's own frame
    lay = task._layout
    q[lay["puck"][0]] = 0.049
    assert task.success(q)
    q[lay["puck"][0]] = 0.051
    assert not task.success(q)
    assert task.error(q) == pytest.approx(0.051)


def test_start_states_follow_the_env_reset_distribution(task):
    rng = np.random.default_rng(0)
    for _ in range(50):
        s = task.initial_state(rng)
        q = s[: task.model.nq]
        assert not q[:7].any() and np.linalg.norm(q[7:9]) > 0.17
        assert -0.3 <= q[7] <= 0 and -0.2 <= q[8] <= 0.2
        assert task.error(q) > 0.17


def test_gym_world_reads_the_period_as_timestep_times_frame_skip(task):
    w = make_world(task, "gym")
    assert isinstance(w, GymWorld) and w.period == pytest.approx(0.05)
    assert w.describe()["control_period_source"] == "model.opt.timestep * frame_skip"
    obs = w.reset(0)
    assert obs.shape == (23,)
    _, info = w.step(np.zeros(7))
    assert info["time"] == pytest.approx(0.05) and not info["terminated"]


def test_gym_world_refuses_a_period_the_task_does_not_plan_at(task):
    with pytest.raises(TwinloopError, match="acts every 0.05"):
        GymWorld("Pusher-v5", task=task, control_period=0.01)


def test_scripted_proposer_reaches_toward_the_puck(task):
    world = SimWorld(task)
    prop = task.default_proposer()
    obs = world.reset(2)
    d0 = np.linalg.norm(obs[14:17] - obs[17:20])
    for _ in range(15):
        chunk = prop.propose(obs, task.state_from_obs(obs))
        assert chunk.shape == (prop.H, 7) and np.all(np.abs(chunk) <= 2.0)
        obs, _ = world.step(chunk[0])
    assert np.linalg.norm(obs[14:17] - obs[17:20]) < d0 - 0.1


def test_unknown_cost_terms_are_refused():
    with pytest.raises(TwinloopError, match="unknown pusher-v5 cost term"):
        make_task("pusher-v5", weights={"teleport": 1.0})
