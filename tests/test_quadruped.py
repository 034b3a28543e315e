"""quadruped-walk: the model, its fall and path tests, its shifted worlds, a deterministic
rollout and the trot gait walking in the nominal twin."""

import mujoco
import numpy as np
import pytest

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.run.experiment import run_episode
from twinloop.tasks import make_task
from twinloop.tasks.quadruped import HOME, TrotGait
from twinloop.twin import make_twin
from twinloop.worlds import ShiftedWorld, SimWorld
from twinloop.worlds.shifted import shifted_params
from twinloop.worlds.twin import TwinWorld


@pytest.fixture(scope="module")
def task():
    return make_task("quadruped-walk")


NQ_JOINTS = slice(7, 19)


def standing(task, x=0.0, y=0.0, z=None, quat=(1.0, 0.0, 0.0, 0.0)):
    q = task.model.key_qpos[0].copy()
    q[0:2] = x, y
    if z is not None:
        q[2] = z
    q[3:7] = quat
    return q


def test_the_model_loads_with_twelve_servos_and_stands(task):
    m = task.model
    assert (m.nq, m.nv, m.nu) == (19, 18, 12)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    for _ in range(200):  # 1 s holding the standing pose
        mujoco.mj_step(m, d)
    assert 0.28 < d.qpos[2] < 0.34
    assert task.failure(d.qpos) == ""


def test_falls_and_leaving_the_path_are_failures(task):
    assert task.failure(standing(task)) == ""
    assert task.failure(standing(task, z=0.12)) == "fell"
    on_side = (np.cos(np.pi / 4), np.sin(np.pi / 4), 0.0, 0.0)  # rolled 90 degrees
    assert task.failure(standing(task, quat=on_side)) == "fell"
    assert task.failure(standing(task, x=0.5, y=0.25)) == "off path"
    assert task.failure(standing(task, x=0.5, y=-0.15)) == ""


def test_success_is_the_end_of_the_path_within_tolerance(task):
    assert task.success(standing(task, x=1.5, y=0.1))
    assert not task.success(standing(task, x=1.4, y=0.0))
    assert not task.success(standing(task, x=1.6, z=0.1))  # arrived fallen
    assert task.error(standing(task, x=1.5, y=0.0)) == pytest.approx(0.0)


def test_shifted_parameters_differ_from_nominal_and_are_seeded(task):
    nominal = task.param_space().nominal
    a, b = shifted_params(task, 2, 3), shifted_params(task, 2, 4)
    np.testing.assert_array_equal(a, shifted_params(task, 2, 3))
    assert not np.allclose(a, b)
    factor = a / np.where(nominal > 0, nominal, 1.0)
    assert np.all(np.abs(np.log(factor[nominal > 0])) > 0.3)  # every parameter moved by 1.35x or more
    world = ShiftedWorld(task, severity=2, seed=3)
    mass = world.model.body_mass[mujoco.mj_name2id(world.model, mujoco.mjtObj.mjOBJ_BODY, "trunk")]
    assert mass == pytest.approx(a[0])
    assert world.model.actuator_gainprm[0, 0] == pytest.approx(a[3])


def test_a_rollout_is_deterministic(task):
    twin = make_twin("mujoco", task.model)
    s0 = task.initial_state(np.random.default_rng(0))
    ctrl = TrotGait(task).actions(np.arange(25) * 0.005, 0.0)[None]
    a, b = twin.rollout(s0, ctrl), twin.rollout(s0, ctrl)
    np.testing.assert_array_equal(a.qpos, b.qpos)
    assert np.abs(a.qpos[0, 0, -1, NQ_JOINTS] - HOME).max() > 0.01  # it moved


def test_the_trot_gait_walks_the_path_in_the_nominal_twin(task):
    twin = make_twin("mujoco", task.model)
    refiner = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=2, horizon=0.2))
    controller = Controller(refiner, TrotGait(task), refine=False)
    result = run_episode(SimWorld(task), controller, seed=0, record=False)
    assert result.success, result.failure
    assert result.ticks < task.max_ticks


