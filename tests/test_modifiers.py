"""Parameter kinds: each changes the simulated behaviour it should, round-trips through save and
load, and from_model finds the right addresses without hand-written ones."""

from __future__ import annotations

import json

import mujoco
import numpy as np
import pytest

from twinloop.calib.problem import WindowProblem
from twinloop.calib.windows import StateError, Trajectory, Windows
from twinloop.errors import TwinloopError
from twinloop.params import Param, ParamSpace
from twinloop.tasks import SceneTask
from twinloop.tasks.base import Residual
from twinloop.twin import make_twin

SCENE = """
<mujoco>
  <option timestep="0.005" integrator="implicitfast"/>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 .1" friction="0.3 0.005 0.0001"/>
    <body name="pusher" pos="0 0 0.04">
      <joint name="px" type="slide" axis="1 0 0"/>
      <joint name="py" type="slide" axis="0 1 0"/>
      <geom name="pusher" type="sphere" size="0.015" mass="0.5" contype="2" conaffinity="2"/>
    </body>
    <body name="block" pos="0.1 0 0.04">
      <joint name="bx" type="slide" axis="1 0 0" damping="0.05"/>
      <joint name="by" type="slide" axis="0 1 0" stiffness="1"/>
      <joint name="bz" type="slide" axis="0 0 1"/>
      <joint name="yaw" type="hinge" axis="0 0 1" frictionloss="0.001"/>
      <geom name="block" type="box" size=".04 .04 .04" mass="0.5" contype="3" conaffinity="3" friction="0.5 0.005 0.0001"/>
    </body>
    <body name="ball" pos="-0.3 0.3 0.03">
      <freejoint/>
      <geom name="ball" type="sphere" size="0.03" mass="0.2"/>
    </body>
  </worldbody>
  <contact>
    <exclude body1="pusher" body2="block"/>
    <pair name="pb" geom1="pusher" geom2="block" friction="0.5 0.5 0.005 0.0001 0.0001" solref="0.01 1"/>
  </contact>
  <actuator>
    <position name="ax" joint="px" kp="150" kv="30" forcerange="-5 5"/>
    <position name="ay" joint="py" kp="150" kv="30" forcerange="-5 5"/>
  </actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_string(SCENE)


def _data(m, qpos=None, qvel=None, ctrl=None, xfrc=None):
    d = mujoco.MjData(m)
    if qpos is not None:
        d.qpos[: len(qpos)] = qpos
    if qvel is not None:
        d.qvel[: len(qvel)] = qvel
    if ctrl is not None:
        d.ctrl[:] = ctrl
    if xfrc is not None:
        d.xfrc_applied[m.body("block").id] = xfrc
    mujoco.mj_forward(m, d)
    return d


TOUCH = [0.1 - 0.055 + 0.001, 0.0]  # the pusher 1 mm into the block's -x face


def _contact(m, geom_a, geom_b, what):
    d = _data(m, qpos=TOUCH)
    ga, gb = m.geom(geom_a).id, m.geom(geom_b).id
    for c in (d.contact[i] for i in range(d.ncon)):
        if {int(c.geom[0]), int(c.geom[1])} == {ga, gb}:
            return float(getattr(c, what[0])[what[1]])
    return 0.0


# (address, low value, high value, measure(model) -> float, +1 if the measure grows with the value)
BEHAVIOUR = {
    "geom:block/sliding": (0.6, 0.9, lambda m: _contact(m, "block", "floor", ("friction", 0)), +1),
    "geom:block/torsional": (0.01, 0.03, lambda m: _contact(m, "block", "floor", ("friction", 2)), +1),
    "geom:block/rolling": (0.001, 0.003, lambda m: _contact(m, "block", "floor", ("friction", 3)), +1),
    "geom:block/timeconst": (0.01, 0.05, lambda m: _contact(m, "block", "floor", ("solref", 0)), +1),
    "geom:block/dampratio": (1.0, 2.0, lambda m: _contact(m, "block", "floor", ("solref", 1)), +1),
    "pair:pb/sliding": (0.1, 0.9, lambda m: _contact(m, "pusher", "block", ("friction", 1)), +1),
    "pair:pb/torsional": (0.001, 0.01, lambda m: _contact(m, "pusher", "block", ("friction", 2)), +1),
    "pair:pb/rolling": (0.001, 0.01, lambda m: _contact(m, "pusher", "block", ("friction", 4)), +1),
    "pair:pb/timeconst": (0.01, 0.05, lambda m: _contact(m, "pusher", "block", ("solref", 0)), +1),
    "pair:pb/dampratio": (0.5, 2.0, lambda m: _contact(m, "pusher", "block", ("solref", 1)), +1),
    "geom:block/solimp[0]": (0.8, 0.95, lambda m: _contact(m, "block", "floor", ("solimp", 0)), +1),
    # a larger block reaches a pusher parked 5 mm off its face
    "geom:block/size[0]": (0.04, 0.05, lambda m: float(_data(m, qpos=[0.1 - 0.06, 0.0]).ncon), +1),
    "body:block/mass": (0.5, 1.0, lambda m: _data(m, qpos=[-0.2, 0, 0.1, 0, 0.01], xfrc=[1, 0, 0, 0, 0, 0]).qacc[2], -1),
    # a centre of mass off the force's line turns the block
    "body:block/com[1]": (0.0, 0.02, lambda m: -_data(m, qpos=[-0.2, 0, 0.1, 0, 0.01], xfrc=[1, 0, 0, 0, 0, 0]).qacc[5], +1),
    "joint:bx/damping": (0.05, 5.0, lambda m: _data(m, qpos=[-0.2, 0, 0.1, 0, 0.01], qvel=[0, 0, 0.3]).qfrc_passive[2], -1),
    "joint:bx/armature": (0.0, 0.5, lambda m: _data(m, qpos=[-0.2, 0, 0.1, 0, 0.01], xfrc=[1, 0, 0, 0, 0, 0]).qacc[2], -1),
    "joint:yaw/frictionloss": (0.001, 0.05, lambda m: _data(m, qpos=[-0.2, 0, 0.1, 0, 0.01]).efc_frictionloss.max(), +1),
    "joint:by/stiffness": (1.0, 10.0, lambda m: -_data(m, qpos=[-0.2, 0, 0.1, 0.02, 0.01]).qfrc_passive[3], +1),
    "actuator:ax/kp": (100.0, 200.0, lambda m: _data(m, qpos=[-0.2, 0], ctrl=[-0.19, 0]).actuator_force[0], +1),
    "actuator:ax/kv": (10.0, 40.0, lambda m: -_data(m, qpos=[-0.2, 0], qvel=[0.05, 0], ctrl=[-0.2, 0]).actuator_force[0], +1),
    "actuator:ax/gear": (1.0, 2.0, lambda m: _data(m, qpos=[-0.2, 0], ctrl=[-0.19, 0]).qfrc_actuator[0], +1),
    "actuator:ax/bias": (0.0, 1.0, lambda m: _data(m, qpos=[-0.2, 0], ctrl=[-0.2, 0]).actuator_force[0], +1),
    "actuator:ax/forcelimit": (2.0, 4.0, lambda m: _data(m, qpos=[-0.2, 0], ctrl=[0.2, 0]).actuator_force[0], +1),
}


@pytest.mark.parametrize("address", list(BEHAVIOUR))
def test_each_model_kind_changes_what_it_should_and_reads_back(model, address):
    lo, hi, measure, sign = BEHAVIOUR[address]
    space = ParamSpace((Param("p", (address,), 0.0, 1000.0, lo),))
    a, b = space.apply(model, [lo]), space.apply(model, [hi])
    assert sign * (measure(b) - measure(a)) > 0
    np.testing.assert_allclose(space.read(b), [hi])


def test_a_pair_friction_leaves_the_geom_contacts_alone(model):
    pair = ParamSpace((Param("p", ("pair:pb/sliding",), 0.0, 2.0, 0.5),)).apply(model, [0.1])
    assert _contact(pair, "pusher", "block", ("friction", 0)) == pytest.approx(0.1)
    assert _contact(pair, "block", "floor", ("friction", 0)) == pytest.approx(0.5)


@pytest.mark.parametrize("address", [*BEHAVIOUR, "sensor:bx/bias", "sensor:bx/gain", "timing:ctrl/delay"])
def test_each_kind_round_trips_through_save_and_load(model, address, tmp_path):
    space = ParamSpace((Param("p", (address,), 0.0, 1000.0, 1.0, 0.5),))
    path = tmp_path / "space.json"
    path.write_text(json.dumps(space.to_dict()))
    loaded = ParamSpace.from_dict(json.loads(path.read_text()))
    assert loaded == space
    value = BEHAVIOUR[address][1] if address in BEHAVIOUR else 0.03
    a, b = space.apply(model, [value]), loaded.apply(model, [value])
    for t in space.resolve(model)[0]:
        for attr, idx in t.cells:
            assert getattr(a, attr)[idx] == getattr(b, attr)[idx]


@pytest.fixture(scope="module")
def scene_task(tmp_path_factory):
    path = tmp_path_factory.mktemp("scene") / "kinds.xml"
    path.write_text(SCENE)
    return SceneTask(path, [Residual("none", 1.0, lambda t: t.qpos[..., :1] * 0)], lambda q: q[..., 0], name="kinds")


def _replay(task, space, values):
    """Predicted measurements after the first tick of a window from rest, the pusher commanded
    2 cm ahead."""
    twin = make_twin("mujoco", task.model, space)
    start = np.zeros(task.nstate)
    start[[0, 2, 4]] = [-0.2, 0.1, 0.01]
    w = Windows(start[None], np.array([[[-0.18, 0.0], [-0.18, 0.0]]]), np.zeros((1, 2, task.nstate)), np.zeros(1),
                np.array([[-0.2, 0.0]]))
    err = StateError.for_task(task, [Trajectory(np.stack([start, start + 1e-3]), np.zeros((1, 2)))])
    return WindowProblem(task, twin, [w], err, space)._predict(w, np.atleast_2d(values))[0][0, 0, 0]


def test_an_actuation_delay_holds_the_previous_command_longer(scene_task):
    space = ParamSpace((Param("delay", ("timing:ctrl/delay",), 0.0, 0.1, 0.0),))
    # a tick is 50 ms here: a 25 ms delay leaves half a tick to move in
    moved_now, moved_late = (_replay(scene_task, space, [d])[0] + 0.2 for d in (0.0, 0.025))
    assert moved_now > 1.5 * moved_late > 0


def test_a_sensor_bias_and_gain_shift_the_measured_state(scene_task, model):
    space = ParamSpace((Param("bias", ("sensor:bx/bias",), -0.1, 0.1, 0.0), Param("gain", ("sensor:bx/gain",), 0.5, 2.0, 1.0)))
    true = _replay(scene_task, space, [0.0, 1.0])
    measured = _replay(scene_task, space, [0.01, 1.1])
    # the window starts from the measurement: true start (0.1 - 0.01) / 1.1, measured back
    assert measured[2] == pytest.approx(true[2], abs=1e-6)  # the block stays where it was measured
    gain, bias = space.measurement(model, [[0.01, 1.1]])
    assert gain[0, 2] == pytest.approx(1.1) and bias[0, 2] == pytest.approx(0.01) and gain[0, 0] == 1.0


def test_from_model_finds_the_addresses_of_several_bodies(model):
    space = ParamSpace.from_model(model, bodies=["block", "ball"], kinds=["mass", "sliding", "damping", "com"])
    by = {p.name: p.targets for p in space}
    assert by["block_mass"] == ("body:block/mass",) and by["ball_mass"] == ("body:ball/mass",)
    assert by["block_sliding"] == ("geom:block/sliding",) and by["ball_sliding"] == ("geom:ball/sliding",)
    assert by["pb_sliding"] == ("pair:pb/sliding",)  # the explicit pair touching the block
    assert {"bx_damping", "by_damping", "bz_damping", "yaw_damping"} <= set(by)
    assert not any(n.startswith("pusher") or n.startswith("ax") for n in by)  # not asked for
    assert by["block_com_y"] == ("body:block/com[1]",)
    np.testing.assert_allclose(space.read(model), space.nominal)
    cells = {c for ts in space.resolve(model) for t in ts for c in t.cells}
    assert ("body_mass", (model.body("ball").id,)) in cells
    assert ("dof_damping", (int(model.jnt_dofadr[model.joint("yaw").id]),)) in cells


def test_from_model_defaults_to_the_moving_bodies_and_leaves_mocap_bodies_out():
    from twinloop.tasks import make_task

    space = ParamSpace.from_model(make_task("push-t").model, kinds=["mass"])
    assert space.names == ["pusher_mass", "block_mass"]  # not the goal's mocap body


def test_from_model_builds_the_stage_parameters_of_an_actuated_body(model):
    space = ParamSpace.from_model(model, bodies=["pusher"], kinds=["actuator"])
    assert {"ax_kp", "ax_kv", "ax_gear", "ax_bias", "ax_forcelimit", "ay_forcelimit"} <= set(space.names)
    np.testing.assert_allclose(space.read(model), space.nominal)
    assert space.subset(["ax_forcelimit"]).nominal[0] == 5.0


def test_two_parameters_writing_one_cell_are_refused(model):
    space = ParamSpace((Param("a", ("geom:block/sliding",), 0, 1, 0.5), Param("b", ("geom:block/friction[0]",), 0, 1, 0.5)))
    with pytest.raises(TwinloopError, match="both write geom_friction"):
        space.check_model(model)


def test_kp_on_a_motor_and_a_force_limit_where_there_is_none_are_named():
    m = mujoco.MjModel.from_xml_string(SCENE.replace('forcerange="-5 5"', "").replace("<position", "<motor").replace(
        'kp="150" kv="30"', ""))
    with pytest.raises(TwinloopError, match="not a position servo"):
        ParamSpace((Param("k", ("actuator:ax/kp",), 1, 500, 150),)).check_model(m)
    with pytest.raises(TwinloopError, match="no force limit"):
        ParamSpace((Param("f", ("actuator:ax/forcelimit",), 1, 50, 5),)).check_model(m)


def test_the_mjx_form_writes_what_the_numpy_form_writes(model):
    jnp = pytest.importorskip("jax.numpy")
    mjx = pytest.importorskip("mujoco.mjx")
    space = ParamSpace((Param("m", ("body:block/mass",), 0.1, 2, 0.5), Param("f", ("pair:pb/sliding",), 0, 1, 0.5),
                        Param("kp", ("actuator:ax/kp",), 10, 500, 150), Param("s", ("geom:block/size[0]",), 0.01, 0.1, 0.04)))
    x = np.array([0.9, 0.2, 300.0, 0.05])
    written = space.mjx_writer(model)(mjx.put_model(model), jnp.asarray(x))
    ref = space.apply(model, x)
    for attr in ("body_mass", "body_inertia", "pair_friction", "actuator_gainprm", "actuator_biasprm", "geom_size"):
        np.testing.assert_allclose(np.asarray(getattr(written, attr)), getattr(ref, attr), rtol=1e-5, err_msg=attr)


# -- structural options of the pushing tasks ------------------------------------------------


@pytest.mark.parametrize("name", ["block-push", "push-t"])
def test_pusher_contact_pairs_keep_the_nominal_scene_and_take_their_own_friction(name):
    from twinloop.tasks import make_task

    geoms, pairs = make_task(name), make_task(name, contacts="pairs")
    rng = np.random.default_rng(3)
    s = geoms.initial_state(rng)
    u = np.tile(s[2:4] + [0.06, 0.02], (1, 150, 1))
    run = lambda t, x=None: make_twin("mujoco", t.model, t.param_space()).rollout(s, u, x).qpos[0, 0, -1]  # noqa: E731
    np.testing.assert_allclose(run(pairs), run(geoms), atol=1e-9)
    space = pairs.param_space()
    assert space.names[-1] == "pusher_friction"
    slick = space.nominal.copy()
    slick[-1] = 0.0  # a frictionless pusher while the floor keeps its friction
    assert np.abs(run(pairs, slick[None]) - run(pairs)).max() > 1e-3


def test_a_kinematic_pusher_follows_its_command_where_the_pd_stage_gives_way():
    from twinloop.tasks import make_task

    errors = {}
    for pusher in ("pd", "kinematic"):
        task = make_task("block-push", pusher=pusher)
        s = task.initial_state(np.random.default_rng(0))
        s[2:6] = [0.0, 0.0, 0.0, 0.0]
        s[0:2] = [-0.056, 0.0]
        heavy = task.param_space().nominal.copy()
        heavy[1] = 3.0  # a 3 kg block: more friction than the 5 N stage can beat
        target = np.array([0.05, 0.0])
        r = make_twin("mujoco", task.model, task.param_space()).rollout(s, np.tile(target, (1, 200, 1)), heavy[None])
        errors[pusher] = abs(r.qpos[0, 0, -1, 0] - (target[0]))
    assert errors["kinematic"] < 0.01 < errors["pd"]


def test_block_damping_may_exceed_two():
    from twinloop.tasks import make_task

    for name in ("block-push", "push-t"):
        assert make_task(name).param_space().subset(["block_damping"]).high[0] >= 10.0
