"""bar-lift: two attached arms, each driven in its own frame; one hand cannot lift the bar level,
two can; success; the scripted base in the nominal world."""

import mujoco
import numpy as np
import pytest

from twinloop.tasks import make_task
from twinloop.tasks.bar_lift import CLOSED, GRIP, MOUNTS, OPEN, XYZ
from twinloop.worlds import ShiftedWorld, SimWorld


@pytest.fixture(scope="module")
def bar():
    return make_task("bar-lift")


def run(task, state, actions):
    """Hold each ``(14,)`` action for one control period from ``state``; the final qpos."""
    m = task.model
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = state[: m.nq], state[m.nq : m.nq + m.nv]
    for a in actions:
        d.ctrl[:] = a
        for _ in range(task.substeps):
            mujoco.mj_step(m, d)
    return d.qpos.copy()


def grasp_then_lift(task, hands, ticks=12):
    """Actions: both tcps onto their handles, fingers open; ``hands`` (indices) close, then
    every tcp rises 10 cm."""
    q0 = task.initial_state(np.random.default_rng(0))
    at = task.handles(q0[: task.model.nq]) - [0, 0, 0.01]
    out = []
    for k in range(ticks):
        a = np.zeros(14)
        for i in range(2):
            a[XYZ[i]] = at[i] - MOUNTS[i] + [0, 0, 0.1 * max(k - 6, 0) / (ticks - 7)]
            a[GRIP[i]] = CLOSED if (i in hands and k >= 4) else OPEN
        out.append(a)
    return q0, out


def test_each_arm_follows_its_own_target_in_its_own_frame(bar):
    q0 = bar.initial_state(np.random.default_rng(1))
    tcp0 = bar.tcps(q0[: bar.model.nq])
    a = bar.hold_action(q0)
    a[XYZ[0]] += [0.05, 0.0, 0.05]  # the left arm only
    q = run(bar, q0, [a] * 8)
    tcp = bar.tcps(q)
    np.testing.assert_allclose(tcp[0], tcp0[0] + [0.05, 0.0, 0.05], atol=0.01)
    np.testing.assert_allclose(tcp[1], tcp0[1], atol=0.005)


def test_two_hands_lift_the_bar_level_and_one_hand_cannot(bar):
    q0, both = grasp_then_lift(bar, hands=(0, 1))
    q = run(bar, q0, both)
    assert q[2] > 0.09 and bar.tilt(q) < bar.level_tol
    q0, left = grasp_then_lift(bar, hands=(0,))
    q = run(bar, q0, left)
    assert not bar.success(q) and bar.tilt(q) > bar.level_tol  # the far end stays down: the bar pivots


def test_success_fires_on_a_lifted_level_bar_and_not_on_one_resting_or_tilted(bar):
    q = bar.initial_state(np.random.default_rng(2))[: bar.model.nq]
    assert not bar.success(q) and bar.error(q) > 0.07
    up = q.copy()
    up[0:7] = [*bar.rest[:2], 0.12, 1.0, 0.0, 0.0, 0.0]
    assert bar.success(up) and bar.error(up) == 0.0
    tilted = up.copy()
    tilted[3:7] = [np.cos(0.1), 0.0, np.sin(0.1), 0.0]  # 0.2 rad about y
    assert not bar.success(tilted)


def test_the_scripted_base_lifts_the_bar_in_the_nominal_twin(bar):
    world, prop = SimWorld(bar), bar.default_proposer()
    obs = world.reset(90000)
    for _ in range(bar.max_ticks):
        chunk = prop.propose(obs, bar.state_from_obs(obs))
        assert chunk.shape == (10, 14)
        obs, info = world.step(chunk[0])
        if bar.success(info["qpos"]):
            break
    assert bar.success(info["qpos"])


def test_shifted_worlds_hide_other_bar_physics(bar):
    a, b = ShiftedWorld(bar, 2, 0), ShiftedWorld(bar, 2, 1)
    assert not np.allclose(a.hidden_params, b.hidden_params)
    assert set(bar.param_space().names) == {"bar_mass", "bar_com_x", "finger_friction", "bar_friction", "arm_stiffness"}


def test_the_lifting_excitation_lifts_the_bar_where_the_generic_one_leaves_it_on_the_table(bar):
    """Calibration data that show the bar's mass: each excitation episode lifts the bar off
    the table (the generic random-target excitation does not), and the same seed gives the same
    episode."""
    from twinloop.calib.windows import record_trajectory
    from twinloop.tasks import Task

    world = SimWorld(bar)
    lifted = [record_trajectory(world, bar.excitation(s), s, 60) for s in (0, 1, 2)]
    assert all(t.states[:, 2].max() > bar.rest[2] + 0.05 for t in lifted)
    generic = [record_trajectory(world, Task.excitation(bar, s), s, 60) for s in (0, 1)]
    assert all(t.states[:, 2].max() < bar.rest[2] + 0.02 for t in generic)
    again = record_trajectory(world, bar.excitation(1), 1, 60)
    np.testing.assert_array_equal(again.actions, lifted[1].actions)
    assert not np.allclose(lifted[0].actions, lifted[1].actions)
