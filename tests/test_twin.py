"""The CPU MuJoCo twin: batched rollouts, parameters per particle, unstable rollouts flagged."""

import mujoco
import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.twin import MujocoTwin, make_twin


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


@pytest.fixture(scope="module")
def twin(task):
    return MujocoTwin(task.model, task.param_space(), nthread=2)


def _step_by_hand(model, state, ctrl):
    d = mujoco.MjData(model)
    d.qpos[:] = state[: model.nq]
    d.qvel[:] = state[model.nq : model.nq + model.nv]
    out = [d.qpos.copy()]
    for u in ctrl:
        d.ctrl[:] = u
        mujoco.mj_step(model, d)
        out.append(d.qpos.copy())
    return np.array(out)


def test_rollout_shapes_include_start_state(task, twin):
    s = task.initial_state(np.random.default_rng(0))
    u = np.zeros((5, 7, task.nu))
    r = twin.rollout(s, u)
    assert r.qpos.shape == (1, 5, 8, task.model.nq)
    assert r.qvel.shape == (1, 5, 8, task.model.nv)
    assert r.sensordata.shape == (1, 5, 8, task.model.nsensordata)
    assert r.ok.shape == (1, 5) and r.ok.all()
    np.testing.assert_allclose(r.qpos[0, :, 0], np.tile(s[: task.model.nq], (5, 1)))


def test_rollout_matches_stepping_by_hand(task, twin):
    rng = np.random.default_rng(1)
    s = task.initial_state(rng)
    u = rng.uniform(task.action_low, task.action_high, (3, 40, task.nu))
    r = twin.rollout(s, u)
    for k in range(3):
        np.testing.assert_allclose(r.qpos[0, k], _step_by_hand(task.model, s, u[k]), atol=1e-12)


def test_sensordata_belongs_to_the_state_at_the_same_index(task, twin):
    rng = np.random.default_rng(2)
    s = task.initial_state(rng)
    u = rng.uniform(task.action_low, task.action_high, (2, 30, task.nu))
    r = twin.rollout(s, u)
    d = mujoco.MjData(task.model)
    for t in (0, 1, 17, 30):
        d.qpos[:] = r.qpos[0, 1, t]
        d.qvel[:] = r.qvel[0, 1, t]
        mujoco.mj_forward(task.model, d)
        np.testing.assert_allclose(r.sensordata[0, 1, t], d.sensordata, atol=1e-12)


def test_particles_run_under_their_own_parameters(task, twin):
    space = task.param_space()
    s = task.initial_state(np.random.default_rng(3))
    s[0] = s[2] - 0.06  # pusher just behind the block
    s[1] = s[3]
    push = np.tile(np.array([s[2] + 0.15, s[3]]), (1, 100, 1))
    slippery = space.nominal.copy()
    slippery[0] = 0.1
    sticky = space.nominal.copy()
    sticky[0] = 1.2
    r = twin.rollout(s, push, params=np.stack([slippery, sticky]))
    assert r.qpos.shape[:2] == (2, 1)
    travel = r.qpos[:, 0, -1, 2] - s[2]
    assert travel[0] > travel[1] + 0.005  # low friction: block slides further
    # each particle equals a rollout of the model built for it
    alone = MujocoTwin(space.apply(task.model, sticky), nthread=1).rollout(s, push)
    np.testing.assert_allclose(r.qpos[1, 0], alone.qpos[0, 0], atol=1e-12)


def test_nonfinite_or_diverged_rollout_is_flagged(task):
    twin = MujocoTwin(task.model, nthread=2, max_speed=1e3)
    s = task.initial_state(np.random.default_rng(4))
    u = np.zeros((3, 20, task.nu))
    r = twin.rollout(s, u)
    assert r.ok.all()
    bad = s.copy()
    bad[task.model.nq] = 5e3  # runaway speed
    r = twin.rollout(bad, u)
    assert not r.ok.any()


def test_engine_stop_on_warning_is_flagged():
    # a control the engine rejects as bad stops the trajectory (time freezes); we must notice
    xml = """<mujoco><option timestep="0.01"/><worldbody><body><joint name="j" type="slide" axis="1 0 0"/>
    <geom size=".1" mass="1"/></body></worldbody><actuator><motor joint="j"/></actuator></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    twin = MujocoTwin(m, nthread=1)
    u = np.ones((2, 10, 1))
    u[1, 4] = 1e12  # huge value: MuJoCo warns and the rollout stops
    r = twin.rollout(np.zeros(2), u)
    assert r.ok.tolist() == [[True, False]]


def test_bad_inputs_name_the_problem(task, twin):
    s = task.initial_state(np.random.default_rng(5))
    with pytest.raises(TwinloopError, match="state must have shape"):
        twin.rollout(s[:-1], np.zeros((2, 3, task.nu)))
    with pytest.raises(TwinloopError, match="NaN"):
        twin.rollout(np.full_like(s, np.nan), np.zeros((2, 3, task.nu)))
    with pytest.raises(TwinloopError, match="ctrl must have shape"):
        twin.rollout(s, np.zeros((2, 3, task.nu + 1)))
    with pytest.raises(TwinloopError, match="empty"):
        twin.rollout(s, np.zeros((0, 3, task.nu)))
    with pytest.raises(TwinloopError, match="NaN"):
        twin.rollout(s, np.full((2, 3, task.nu), np.nan))


def test_unknown_backend_is_a_clear_error(task):
    with pytest.raises(TwinloopError, match="unknown backend 'bullet'"):
        make_twin("bullet", task.model)


def test_a_list_of_models_runs_one_particle_each(task, twin):
    space = task.param_space()
    heavy = space.apply(task.model, [0.5, 2.5, 0.05])
    s = task.initial_state(np.random.default_rng(6))
    u = np.tile(np.array([s[2] + 0.1, s[3]]), (2, 60, 1))
    by_list = twin.rollout(s, u, params=[task.model, heavy])
    by_values = twin.rollout(s, u, params=np.array([space.nominal, [0.5, 2.5, 0.05]]))
    np.testing.assert_allclose(by_list.qpos, by_values.qpos, atol=1e-12)
    other = mujoco.MjModel.from_xml_string("<mujoco><worldbody/></mujoco>")
    with pytest.raises(TwinloopError, match="not a model of the twin.s scene"):
        twin.rollout(s, u, params=[task.model, other])
