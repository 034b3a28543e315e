"""ParamSpace: addressing model fields, bounds, priors, and no stale derived constants."""

import mujoco
import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.params import Param, ParamSpace, record_flex_materials
from twinloop.tasks import make_task
from twinloop.twin import MujocoTwin

XML = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 .1"/>
    <body name="arm" pos="0 0 .5">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom name="link" type="capsule" fromto="0 0 0 .3 0 0" size=".02"/>
      <body name="tip" pos=".3 0 0">
        <inertial pos="0 0 0" mass="{mass}" diaginertia="{i} {i} {i}"/>
        <geom name="ball" type="sphere" size=".04" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <actuator><position name="servo" joint="hinge" kp="20" kv="1"/></actuator>
</mujoco>
"""


def model(mass=1.0, i=0.001):
    return mujoco.MjModel.from_xml_string(XML.format(mass=mass, i=i))


def test_mass_change_refreshes_derived_constants():
    space = ParamSpace((Param("tip_mass", ("body:tip/mass",), 0.1, 5.0, 1.0),))
    changed = space.apply(model(1.0), [3.0])
    compiled = model(3.0, 0.003)  # what a recompile with the same density gives
    assert changed.body_mass[2] == pytest.approx(3.0)
    np.testing.assert_allclose(changed.body_inertia, compiled.body_inertia)
    # the constants a stale model would get wrong
    np.testing.assert_allclose(changed.body_subtreemass, compiled.body_subtreemass)
    np.testing.assert_allclose(changed.dof_invweight0, compiled.dof_invweight0)
    np.testing.assert_allclose(changed.actuator_acc0, compiled.actuator_acc0)
    # and the dynamics agree
    ctrl = np.full((1, 200, 1), 0.8)
    a = MujocoTwin(changed, nthread=1).rollout(np.zeros(2), ctrl)
    b = MujocoTwin(compiled, nthread=1).rollout(np.zeros(2), ctrl)
    np.testing.assert_allclose(a.qpos, b.qpos, atol=1e-10)


def test_setting_mass_without_refresh_would_be_stale():
    # guards the test above: a naive field write really leaves stale constants behind
    naive = model(1.0)
    naive.body_mass[2] = 3.0
    assert not np.allclose(naive.body_subtreemass, model(3.0, 0.003).body_subtreemass)


def test_apply_leaves_the_original_model_untouched():
    m = model()
    space = ParamSpace((Param("damping", ("dof:hinge/damping",), 0.0, 1.0, 0.1),))
    out = space.apply(m, [0.7])
    assert m.dof_damping[0] == pytest.approx(0.1)
    assert out.dof_damping[0] == pytest.approx(0.7)


def test_one_param_writes_all_its_targets_and_reads_back():
    task = make_task("block-push")
    space = task.param_space()
    v = space.nominal.copy()
    v[space.names.index("block_friction")] = 0.9
    m = space.apply(task.model, v)
    assert m.geom("block").friction[0] == pytest.approx(0.9)
    assert m.geom("floor").friction[0] == pytest.approx(0.9)
    np.testing.assert_allclose(space.read(m), v)


def test_actuator_gains_keep_position_servo_consistent():
    space = ParamSpace((Param("kp", ("actuator:servo/kp",), 1, 100, 20), Param("kv", ("actuator:servo/kv",), 0, 10, 1)))
    m = space.apply(model(), [50.0, 3.0])
    assert m.actuator_gainprm[0, 0] == 50 and m.actuator_biasprm[0, 1] == -50
    assert m.actuator_biasprm[0, 2] == -3
    np.testing.assert_allclose(space.read(m), [50.0, 3.0])


def test_out_of_bounds_values_are_rejected_by_name():
    space = ParamSpace((Param("damping", ("dof:hinge/damping",), 0.0, 1.0, 0.1),))
    with pytest.raises(TwinloopError, match=r"damping=2 is outside its bounds \[0, 1\]"):
        space.apply(model(), [2.0])
    with pytest.raises(TwinloopError, match="shape"):
        space.apply(model(), [0.1, 0.2])


def test_unknown_names_and_fields_are_clear_errors():
    with pytest.raises(TwinloopError, match="no body named 'nope'"):
        ParamSpace((Param("m", ("body:nope/mass",), 0.1, 2, 1),)).apply(model(), [1.0])
    with pytest.raises(TwinloopError, match="model has no field 'geom_bogus'"):
        ParamSpace((Param("g", ("geom:ball/bogus",), 0.1, 2, 1),)).apply(model(), [1.0])
    with pytest.raises(TwinloopError, match="cannot parse address"):
        Param("x", ("ball.friction",), 0, 1, 0.5)
    with pytest.raises(TwinloopError, match="give an index"):
        ParamSpace((Param("f", ("geom:ball/friction",), 0.1, 2, 1),)).apply(model(), [1.0])
    with pytest.raises(TwinloopError, match="nominal"):
        Param("x", ("geom:ball/friction[0]",), 0, 1, 5)


def test_a_centre_of_mass_offset_moves_the_centre_of_mass_and_the_dynamics():
    space = ParamSpace((Param("link_com", ("body:arm/ipos[0]",), 0.0, 0.3, 0.15),))
    m = space.apply(model(), [0.25])
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(d.xipos[1], [0.25, 0.0, 0.5], atol=1e-12)
    # gravity pulls the link down harder with its mass further out
    ctrl = np.zeros((1, 40, 1))
    fall = [MujocoTwin(mm, nthread=1).rollout(np.zeros(2), ctrl).qpos[0, 0, -1, 0] for mm in (model(), m)]
    assert fall[1] > fall[0] > 0


def test_a_centre_of_mass_compiled_at_the_body_origin_moves_too():
    # MuJoCo compiles such a body as "same frame" and then skips ipos; the com kind clears the
    # flag, so the offset acts (an MJX model must be compiled without it: mjx_writer says so)
    space = ParamSpace((Param("tip_com", ("body:tip/com[0]",), -0.1, 0.1, 0.0),))
    m = space.apply(model(), [0.01])
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    d0 = mujoco.MjData(model())
    mujoco.mj_forward(model(), d0)
    tip = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "tip")
    assert np.linalg.norm(d.xipos[tip] - d0.xipos[tip]) == pytest.approx(0.01, abs=1e-9)


def test_prior_samples_are_seeded_and_inside_bounds():
    space = make_task("block-push").param_space()
    a = space.sample_prior(np.random.default_rng(0), 500)
    b = space.sample_prior(np.random.default_rng(0), 500)
    np.testing.assert_array_equal(a, b)
    assert (a >= space.low).all() and (a <= space.high).all()
    assert a.std(axis=0).min() > 0


def test_prior_particles_start_at_the_nominal_then_draw_from_the_prior():
    space = make_task("block-push").param_space()
    p = space.prior_particles(np.random.default_rng(0), 5)
    assert p.shape == (5, len(space))
    np.testing.assert_array_equal(p[0], space.nominal)
    # the same stream as sample_prior: particles 1.. are its draws 1..
    np.testing.assert_array_equal(p[1:], space.sample_prior(np.random.default_rng(0), 5)[1:])
    assert (np.abs(p[1:] - space.nominal) > 0).all()


CLOTH = """
<mujoco>
  <option timestep="0.01" integrator="discrete"/>
  <worldbody>
    <geom type="plane" size="1 1 .1"/>
    <geom type="sphere" size=".03" pos="0 0 .03"/>
    <flexcomp name="cloth" type="grid" count="4 4 1" spacing=".05 .05 .05" pos="0 0 .1" radius=".003"
              dim="2" mass="{mass}">
      <contact selfcollide="none"/>
      <elasticity young="{young}" poisson="0.2" thickness="{thickness}" damping="{damping}" elastic2d="bend"/>
      <edge equality="true"/>
    </flexcomp>
  </worldbody>
