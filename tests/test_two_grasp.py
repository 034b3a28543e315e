"""Two grippers on one towel (cloth-fold-2): independent grasps in the twin state, success on a
towel folded in half, the scripted base, the observation layout."""

import json

import mujoco
import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.tasks.cloth_fold_2 import fold_in_half
from twinloop.twin import MujocoTwin
from twinloop.worlds import ShiftedWorld, SimWorld


@pytest.fixture(scope="module")
def towel():
    return make_task("cloth-fold-2")


def target(task, d, arm):
    return d.site_xpos[task.model.site(f"{arm}_grasp_target").id].copy()


def left_grasp_and_lift(task, steps=100):
    """A data at rest with both grippers just over their corners; controls ``(steps, 8)`` that
    close the left grasp only for 40 steps, then lift both grippers 2 mm per step (the right
    one open)."""
    m = task.model
    d = mujoco.MjData(m)
    d.qpos[:] = task.initial_state(np.random.default_rng(0))[: m.nq]
    mujoco.mj_forward(m, d)
    left, right = target(task, d, "left"), target(task, d, "right")
    d.qpos[0:3], d.qpos[3:6] = left + [0, 0, 0.01], right + [0, 0, 0.01]
    mujoco.mj_forward(m, d)
    lift = [0.01 + 0.002 * max(k - 40, 0) for k in range(steps)]
    ctrl = np.array([[*left[:2], left[2] + z, 1.0, *right[:2], right[2] + z, 0.0] for z in lift])
    return d, left, right, ctrl


def test_one_grasp_lifts_its_corner_while_the_other_gripper_open_leaves_its_own(towel):
    m = towel.model
    d, left, right, ctrl = left_grasp_and_lift(towel)
    for u in ctrl:
        d.ctrl[:] = u
        mujoco.mj_step(m, d)
    assert target(towel, d, "left")[2] > left[2] + 0.08  # carried up by the left grasp
    assert target(towel, d, "right")[2] < right[2] + 0.01  # the right gripper rose alone
    assert d.act[0] > 0.9 and d.act[1] == 0.0
    gaps = towel.grasp_gap(d.qpos)
    assert gaps[0] < towel.capture_radius < gaps[1]


@pytest.mark.parametrize("cut", [3, 60])  # left grasp closing (activation mid-way), carrying
def test_a_rollout_from_a_mid_grasp_state_continues_both_grasps_exactly(towel, cut):
    m = towel.model
    d, _, right, ctrl = left_grasp_and_lift(towel)
    ctrl[45:, 7] = 1.0  # the right grasp closes later, on its own command
    for u in ctrl[:cut]:
        d.ctrl[:] = u
        mujoco.mj_step(m, d)
    state = np.concatenate([d.qpos, d.qvel, d.act])
    assert (0.1 < d.act[0] < 0.9) == (cut == 3)
    assert d.act[1] == 0.0 if cut == 3 else d.act[1] > 0.5  # the right grasp: open, or closing on its own
    for u in ctrl[cut:]:
        d.ctrl[:] = u
        mujoco.mj_step(m, d)
    assert d.act[1] > 0.9 and target(towel, d, "right")[2] > right[2] + 0.05  # both corners up at the end
    r = MujocoTwin(m, nthread=1).rollout(state, ctrl[cut:])
    np.testing.assert_allclose(r.qpos[0, 0, -1], d.qpos, atol=1e-6)
    np.testing.assert_allclose(r.qvel[0, 0, -1], d.qvel, atol=1e-4)


def folded_state(task):
    qpos = np.zeros(task.model.nq)
    qpos[0:3], qpos[3:6] = [-0.1, 0.0, 0.2], [0.1, 0.0, 0.2]
    flat = qpos.copy()
    qpos[task._vq[:, None] + np.arange(3)] = fold_in_half(task.rest) - task.rest
    return qpos, flat


