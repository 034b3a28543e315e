"""The arm and its tasks: joint tracking, Cartesian control, and each task's cost, success and
failure on hand-made states."""

import mujoco
import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.plan import MPPI, PredictiveSampling
from twinloop.run.compare import RunConfig, build
from twinloop.run.distill import DistillConfig
from twinloop.run.policy import PolicySpec
from twinloop.run.rsr import RSRConfig, rsr_controller
from twinloop.tasks import make_task
from twinloop.tasks.arm import N_ARM_Q, joint_servo_model, yaw_quat
from twinloop.tasks.base import Traj
from twinloop.tasks.pivot import lean_quat
from twinloop.twin import make_twin
from twinloop.worlds import ShiftedWorld, SimWorld

ARM_TASKS = ("push-upright", "pivot", "peg-insert")


@pytest.fixture(scope="module")
def tasks():
    return {name: make_task(name) for name in ARM_TASKS}


def with_object(task, pos, quat):
    """``(nq,)`` positions: the arm at home, the object at ``pos`` / ``quat``."""
    q = task.model.qpos0.copy()
    q[:N_ARM_Q] = task.model.qpos_spring[:N_ARM_Q]
    q[N_ARM_Q : N_ARM_Q + 7] = [*pos, *quat]
    return q


def traj(task, qpos):
    """A one-step trajectory that stays at ``qpos`` (what a residual reads)."""
    m = task.model
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    mujoco.mj_forward(m, d)
    q = np.stack([qpos, qpos])
    return Traj(q, np.zeros((2, m.nv)), np.stack([d.sensordata, d.sensordata]), np.tile(task.hold_action(np.concatenate([qpos, np.zeros(m.nv)])), (1, 1)))


def tilted(theta):
    """Quaternion of a tilt by ``theta`` (rad) about the world y axis."""
    return np.array([np.cos(theta / 2), 0.0, np.sin(theta / 2), 0.0])


# -- the arm ---------------------------------------------------------------------------------


def test_the_arm_tracks_a_joint_target(tasks):
    m = joint_servo_model(tasks["push-upright"])
    d = mujoco.MjData(m)
    d.qpos[:N_ARM_Q] = m.qpos_spring[:N_ARM_Q]
    target = m.qpos_spring[:7] + np.array([0.3, -0.2, 0.25, 0.3, -0.3, 0.2, 0.4])
    d.ctrl[:7] = target
    for _ in range(400):  # 2 s
        mujoco.mj_step(m, d)
    np.testing.assert_allclose(d.qpos[:7], target, atol=0.01)
    assert np.abs(d.qvel[:7]).max() < 0.01


def test_the_cartesian_controller_brings_the_tool_to_its_target_pointing_down(tasks):
    task = tasks["push-upright"]
    target = np.array([0.05, -0.08, 0.12])
    s = task.settle_arm(target, task.model.qpos0[N_ARM_Q:])
    q = s[: task.model.nq]
    np.testing.assert_allclose(task.tcp_from_qpos(q), target, atol=0.002)
    d = mujoco.MjData(task.model)
    d.qpos[:] = q
    mujoco.mj_kinematics(task.model, d)
    tool_axis = d.site("tcp").xmat.reshape(3, 3)[:, 2]
    assert tool_axis[2] < -0.999  # the fingers point straight down


def test_the_hold_action_keeps_the_tool_where_it_is(tasks):
    task = tasks["pivot"]
    s = task.initial_state(np.random.default_rng(2))
    a = task.hold_action(s)
    np.testing.assert_allclose(a[:3], task.tcp_from_qpos(s[: task.model.nq]), atol=1e-9)
    np.testing.assert_array_equal(a[3:], task.action_low[3:])


@pytest.mark.parametrize("name", ARM_TASKS)
def test_each_task_plans_the_tool_position_and_holds_its_rotation_and_grip(tasks, name):
    task = tasks[name]
    assert task.nu == 7
    assert np.all(task.action_low[:3] < task.action_high[:3])
    np.testing.assert_array_equal(task.action_low[3:], task.action_high[3:])