</mujoco>
"""
CLOTH_NOMINAL = {"young": 5e4, "thickness": 0.002, "damping": 0.002, "mass": 0.05}


def cloth(**kw):
    spec = mujoco.MjSpec.from_string(CLOTH.format(**{**CLOTH_NOMINAL, **kw}))
    return record_flex_materials(spec).compile()


def fall(m, steps):
    """``qpos`` of the towel dropped from rest onto a ball after ``steps`` steps."""
    d = mujoco.MjData(m)
    for _ in range(steps):
        mujoco.mj_step(m, d)
    return d.qpos.copy()


CLOTH_SPACE = ParamSpace((
    Param("young", ("flex:cloth/young",), 1e4, 1e6, 5e4),
    Param("thickness", ("flex:cloth/thickness",), 0.001, 0.01, 0.002),
    Param("damping", ("flex:cloth/damping",), 0.0, 0.1, 0.002),
    Param("mass", ("flex:cloth/mass",), 0.01, 1.0, 0.05),
))


def test_flex_material_params_equal_recompiling_the_scene():
    values = {"young": 2e5, "thickness": 0.003, "damping": 0.01, "mass": 0.08}
    changed = CLOTH_SPACE.apply(cloth(), list(values.values()))
    compiled = cloth(**values)
    for field in ("flex_stiffness", "flex_bending", "efm0_L", "flex_damping", "body_mass", "body_inertia", "dof_M0"):
        np.testing.assert_allclose(getattr(changed, field), getattr(compiled, field), rtol=1e-9, atol=1e-15, err_msg=field)
    np.testing.assert_allclose(CLOTH_SPACE.read(changed), list(values.values()))
    np.testing.assert_allclose(fall(changed, 100), fall(compiled, 100), atol=1e-10)


def test_a_stiffer_flex_drapes_differently():
    # guards the test above: the material really changes the motion of a falling towel
    stiff = CLOTH_SPACE.apply(cloth(), [1e6, 0.01, 0.002, 0.05])
    assert np.abs(fall(cloth(), 60) - fall(stiff, 60)).max() > 1e-3


def test_flex_materials_need_their_recorded_values():
    bare = mujoco.MjModel.from_xml_string(CLOTH.format(**CLOTH_NOMINAL))
    with pytest.raises(TwinloopError, match="records no young of flex 'cloth'.*record_flex_materials"):
        ParamSpace((Param("e", ("flex:cloth/young",), 1e4, 1e6, 5e4),)).apply(bare, [1e5])


def test_a_geom_size_refreshes_its_collision_bounds():
    space = ParamSpace((Param("r", ("geom:link/size[0]",), 0.01, 0.1, 0.02),))
    changed = space.apply(model(), [0.05])
    compiled = mujoco.MjModel.from_xml_string(XML.format(mass=1.0, i=0.001).replace('size=".02"', 'size=".05"'))
    g = changed.geom("link").id
    assert changed.geom_rbound[g] == pytest.approx(compiled.geom_rbound[g])
    np.testing.assert_allclose(changed.geom_aabb[g], compiled.geom_aabb[g])


def test_dof_damping_of_a_ball_joint_reaches_all_its_dofs():
    m = mujoco.MjModel.from_xml_string('<mujoco><worldbody><body><joint name="b" type="ball"/>'
                                       '<geom size=".1"/></body></worldbody></mujoco>')
    out = ParamSpace((Param("d", ("dof:b/damping",), 0.0, 1.0, 0.0),)).apply(m, [0.3])
    np.testing.assert_allclose(out.dof_damping, [0.3, 0.3, 0.3])
