"""The GPU twins (MJX, MuJoCo-Warp) behave like the CPU twin; these run on the CPU in CI.

Each backend is skipped when its extra is not installed (``[gpu]`` for MJX, ``[warp]`` for
MuJoCo-Warp). Both engines are slow to compile on a CPU (MJX ~1 min per program on two
cores), so every test of a backend reuses one rollout shape per scene.

Agreement tolerance on final ``qpos`` and sensors (m, rad) against float64 CPU MuJoCo, for
slow pushes (the pusher keeps up with its target, so its PD force saturates only while the
block pins it; a pusher racing at its force limit moves differently in MJX, see twin/mjx.py):
MJX 5e-4 (float32; measured <= 2.5e-4, the largest being block z on a 0.2-friction floor),
MuJoCo-Warp 1e-5 (float32; measured <= 1e-6).

The arm scenes (push-upright, pivot, peg-insert) are checked mid-task, the fingers in contact
with the object, for 0.2 s under two particles (nominal and the shifted world's hidden values:
friction, mass, centre of mass, gains). MuJoCo-Warp agrees to 3e-3 there (measured <= 2.2e-3,
on the pivoting box, whose contacts at the wall and the table are stiff and many). MJX loads
each arm scene; its rollout program for a 7-DoF arm with box contacts takes minutes of CPU
to compile, so its agreement on them is a GPU check (benchmarks/device_run.sh).
"""

from __future__ import annotations

import sys

import mujoco
import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.params import Param, ParamSpace
from twinloop.tasks import TASKS, make_task
from twinloop.twin import make_twin
from twinloop.worlds import SimWorld, shifted_params

EXTRA = {"mjx": ("mujoco.mjx", "[gpu]"), "warp": ("mujoco_warp", "[warp]")}
MODULE = {"mjx": "twinloop.twin.mjx", "warp": "twinloop.twin.warp"}
T = 100  # 0.5 s of physics at dt = 5 ms
ATOL = {"mjx": 5e-4, "warp": 1e-5}
ARM_SCENES = ("push-upright", "pivot", "peg-insert")
ARM_ATOL = 3e-3


@pytest.fixture(scope="module", params=["mjx", "warp"])
def backend(request):
    pytest.importorskip(EXTRA[request.param][0])
    if request.param == "warp":
        import warp as wp

        wp.config.quiet, wp.config.log_level = True, wp.LOG_WARNING  # no per-module load lines
    return request.param


def _push(state, dx, dy, axis):
    """``(K, T, 2)`` pusher targets ramping from the pusher by ``dx`` along ``axis`` (0 = x,
    1 = y) with a constant offset ``dy`` across it: slow enough that the PD stage never
    saturates its force limit."""
    out = []
    for a, b in zip(dx, dy, strict=True):
        along = np.linspace(state[axis], state[axis] + a, T)
        across = np.full(T, state[1 - axis] + b)
        out.append(np.stack([along, across] if axis == 0 else [across, along], axis=-1))
    return np.stack(out)


def _scene(name):
    task = make_task(name)
    space = task.param_space()
    s = np.zeros(task.nstate)
    if name == "block-push":  # pusher touching the cube's -x face
        s[:6] = [-0.156, 0.0, -0.1, 0.0, 0.0, 0.0]
        ctrl = _push(s, [0.0, 0.02, 0.04, 0.06], [0.0, 0.003, -0.004, 0.006], axis=0)
    else:  # pusher touching the T's bar from -y
        s[:6] = [0.0, -0.016, 0.0, 0.0, 0.0, 0.0]
        ctrl = _push(s, [0.0, 0.03, 0.06, 0.09], [0.0, 0.004, -0.01, 0.02], axis=1)
    params = np.stack([space.nominal, space.nominal])
    params[1, 0] = 1.2  # particle 1: grippy, heavier block
    params[1, 1] = min(space.high[1], 0.8)
    return task, space, s, ctrl, params


_CACHE: dict = {}


def _pair(backend, name):
    """(task, state, ctrl, params, gpu twin, gpu rollouts, cpu rollouts), built once per module."""
    key = (backend, name)
    if key not in _CACHE:
        task, space, s, ctrl, params = _scene(name)
        cpu = make_twin("mujoco", task.model, space, nthread=2)
        gpu = make_twin(backend, task.model, space)
        _CACHE[key] = (task, s, ctrl, params, gpu, gpu.rollout(s, ctrl, params), cpu.rollout(s, ctrl, params))
    return _CACHE[key]


