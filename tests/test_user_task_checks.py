"""A task of one's own is checked where its mistakes are made: a residual that returns
nothing, a keyframe outside its joint's range."""

from __future__ import annotations

import numpy as np
import pytest

from twinloop.control import Refiner, RefinerConfig
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.tasks import Residual, SceneTask
from twinloop.twin import make_twin

ARM = """
<mujoco>
  {compiler}
  <option timestep="0.01"/>
  <worldbody>
    <body name="link">
      <joint name="shoulder" type="hinge" axis="0 0 1" range="{range}" limited="true"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5"/>
    </body>
  </worldbody>
  <actuator><position joint="shoulder" kp="5" ctrlrange="-1.5 1.5"/></actuator>
  {keyframe}
</mujoco>
"""


def _scene(tmp_path, *, range="-90 90", key="0.5", compiler="", name="arm.xml"):
    p = tmp_path / name
    keyframe = f'<keyframe><key qpos="{key}"/></keyframe>' if key is not None else ""
    p.write_text(ARM.format(range=range, keyframe=keyframe, compiler=compiler))
    return p


def _task(xml, residual=lambda t: t.qpos[..., 1:, 0:1] - 1.0, **kw):
    return SceneTask(xml, [Residual("angle", 1.0, residual)], error=lambda q: np.abs(q[..., 0] - 1.0),
                     tolerance=0.05, name="arm", control_period=0.05, **kw)


def test_a_residual_that_returns_an_empty_array_is_named(tmp_path):
    task = _task(_scene(tmp_path), residual=lambda t: t.qpos[..., 1:, 0:0])
    refiner = Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi"),
                      RefinerConfig(num_samples=4, horizon=0.2))
    with pytest.raises(TwinloopError, match=r"residual 'angle' returned an array of shape \(1, 4, \d+, 0\)"):
        refiner.refine(task.initial_state(np.random.default_rng(0)))


def test_a_keyframe_written_in_degrees_is_caught_with_the_unit(tmp_path):
    with pytest.raises(TwinloopError, match=r"joint 'shoulder' at 45 rad .*range \[-1.5708, 1.5708\] rad.*"
                                            r"\[-90, 90\] deg.*in degrees unless"):
        _task(_scene(tmp_path, key="45"))


def test_a_keyframe_within_range_and_a_radian_scene_are_accepted(tmp_path):
    assert _task(_scene(tmp_path, key="0.5")).initial_state(np.random.default_rng(0))[0] == pytest.approx(0.5)
    radian = _scene(tmp_path, range="-1.5 1.5", key="1.2", compiler='<compiler angle="radian"/>', name="r.xml")
    assert _task(radian).model.jnt_range[0, 1] == pytest.approx(1.5)


def test_a_scene_without_keyframe_starts_at_its_default_pose(tmp_path):
    assert _task(_scene(tmp_path, key=None)).initial_state(np.random.default_rng(0))[0] == 0.0