@pytest.mark.parametrize("name", ARM_TASKS)
def test_start_states_are_seeded_at_rest_and_differ_between_seeds(tasks, name):
    task = tasks[name]
    a = task.initial_state(np.random.default_rng([4, 0]))
    b = task.initial_state(np.random.default_rng([4, 0]))
    c = task.initial_state(np.random.default_rng([5, 0]))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    assert np.abs(a[task.model.nq :]).max() < 0.05  # nothing moves fast at the start


@pytest.mark.parametrize("name", ARM_TASKS)
def test_the_scripted_proposer_gives_actions_within_bounds(tasks, name):
    task = tasks[name]
    s = task.initial_state(np.random.default_rng(1))
    chunk = task.default_proposer().propose(s, s)
    assert chunk.shape == (10, 7)
    assert np.all(chunk >= task.action_low - 1e-12) and np.all(chunk <= task.action_high + 1e-12)


@pytest.mark.parametrize("name", ARM_TASKS)
def test_the_shifted_world_moves_every_parameter_including_the_centre_of_mass(tasks, name):
    task = tasks[name]
    w = ShiftedWorld(task, severity=2, seed=0)
    space = task.param_space()
    assert {"arm_stiffness"} <= set(space.names) and any("com" in n for n in space.names)
    assert np.all(np.abs(w.hidden_params - space.nominal) > 0)
    np.testing.assert_allclose(space.read(w.model), w.hidden_params)


def test_an_arm_task_refuses_a_scene_with_other_actuators():
    from twinloop.tasks.push_upright import PushUpright

    class Joints(PushUpright):
        name = "joints"

        @property
        def model(self):
            return joint_servo_model(make_task("push-upright"))

    with pytest.raises(TwinloopError, match="must include arm.xml and add no actuators"):
        Joints()


# -- a run's optimizer -----------------------------------------------------------------------


def test_a_run_of_an_arm_task_plans_with_the_tasks_optimizer_and_noise():
    cfg = RunConfig(task="pivot", twin_timestep=None)
    assert (cfg.optimizer, cfg.noise) == ("predictive", 0.05)
    assert build(cfg)[3].optimizer == PredictiveSampling(noise=0.05)


def test_an_optimizer_and_noise_given_to_a_run_override_the_tasks():
    cfg = RunConfig(task="pivot", optimizer="mppi", noise=0.3, twin_timestep=None)
    assert build(cfg)[3].optimizer == MPPI(noise=0.3)


def test_a_task_without_preferences_runs_mppi_at_its_own_noise():
    cfg = RunConfig(task="block-push")
    assert (cfg.optimizer, cfg.noise) == ("mppi", None)


def test_the_rsr_loop_plans_with_the_tasks_optimizer_and_noise():
    cfg = RSRConfig(task="pivot")
    _, ctl = rsr_controller(cfg, None, None, beta=0.0)
    assert ctl.refiner.optimizer == PredictiveSampling(noise=0.05)
    assert RSRConfig(task="pivot", optimizer="cem", noise=0.2).optimizer == "cem"


def test_distill_plans_with_the_tasks_optimizer_and_noise_unless_told():
    assert (DistillConfig(task="peg-insert").optimizer, DistillConfig(task="peg-insert").noise) == ("predictive", 0.05)
    assert (DistillConfig(task="push-t").optimizer, DistillConfig(task="push-t").noise) == ("mppi", None)
    assert DistillConfig(task="peg-insert", optimizer="mppi", noise=0.3).noise == 0.3


def test_an_evaluated_policy_plans_at_the_tasks_noise_with_its_own_optimizer(tasks):
    refiner = PolicySpec.parse("scripted+mppi@k=8").make_refiner(tasks["pivot"], make_twin("mujoco", tasks["pivot"].model))
    assert refiner.optimizer == MPPI(noise=0.05)