def test_success_fires_on_a_towel_folded_in_half_and_not_on_a_flat_one(towel):
    folded, flat = folded_state(towel)
    assert towel.success(folded) and towel.error(folded) < 1e-9
    assert not towel.success(flat) and towel.error(flat) > 0.05
    for arm, corner in ((0, "corner_b"), (1, "corner_a")):  # either gripper still pinching its corner
        held = folded.copy()
        held[3 * arm : 3 * arm + 3] = towel.goal_of(corner) + [0, 0, 0.01]
        assert not towel.success(held)


def test_the_goal_lays_the_near_corners_on_the_far_ones(towel):
    pts = towel.keypoint_positions(np.zeros(towel.model.nq))
    for near, far in (("corner_a", "corner_d"), ("corner_b", "corner_c"), ("mid_ab", "mid_cd")):
        np.testing.assert_allclose(towel.goal_of(near), pts[towel.point_index(far)], atol=1e-12)
    np.testing.assert_allclose(towel.goal_of("mid_ad"), pts[towel.point_index("mid_ad")], atol=1e-12)  # on the fold


def test_the_estimate_recovers_a_towel_folded_in_half_and_both_grasps_exactly(towel):
    m = towel.model
    folded, _ = folded_state(towel)
    d = mujoco.MjData(m)
    d.qpos[:], d.act[:] = folded, [0.3, 0.8]
    mujoco.mj_forward(m, d)
    est = towel.state_from_obs(towel.obs_from_data(m, d))
    assert np.abs(towel.vertices(est[: m.nq]) - fold_in_half(towel.rest)).max() < 0.004
    np.testing.assert_array_equal(est[m.nq + m.nv :], [0.3, 0.8])
    np.testing.assert_allclose(est[0:6], folded[0:6])


def test_both_grasp_activations_are_observed_exactly_in_a_shifted_world(towel):
    world = ShiftedWorld(towel, 2, 0)
    for arm in ("left", "right"):
        i = towel.obs_names.index(f"{arm}_grasp")
        assert towel.obs_units()[i] == "1" and world.obs_noise[i] == 0.0
    assert world.obs_noise[towel.obs_names.index("right_x")] > 0.0


def test_the_scripted_base_folds_the_towel_in_the_nominal_twin(towel):
    world, prop = SimWorld(towel), towel.default_proposer()
    obs = world.reset(90000)
    for _ in range(towel.max_ticks):
        chunk = prop.propose(obs, towel.state_from_obs(obs))
        assert chunk.shape == (5, 8)
        obs, info = world.step(chunk[0])
        if towel.success(info["qpos"]):
            break
    assert towel.success(info["qpos"])


def test_ghost_traces_follow_both_grippers(towel):
    m = towel.model
    d, _, _, ctrl = left_grasp_and_lift(towel, steps=30)
    r = MujocoTwin(m, nthread=1).rollout(np.concatenate([d.qpos, d.qvel, d.act]), ctrl)
    pts = towel.trace_points(r.qpos[0], r.sensordata[0])
    assert pts.shape == (1, 31, 2 + len(towel.trace_keypoints), 3)
    np.testing.assert_allclose(pts[0, -1, 0], r.qpos[0, 0, -1, 0:3], atol=1e-9)
    np.testing.assert_allclose(pts[0, -1, 1], r.qpos[0, 0, -1, 3:6], atol=1e-9)


def test_a_repair_is_refused_for_two_grippers(towel):
    from twinloop.run.compare import RunConfig, build

    with pytest.raises(TwinloopError, match="no repair primitive"):
        build(RunConfig(task="cloth-fold-2", repair=True), check_twin=False)


def test_the_run_command_runs_cloth_fold_2(tmp_path):
    from typer.testing import CliRunner

    from twinloop.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", "--task", "cloth-fold-2", "--episodes", "1", "-k", "4", "--max-ticks", "2",
                                   "--no-video", "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert [r["controller"] for r in summary["results"]] == ["base", "refined"]
