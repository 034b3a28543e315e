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


def test_ik_puts_the_fork_point_at_its_target_within_the_joint_limits(task):
    prop = task.default_proposer()
    puck = np.array([0.4, -0.25])
    phase, point, target, heading = prop.targets(np.zeros(7), puck)
    assert phase == "reach" and target[2] > prop.Z + 0.07  # from the start pose: over the puck first
    q, err = prop.ik(np.zeros(7), point, target, heading)
    x, R = prop.fork(q)
    assert err < 0.005 and np.linalg.norm(x + R @ point - target) < 0.005
    assert np.all(q >= prop.low) and np.all(q <= prop.high)
    h = R[:2, 0] / np.linalg.norm(R[:2, 0])
    assert h @ heading > np.cos(np.radians(30))


def test_scripted_proposer_gets_the_fork_around_the_puck_then_pushes_it_toward_the_goal(task):
    world = SimWorld(task)
    prop = task.default_proposer()
    obs = world.reset(1)
    start = task.error(task.state_from_obs(obs)[: task.model.nq])
    phases = []
    for _ in range(50):
        state = task.state_from_obs(obs)
        phases.append(prop.targets(state[:7], task.puck_xy(state[: task.model.nq]))[0])
        chunk = prop.propose(obs, state)
        assert chunk.shape == (prop.H, 7) and np.all(np.abs(chunk) <= 2.0)
        obs, _ = world.step(chunk[0])
    assert phases[0] == "reach" and "push" in phases[:35]  # around the puck within 1.75 s
    assert task.error(task.state_from_obs(obs)[: task.model.nq]) < start - 0.04


def test_scripted_proposer_stops_pressing_once_the_puck_is_at_the_goal(task):
    prop = task.default_proposer()
    puck = task.goal_xy() + np.array([0.0, -0.015])
    _, point, target, heading = prop.targets(np.zeros(7), puck)
    q, err = prop.ik(np.zeros(7), point, np.array([*puck, prop.Z]), heading)  # the corner at the puck
    assert err < 0.005
    phase, point, target, _ = prop.targets(q, puck)
    assert phase == "hold"
    np.testing.assert_allclose(point[0], 0.07)  # touching, not pressed in
    farther = puck + np.array([0.0, -0.05])
    assert prop.targets(q, farther)[0] != "hold"


def test_cost_prefers_the_fork_behind_the_puck_and_the_puck_nearer_the_goal(task):
    from twinloop.tasks.base import Traj

    T = 3
    goal = task.goal_xy()
    puck = np.array([0.45, -0.3, -0.275])
    u = np.array([*(goal - puck[:2]) / np.linalg.norm(goal - puck[:2]), 0.0])

    def traj(wrist, puck_xyz):
        sd = np.zeros((T + 1, task.model.nsensordata))
        sd[:, 3:6], sd[:, 6:9] = puck_xyz, wrist
        return Traj(np.zeros((T + 1, task.model.nq)), np.zeros((T + 1, task.model.nv)), sd, np.zeros((T, 7)))

    behind, ahead = traj(puck - 0.08 * u, puck), traj(puck + 0.08 * u, puck)
    terms_b, terms_a = task.cost_terms(behind), task.cost_terms(ahead)
    assert terms_b["fork_behind_puck"] < terms_a["fork_behind_puck"]
    nearer = traj(puck - 0.08 * u, puck + 0.1 * u)
    assert task.cost_terms(nearer)["puck_to_goal"] < terms_b["puck_to_goal"]
    assert task.cost_terms(nearer)["final_puck"] < terms_b["final_puck"]


def test_unknown_cost_terms_are_refused():
    with pytest.raises(TwinloopError, match="unknown pusher-v5 cost term"):
        make_task("pusher-v5", weights={"teleport": 1.0})