# -- push-upright ----------------------------------------------------------------------------


def test_push_upright_succeeds_only_at_the_goal_upright_and_turned_right(tasks):
    t = tasks["push-upright"]
    gx, gy, gyaw = t.goal
    at_goal = with_object(t, [gx + 0.01, gy, 0.08], yaw_quat(gyaw + np.pi / 2 + 0.1))  # a square: 4 headings
    assert t.success(at_goal) and t.failure(at_goal) == ""
    assert not t.success(with_object(t, [gx + 0.03, gy, 0.08], yaw_quat(gyaw)))
    assert not t.success(with_object(t, [gx, gy, 0.08], yaw_quat(gyaw + 0.3)))
    assert not t.success(with_object(t, [gx, gy, 0.08], tilted(0.15)))


def test_push_upright_fails_when_the_box_topples(tasks):
    t = tasks["push-upright"]
    assert t.failure(with_object(t, [0.0, 0.0, 0.08], tilted(0.4))) == ""  # leaning, not lost
    assert t.failure(with_object(t, [0.0, 0.0, 0.05], tilted(0.6))) == "toppled"
    assert t.failure(with_object(t, [0.0, 0.0, 0.025], tilted(np.pi / 2))) == "toppled"


def test_push_upright_cost_grows_with_distance_and_tilt(tasks):
    t = tasks["push-upright"]
    gx, gy, gyaw = t.goal
    goal = t.cost_terms(traj(t, with_object(t, [gx, gy, 0.08], yaw_quat(gyaw))))
    far = t.cost_terms(traj(t, with_object(t, [gx - 0.1, gy, 0.08], yaw_quat(gyaw))))
    leaning = t.cost_terms(traj(t, with_object(t, [gx, gy, 0.08], tilted(0.2))))
    assert goal["box_position"] < 1e-12 and goal["tilt"] < 1e-12
    assert far["box_position"] > 1.0 and far["final_position"] > 1.0
    assert leaning["tilt"] > 1.0 and leaning["final_tilt"] > 1.0



def test_push_upright_cost_wants_the_fingertips_behind_the_box_at_the_horizons_end(tasks):
    # the same box 12 cm from the goal, the fingertips on its far side from the goal or on
    # its near side: only the far side lets the box be pushed on without a detour
    t = tasks["push-upright"]
    q = with_object(t, [0.0, 0.0, 0.08], yaw_quat(0.0))
    tcp = t.tcp_from_qpos(q)[:2]
    u = (t.goal[:2] - tcp) / np.linalg.norm(t.goal[:2] - tcp)
    reach = t.half + t.finger_depth + 0.005
    behind = t.cost_terms(traj(t, with_object(t, [*(tcp + u * reach), 0.08], yaw_quat(0.0))))
    ahead = t.cost_terms(traj(t, with_object(t, [*(tcp - u * reach), 0.08], yaw_quat(0.0))))
    assert behind["push_pose"] < 1e-6
    assert ahead["push_pose"] > 1.0


# -- pivot -----------------------------------------------------------------------------------


def test_pivot_succeeds_only_standing_on_its_end_on_the_table(tasks):
    t = tasks["pivot"]
    a = t.half[0]
    standing = with_object(t, [0.12, 0.0, a], lean_quat(np.pi / 2))
    assert t.success(standing) and t.failure(standing) == ""
    assert not t.success(with_object(t, [0.12, 0.0, a + 0.02], lean_quat(np.pi / 2)))  # flung up the wall
    assert not t.success(with_object(t, [0.06, 0.0, 0.07], lean_quat(np.radians(55))))  # still leaning