@pytest.mark.parametrize("name", ["mjx", "warp"])
def test_make_twin_names_the_missing_extra(monkeypatch, name):
    monkeypatch.setitem(sys.modules, MODULE[name], None)  # import of the backend now fails
    with pytest.raises(TwinloopError, match=EXTRA[name][1].replace("[", r"\[").replace("]", r"\]")):
        make_twin(name, make_task("block-push").model)


def test_rollout_has_the_cpu_twin_shapes_and_attributes(backend):
    task, s, ctrl, params, gpu, r, rc = _pair(backend, "block-push")
    assert (gpu.name, gpu.nu, gpu.nstate, gpu.dt) == (backend, task.nu, task.nstate, task.model.opt.timestep)
    for a in ("qpos", "qvel", "sensordata"):
        assert getattr(r, a).shape == getattr(rc, a).shape
    assert r.ok.shape == (2, 4) and r.ok.all()
    assert len(gpu.models_for(params)) == 2
    np.testing.assert_allclose(r.qpos[:, :, 0], rc.qpos[:, :, 0], atol=1e-6)


def test_final_states_agree_with_cpu_on_block_push(backend):
    *_, r, rc = _pair(backend, "block-push")
    np.testing.assert_allclose(r.qpos[:, :, -1], rc.qpos[:, :, -1], atol=ATOL[backend])
    np.testing.assert_allclose(r.sensordata[:, :, -1], rc.sensordata[:, :, -1], atol=ATOL[backend])


def test_particles_change_the_outcome_as_on_cpu(backend):
    task, s, ctrl, params, gpu, r, rc = _pair(backend, "block-push")
    moved = np.linalg.norm(r.qpos[:, -1, -1, 2:4] - s[2:4], axis=-1)
    moved_cpu = np.linalg.norm(rc.qpos[:, -1, -1, 2:4] - s[2:4], axis=-1)
    assert moved[0] > 10 * moved[1]  # the grippy heavy block barely moves
    np.testing.assert_allclose(moved, moved_cpu, atol=ATOL[backend])


def test_same_shape_never_recompiles(backend):
    task, s, ctrl, params, gpu, r, rc = _pair(backend, "block-push")
    n = gpu.n_compiles
    other = params.copy()
    other[:, 0] = [0.3, 0.9]
    r2 = gpu.rollout(s + 0.001 * (np.arange(task.nstate) < 2), ctrl[::-1], other)
    assert gpu.n_compiles == n
    assert not np.allclose(r2.qpos[:, ::-1], r.qpos)  # new values were simulated


def test_new_parameter_values_match_cpu(backend):
    task, s, ctrl, params, gpu, r, rc = _pair(backend, "block-push")
    other = np.stack([task.param_space().nominal] * 2)
    other[:, 0] = [0.2, 0.7]
    cpu = make_twin("mujoco", task.model, task.param_space(), nthread=2)
    np.testing.assert_allclose(gpu.rollout(s, ctrl, other).qpos[:, :, -1], cpu.rollout(s, ctrl, other).qpos[:, :, -1],
                               atol=ATOL[backend])


def test_a_list_of_models_acts_like_parameter_values(backend):
    task, s, ctrl, params, gpu, r, rc = _pair(backend, "block-push")
    models = task.param_space().models(task.model, params)
    n = gpu.n_compiles
    np.testing.assert_allclose(gpu.rollout(s, ctrl, models).qpos, r.qpos, atol=1e-6)
    assert gpu.n_compiles == n  # same fields vary, so the same program runs


def test_rollout_many_starts_each_row_from_its_own_state(backend):
    task, s, ctrl, params, gpu, r, rc = _pair(backend, "block-push")
    states = np.tile(s, (4, 1))
    states[:, 3] += [0.0, 0.002, -0.002, 0.004]  # block shifted sideways per row
    cpu = make_twin("mujoco", task.model, task.param_space(), nthread=2)
    got = gpu.rollout_many(states, ctrl, params)
    want = cpu.rollout_many(states, ctrl, params)
    np.testing.assert_allclose(got.qpos[:, :, 0], want.qpos[:, :, 0], atol=1e-6)
    np.testing.assert_allclose(got.qpos[:, :, -1], want.qpos[:, :, -1], atol=ATOL[backend])


