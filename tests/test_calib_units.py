"""Calibration's error units: the loose defaults, and each component weighed by its own noise."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from twinloop.calib import CalibConfig, StateError, Trajectory
from twinloop.calib.windows import noise_units
from twinloop.errors import TwinloopError
from twinloop.tasks import make_task

NOISE = (5e-4, 5e-3, 1e-2)  # position m, angle rad, velocity m/s and rad/s


@pytest.fixture(scope="module")
def task():
    return make_task("quadruped-walk")


def moving(task) -> list[Trajectory]:
    """Two states that differ in every component: everything counts as measured."""
    s0 = task.initial_state(np.random.default_rng(0))
    s1 = s0 + 0.01
    return [Trajectory(np.stack([s0, s1]), np.zeros((1, task.nu)))]


def test_noise_units_give_a_free_body_its_position_angle_and_velocity_noise(task):
    m = task.model
    u = noise_units(m, *NOISE)
    np.testing.assert_array_equal(u[0:3], 5e-4)  # trunk position
    np.testing.assert_array_equal(u[3:7], 5e-3)  # trunk quaternion parts
    np.testing.assert_array_equal(u[7 : m.nq], 5e-3)  # the 12 hinges
    np.testing.assert_array_equal(u[m.nq : m.nq + m.nv], 1e-2)  # trunk and joint velocities


def test_in_noise_units_a_millimetre_of_trunk_height_counts_two_noise_stds(task):
    err = StateError.for_task(task, moving(task))
    weighed = err.in_units(noise_units(task.model, *NOISE))
    s = task.initial_state(np.random.default_rng(1))
    higher = s.copy()
    higher[2] += 1e-3
    z = np.flatnonzero(err.mask) == 2  # the residual entry of the trunk's height
    assert err(higher, s)[z][0] == pytest.approx(1e-3 / err.scale[2])  # error units: a position's
    assert weighed(higher, s)[z][0] == pytest.approx(2.0)


def test_a_component_without_noise_keeps_its_error_unit(task):
    err = StateError.for_task(task, moving(task))
    units = noise_units(task.model, 5e-4, 5e-3, 0.0)  # velocities not given
    weighed = err.in_units(units)
    nq = task.model.nq
    np.testing.assert_array_equal(weighed.scale[nq:], err.scale[nq:])
    np.testing.assert_array_equal(weighed.scale[:nq], units[:nq])


def test_weighing_by_noise_needs_the_noise():
    with pytest.raises(TwinloopError, match="weigh_by_noise needs the noise"):
        CalibConfig(weigh_by_noise=True)
    with pytest.raises(TwinloopError, match="weigh_by_noise must be True or False"):
        CalibConfig(weigh_by_noise="yes", start_noise=NOISE)
    assert CalibConfig(weigh_by_noise=True, start_noise=NOISE).weigh_by_noise


def test_the_quadruped_calibrates_positions_weighed_by_its_sensors_noise_by_default():
    from twinloop.cli.generate import resolve
    from twinloop.run.calibrate import CalibrateConfig

    cfg, sources, _ = resolve(CalibrateConfig, "calibrate", None, {}, "task", lambda: "quadruped-walk")
    assert cfg.calib.weigh_by_noise and not cfg.calib.use_velocity
    assert tuple(cfg.calib.start_noise) == NOISE and sources["calib.start_noise"] == "task"
    other, _, _ = resolve(CalibrateConfig, "calibrate", None, {"task": "block-push"}, "task", lambda: "quadruped-walk")
    assert not other.calib.weigh_by_noise and other.calib.use_velocity


def test_weighed_by_noise_a_fit_counts_its_errors_in_noise_stds():
    from twinloop.calib import calibrate, record_trajectory
    from twinloop.worlds import SimWorld

    push = make_task("block-push")
    space = push.param_space().subset(["block_friction", "block_mass"])
    world = SimWorld(push, model=space.apply(push.model, np.array([0.4, 0.7])))
    eps = [record_trajectory(world, push.excitation(s), s, 20) for s in range(2)]
    units = (1e-3, 5e-2, 2e-2)  # the error units: weighing by them changes nothing on slides and hinges
    base = CalibConfig(start_noise=units, use_velocity=False, errors_in_variables=False, max_evals=6)
    plain = calibrate(push, eps, space, config=base)
    same = calibrate(push, eps, space, config=replace(base, weigh_by_noise=True))
    half = calibrate(push, eps, space, config=replace(base, weigh_by_noise=True, start_noise=tuple(u / 2 for u in units)))
    assert same.train_error == pytest.approx(plain.train_error, rel=1e-12)
    assert half.train_error[0] == pytest.approx(2 * plain.train_error[0], rel=1e-9)


def test_error_units_weigh_free_and_ball_joints_by_kind_like_slides_and_hinges():
    """The joint type must be read as its enum: a raw int is never ``in`` a tuple of enum
    members, so a free joint was taken for a slide (its x weighed as a position, the rest at 1)
    and a ball joint's quaternion w as a position."""
    import mujoco

    from twinloop.calib.windows import state_units

    m = mujoco.MjModel.from_xml_string("""<mujoco><worldbody>
        <body><freejoint/><geom size=".1"/></body>
        <body pos="1 0 0"><joint type="ball"/><geom size=".1" pos=".2 0 0"/></body>
        <body pos="2 0 0"><joint type="slide" axis="1 0 0"/><geom size=".1"/></body>
        <body pos="3 0 0"><joint type="hinge"/><geom size=".1" pos=".2 0 0"/></body>
        </worldbody></mujoco>""")
    pos, ang, vel, avel = 1e-3, 1e-2, 2e-2, 0.2
    units, hinge = state_units(m, pos, ang, vel, avel)
    nq = m.nq  # 7 + 4 + 1 + 1; nv = 6 + 3 + 1 + 1
    assert list(units[:nq]) == [pos] * 3 + [ang] * 4 + [ang] * 4 + [pos, ang]
    assert list(units[nq:]) == [vel] * 3 + [avel] * 3 + [avel] * 3 + [vel, avel]
    assert list(np.flatnonzero(hinge)) == [12]  # only the hinge's angle wraps