def test_pivot_fails_when_the_box_falls_flat_or_rolls_over(tasks):
    t = tasks["pivot"]
    assert t.failure(with_object(t, [0.06, 0.0, 0.07], lean_quat(np.radians(55)))) == ""
    assert t.failure(with_object(t, [0.0, 0.0, 0.03], lean_quat(0.05))) == "fell"
    rolled = np.array([np.cos(0.4), np.sin(0.4), 0.0, 0.0])  # 0.8 rad about its long axis
    assert t.failure(with_object(t, [0.06, 0.0, 0.04], rolled)) == "tumbled"


def test_pivot_cost_falls_as_the_box_stands_up(tasks):
    t = tasks["pivot"]
    costs = [t.cost_terms(traj(t, with_object(t, [0.1, 0.0, 0.07], lean_quat(np.radians(deg)))))["upright"]
             for deg in (30, 60, 90)]
    assert costs[0] > costs[1] > costs[2] and costs[2] < 1e-12


# -- peg-insert ------------------------------------------------------------------------------


def peg_at(t, bottom, quat=(1.0, 0.0, 0.0, 0.0)):
    """Positions with the peg's bottom face centred at ``bottom`` (the arm at home)."""
    q = with_object(t, [0, 0, 0], quat)
    q[N_ARM_Q : N_ARM_Q + 3] = np.asarray(bottom) - (t.peg_bottom(q) - q[N_ARM_Q : N_ARM_Q + 3])
    return q


def test_peg_insert_succeeds_only_two_centimetres_down_the_hole(tasks):
    t = tasks["peg-insert"]
    hx, hy = t.hole
    assert t.success(peg_at(t, [hx, hy, t.hole_top - 0.025]))
    assert not t.success(peg_at(t, [hx, hy, t.hole_top - 0.01]))  # only 1 cm in
    assert not t.success(peg_at(t, [hx + 0.02, hy, t.hole_top - 0.025]))  # beside the hole
    np.testing.assert_allclose(t.error(peg_at(t, [hx, hy, t.hole_top - t.depth])), 0.0, atol=1e-12)


def test_peg_insert_fails_when_the_peg_jams_crooked_or_drops(tasks):
    t = tasks["peg-insert"]
    s = t.initial_state(np.random.default_rng(0))
    held = s[: t.model.nq]
    assert t.failure(held) == ""
    crooked = held.copy()
    crooked[N_ARM_Q + 3 : N_ARM_Q + 7] = tilted(0.3)
    assert t.failure(crooked) == "jammed"
    dropped = held.copy()
    dropped[N_ARM_Q : N_ARM_Q + 3] = [0.1, 0.0, 0.05]
    assert t.failure(dropped) == "dropped"


def test_peg_insert_cost_rewards_depth_and_alignment(tasks):
    t = tasks["peg-insert"]
    hx, hy = t.hole
    deep = t.cost_terms(traj(t, peg_at(t, [hx, hy, t.hole_top - 0.025])))
    above = t.cost_terms(traj(t, peg_at(t, [hx, hy, t.hole_top + 0.01])))
    beside = t.cost_terms(traj(t, peg_at(t, [hx + 0.004, hy, t.hole_top + 0.01])))
    assert deep["insert"] < above["insert"] and deep["final_insert"] < above["final_insert"]
    assert beside["align"] > above["align"] + 0.5


def test_the_peg_insert_script_misses_with_a_peg_held_off_centre_and_inserts_a_centred_one(tasks):
    t = tasks["peg-insert"]
    world = SimWorld(t)
    script = t.default_proposer()
    for seed, centred in ((0, False), (3, True)):  # the peg 5.6 mm / 1.3 mm off the fingers' middle
        obs = world.reset(seed)
        q = world.data.qpos
        assert (abs(q[N_ARM_Q] - t.tcp_from_qpos(q)[0]) < 0.0015) == centred  # inside the clearance?
        for _ in range(40):
            obs, info = world.step(script.propose(obs, t.state_from_obs(obs))[0])
            if t.success(info["qpos"]):
                break
        assert t.success(info["qpos"]) == centred