def test_the_trot_gait_falls_with_weaker_motors_under_a_heavier_trunk(task):
    space = task.param_space()
    values = space.nominal.copy()
    values[space.names.index("trunk_mass")] *= 1.45
    values[space.names.index("motor_strength")] /= 1.45
    twin = make_twin("mujoco", task.model)
    refiner = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=2, horizon=0.2))
    controller = Controller(refiner, TrotGait(task), refine=False)
    result = run_episode(TwinWorld(task, values), controller, seed=0, record=False)
    assert result.failure == "fell"


def test_the_walking_excitation_is_seeded_and_walks(task):
    world = SimWorld(task)
    paths = []
    for seed in (1, 1, 2):
        f, obs = task.excitation(seed), world.reset(0)
        for k in range(40):
            obs, info = world.step(f(obs, k))
        assert task.failure(info["qpos"]) == ""
        paths.append(info["qpos"][:2])
    np.testing.assert_array_equal(paths[0], paths[1])
    assert paths[0][0] > 0.2 and not np.allclose(paths[0], paths[2])


def test_refinement_around_the_gait_plans_without_falling_back(task):
    twin = make_twin("mujoco", task.model)
    refiner = Refiner(task, twin, make_optimizer("predictive"),
                      RefinerConfig(num_samples=8, horizon=task.horizon, exact_prior=True))
    controller = Controller(refiner, TrotGait(task))
    result = run_episode(SimWorld(task), controller, seed=0, max_ticks=5, record=False)
    assert result.fallbacks == 0 and np.isfinite(controller.last.cost)
    assert result.failure == ""


def test_a_bad_gait_setting_is_named(task):
    with pytest.raises(TwinloopError, match="trot frequency"):
        TrotGait(task, frequency=0.0)


def still(task):
    """Standing on the path, facing along it, at rest: the gait steers straight (turn 0)."""
    return np.concatenate([standing(task), np.zeros(task.model.nv)])


def test_the_trot_phase_is_that_of_the_time_given_not_of_the_call_count(task):
    gait, s = TrotGait(task), still(task)
    times = [0.0, 0.013, 0.05, 0.051, 0.3, 0.31]  # irregular, as a planning thread's cycles are
    for calls, t in enumerate(times):
        gait.set_time(t)
        chunk = gait.propose(s, s)
        np.testing.assert_allclose(chunk, gait.actions(t + np.arange(gait.H) * task.control_period, 0.0), atol=1e-12)
        counted = gait.actions(calls * task.control_period + np.arange(gait.H) * task.control_period, 0.0)
        if calls >= 2:  # by then the call count's clock has run away from the time
            assert np.abs(chunk - counted).max() > 0.01


def test_a_synchronous_episode_gives_the_gait_the_phases_of_its_ticks_to_the_bit(task):
    timed, counted, s = TrotGait(task), TrotGait(task), still(task)
    for k in range(task.max_ticks):
        timed.set_time(k * task.control_period)  # a world's info["time"]: ticks x period
        np.testing.assert_array_equal(timed.propose(s, s), counted.propose(s, s))


def test_the_controller_sets_the_gait_clock_from_the_world_time(task):
    twin = make_twin("mujoco", task.model)
    refiner = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=2, horizon=0.2))
    gait, s = TrotGait(task), still(task)
    controller = Controller(refiner, gait, refine=False)
    action = controller.act(s, {"time": 0.52, "tick": 26})
    np.testing.assert_allclose(action, gait.actions(np.array([0.52]), 0.0)[0], atol=1e-12)
    assert np.abs(action - gait.actions(np.array([0.0]), 0.0)[0]).max() > 0.01  # not the first call's phase


def test_a_gait_time_must_be_a_time(task):
    with pytest.raises(TwinloopError, match="gait time"):
        TrotGait(task).set_time(float("nan"))
