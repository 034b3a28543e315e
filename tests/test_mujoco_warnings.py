"""MuJoCo's warnings during a command are counted and summed up once, not printed one by one."""

import mujoco
import numpy as np
from mujoco import rollout

from twinloop.cli import common

XML = """<mujoco><option timestep="0.5"/><worldbody>
<body><freejoint/><geom size=".1 .1 .1" type="box"/></body>
<body pos="0 0 0.15"><freejoint/><geom size=".1 .1 .1" type="box"/></body></worldbody></mujoco>"""


def _diverging_rollouts(n: int) -> None:
    model = mujoco.MjModel.from_xml_string(XML)
    kind = mujoco.mjtState.mjSTATE_FULLPHYSICS
    states = np.zeros((n, mujoco.mj_stateSize(model, kind)))
    for i in range(n):
        data = mujoco.MjData(model)
        data.qvel[:] = 1e10
        mujoco.mj_getState(model, data, states[i], kind)
    rollout.rollout(model, [mujoco.MjData(model) for _ in range(2)], states, nstep=5)


def test_warnings_from_rollout_threads_are_counted_and_summed_up(capsys):
    before = mujoco.get_mju_user_warning()
    with common.MujocoWarnings() as caught:
        _diverging_rollouts(8)
    assert caught.counts.total() >= 8
    assert all("#" in kind and "Time" not in kind for kind in caught.counts)
    assert mujoco.get_mju_user_warning() is before
    out = capsys.readouterr().out
    assert f"MuJoCo warned {caught.counts.total()} times" in out
    assert out.count("\n") <= 3  # one note, however many warnings


def test_a_guarded_command_restores_the_handler_and_prints_nothing_without_warnings(capsys):
    before = mujoco.get_mju_user_warning()
    assert common.guard(lambda: 7)() == 7
    assert mujoco.get_mju_user_warning() is before
    assert "MuJoCo warned" not in capsys.readouterr().out