def test_bad_ctrl_shape_is_rejected(backend):
    task, s, ctrl, params, gpu, r, rc = _pair(backend, "block-push")
    with pytest.raises(TwinloopError, match="ctrl"):
        gpu.rollout(s, np.zeros((4, T, task.nu + 1)))


_SPRING = """
<mujoco>
  <option timestep="0.01" integrator="Euler"/>
  <worldbody>
    <body><joint name="j" type="slide" axis="1 0 0" stiffness="1e6"/>
      <geom type="sphere" size="0.1" mass="1" contype="0" conaffinity="0"/></body>
  </worldbody>
  <actuator><motor joint="j" ctrlrange="-1 1"/></actuator>
</mujoco>
"""


def test_non_finite_rollouts_are_flagged(backend):
    # explicit Euler on a stiff spring at 10 ms: a kicked rollout overflows to inf/nan (the
    # stiffness is a parameter, so one particle of a batched field is exercised too)
    m = mujoco.MjModel.from_xml_string(_SPRING)
    space = ParamSpace((Param("k", ("jnt:j/stiffness",), 1.0, 1e6, 1e6),))
    ctrl = np.zeros((2, 40, 1))
    ctrl[1, 0] = 1.0
    twin = make_twin(backend, m, space, max_speed=np.inf)
    r = twin.rollout(np.zeros(2), ctrl, [[1e6]])
    assert r.ok.tolist() == [[True, False]]
    assert not np.isfinite(r.qpos[0, 1]).all()
    assert make_twin("mujoco", m, space).rollout(np.zeros(2), ctrl, [[1e6]]).ok.tolist() == [[True, False]]
    assert twin.rollout(np.zeros(2), ctrl, [[1.0]]).ok.tolist() == [[True, True]]  # a soft spring is fine


@pytest.mark.slow
@pytest.mark.skipif("push-t" not in TASKS, reason="push-t task not available")
def test_final_states_agree_with_cpu_on_push_t(backend):
    task, s, ctrl, params, gpu, r, rc = _pair(backend, "push-t")
    assert r.ok.all() and rc.ok.all()
    np.testing.assert_allclose(r.qpos[:, :, -1], rc.qpos[:, :, -1], atol=ATOL[backend])
    moved = np.linalg.norm(r.qpos[:, -1, -1, 2:4] - s[2:4], axis=-1)
    assert moved[0] > 10 * moved[1]


def _arm_case(name):
    """(task, mid-task state, (2, 40, nu) ctrl, (2, n) params): the scripted proposer has run
    until its fingers touch the object; the candidates follow its plan, one 3 mm aside."""
    task = make_task(name)
    world = SimWorld(task)
    obs = world.reset(0)
    script = task.default_proposer()
    touching = {"push-upright": 25, "pivot": 15, "peg-insert": 15}[name]
    for _ in range(touching):
        obs, _ = world.step(script.propose(obs, task.state_from_obs(obs))[0])
    s = world.true_state()
    ctrl = np.repeat(script.propose(obs, s)[:2], task.substeps, axis=0)[None].repeat(2, axis=0)
    ctrl[1, :, 1] += 0.003
    return task, s, ctrl, np.stack([task.param_space().nominal, shifted_params(task, 2, 0)])


@pytest.mark.parametrize("name", ARM_SCENES)
def test_the_arm_scenes_agree_with_cpu_in_contact_on_warp(name):
    pytest.importorskip("mujoco_warp")
    import warp as wp

    wp.config.quiet, wp.config.log_level = True, wp.LOG_WARNING
    task, s, ctrl, params = _arm_case(name)
    want = make_twin("mujoco", task.model, task.param_space(), nthread=2).rollout(s, ctrl, params)
    got = make_twin("warp", task.model, task.param_space()).rollout(s, ctrl, params)
    assert got.ok.all() and want.ok.all()
    np.testing.assert_allclose(got.qpos[:, :, -1], want.qpos[:, :, -1], atol=ARM_ATOL)
    moved = np.abs(want.qpos[:, :, -1, 9:12] - s[9:12]).max()
    assert moved > 1e-3  # the object is pushed: contact is what is compared


@pytest.mark.parametrize("name", ARM_SCENES)
def test_the_arm_scenes_load_in_mjx(name):
    pytest.importorskip("mujoco.mjx")
    task = make_task(name)
    twin = make_twin("mjx", task.model, task.param_space())
    assert (twin.nu, twin.nstate) == (task.nu, task.nstate)
    assert twin.n_compiles == 0  # building the twin compiles nothing yet
