"""push-t: Push-T geometry and goal, coverage-based success, cost terms, obs/state maps."""

import mujoco
import numpy as np
import pytest
from pusht_moves import moved
from shapely.geometry import MultiPolygon, Polygon
from shapely.ops import unary_union

from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.tasks.base import Traj
from twinloop.tasks.push_t import (
    CENTROID,
    GYRATION,
    PushT,
    pose_from_pusht,
    pose_to_pusht,
    t_polygon,
)


@pytest.fixture(scope="module")
def task() -> PushT:
    return make_task("push-t")


def pusht_polygon_px(x, y, angle):
    """Ground truth: Push-T's ``add_tee`` vertex lists (scale 30, length 4) in pixels, rotated
    by ``angle`` about the body position, as pymunk's ``local_to_world`` does."""
    s, L = 30.0, 4.0
    v1 = [(-L * s / 2, s), (L * s / 2, s), (L * s / 2, 0), (-L * s / 2, 0)]
    v2 = [(-s / 2, s), (-s / 2, L * s), (s / 2, L * s), (s / 2, s)]
    c, si = np.cos(angle), np.sin(angle)
    polys = [Polygon([(x + c * a - si * b, y + si * a + c * b) for a, b in v]) for v in (v1, v2)]
    return unary_union(MultiPolygon(polys))


def qpos_at(px_pose, pusher=(0.2, 0.2)):
    x, y, yaw = pose_from_pusht(px_pose)
    return np.array([pusher[0], pusher[1], x, y, 0.0, yaw])


def static_traj(qpos, T=10, ctrl=None):
    q = np.broadcast_to(qpos, (T + 1, len(qpos))).copy()
    u = np.broadcast_to(q[:-1, 0:2] if ctrl is None else ctrl, (T, 2)).copy()
    return Traj(qpos=q, qvel=np.zeros((T + 1, 6)), sensordata=np.zeros((T + 1, 6)), ctrl=u)


def test_goal_is_pusht_goal_at_the_workspace_centre(task):
    np.testing.assert_allclose(task.goal, [0.0, 0.0, np.pi / 4])
    np.testing.assert_allclose(pose_to_pusht(task.goal), [256.0, 256.0, np.pi / 4])


def test_pose_conversion_round_trips_and_maps_pixels_to_millimetres():
    px = np.array([[100.0, 400.0, 1.0], [256.0, 256.0, -2.0]])
    m = pose_from_pusht(px)
    np.testing.assert_allclose(m[0], [-0.156, 0.144, 1.0])
    np.testing.assert_allclose(pose_to_pusht(m), px)


def test_pose_conversion_rejects_wrong_shape():
    with pytest.raises(TwinloopError, match="shape"):
        pose_from_pusht([1.0, 2.0])


@pytest.mark.parametrize("px_pose", [(256, 256, np.pi / 4), (120, 330, -2.3), (400, 150, 3.0)])
def test_t_polygon_is_pusht_tee_in_metres(px_pose):
    ours = t_polygon(pose_from_pusht(px_pose))
    truth = pusht_polygon_px(*px_pose)
    truth_m = Polygon([((a - 256) / 1000, (b - 256) / 1000) for a, b in truth.exterior.coords])
    assert ours.area == pytest.approx(0.0063, rel=1e-9)  # 120x30 + 30x90 mm
    assert ours.symmetric_difference(truth_m).area < 1e-12


def test_scene_geoms_are_the_pusht_tee(task):
    m = task.model
    size = {mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, i): m.geom_size[i] for i in range(m.ngeom)}
    np.testing.assert_allclose(size["bar"][:2] * 2000, [120, 30])
    np.testing.assert_allclose(size["stem"][:2] * 2000, [30, 90])
    assert size["pusher"][0] == pytest.approx(0.015)
    allowed = {int(t) for t in (mujoco.mjtGeom.mjGEOM_PLANE, mujoco.mjtGeom.mjGEOM_BOX, mujoco.mjtGeom.mjGEOM_SPHERE)}
    assert {int(t) for t in m.geom_type} <= allowed


def test_coverage_is_one_at_the_goal_and_success(task):
    q = qpos_at((256, 256, np.pi / 4))
    assert task.coverage(q) == pytest.approx(1.0)
    assert task.success(q)


@pytest.mark.parametrize("offset", [(3, 0, 0), (0, -3, 0), (0, 0, 0.06), (0, 0, np.pi)])
def test_displaced_or_rotated_block_is_not_a_success(task, offset):
    q = qpos_at(np.array([256, 256, np.pi / 4]) + offset)
    assert task.coverage(q) < 0.95
    assert not task.success(q)


def test_coverage_matches_pusht_ground_truth(task):
    rng = np.random.default_rng(3)
    goal = pusht_polygon_px(256, 256, np.pi / 4)
    for _ in range(20):
        px = np.array([rng.uniform(200, 310), rng.uniform(200, 310), rng.uniform(-np.pi, np.pi)])
        truth = goal.intersection(pusht_polygon_px(*px)).area / goal.area
        assert task.coverage(qpos_at(px)) == pytest.approx(truth, abs=1e-9)


def test_coverage_accepts_a_batch(task):
    qs = np.stack([qpos_at((256, 256, np.pi / 4)), qpos_at((300, 256, 0.0))])
    cov = task.coverage(qs)
    assert cov.shape == (2,)
    assert cov[0] == pytest.approx(1.0) and cov[1] < 0.5


def test_error_is_the_rms_displacement_of_the_tee(task):
    # Monte Carlo over the T's area: mean squared displacement of its points
    rng = np.random.default_rng(0)
    goal = task.goal
    for pose in ([0.02, -0.01, 0.3], [0.0, 0.0, goal[2] + np.pi], [-0.05, 0.04, -1.0]):
        pts = rng.uniform([-0.06, 0.0], [0.06, 0.12], (40000, 2))
        inside = (pts[:, 1] <= 0.03) | (np.abs(pts[:, 0]) <= 0.015)
        pts = pts[inside]

        def world(p, pts=pts):
            c, s = np.cos(p[2]), np.sin(p[2])
            return p[:2] + pts @ np.array([[c, s], [-s, c]])

        rms = np.sqrt(((world(np.array(pose)) - world(goal)) ** 2).sum(axis=1).mean())
        err = task.error(np.array([0, 0, pose[0], pose[1], 0, pose[2]]))
        assert err == pytest.approx(rms, rel=0.02)
    assert task.error(qpos_at((256, 256, np.pi / 4))) == pytest.approx(0.0, abs=1e-12)
    assert GYRATION == pytest.approx(0.04395, abs=1e-4)


def test_cost_is_lower_at_the_goal_than_away(task):
    at_goal = qpos_at((256, 256, np.pi / 4), pusher=(0.0, -0.03))
    away = qpos_at((330, 200, 0.0), pusher=(0.074, -0.09))
    c_goal = sum(task.cost_terms(static_traj(at_goal)).values())
    c_away = sum(task.cost_terms(static_traj(away)).values())
    assert float(c_goal) < float(c_away)


def turn_about_centroid(q, dyaw):
    """Rotate the block by ``dyaw`` keeping its area centroid in place."""
    def rot(v, a):
        return np.array([np.cos(a) * v[0] - np.sin(a) * v[1], np.sin(a) * v[0] + np.cos(a) * v[1]])

    c = q[2:4] + rot(CENTROID, q[5])
    q = q.copy()
    q[5] += dyaw
    q[2:4] = c - rot(CENTROID, q[5])
    return q


@pytest.mark.parametrize(
    "change, terms",
    [
        (lambda q, u: (q + [0, 0, 0.02, 0, 0, 0], u), {"block_position", "final_position"}),
        (lambda q, u: (turn_about_centroid(q, 0.3), u), {"block_yaw", "final_yaw"}),
        (lambda q, u: (q + [0.15, 0, 0, 0, 0, 0], u + [0.15, 0]), {"reach"}),
        (lambda q, u: (q, u + 0.05), {"effort"}),
    ],
)
def test_each_residual_responds_to_its_own_quantity(task, change, terms):
    q0 = qpos_at((256, 256, np.pi / 4), pusher=(0.0, -0.03))
    u0 = np.broadcast_to(q0[0:2], (10, 2))
    base = task.cost_terms(static_traj(q0, ctrl=u0))
    q1, u1 = change(q0.copy(), u0.copy())
    moved = task.cost_terms(static_traj(q1, ctrl=u1))
    for name in base:
        if name in terms:
            assert float(moved[name]) > float(base[name]) + 1e-6, name
        else:
            assert float(moved[name]) == pytest.approx(float(base[name]), abs=1e-9), name


def test_yaw_cost_treats_the_tee_as_asymmetric(task):
    q = qpos_at((256, 256, np.pi / 4))
    half = task.cost_terms(static_traj(q + [0, 0, 0, 0, 0, np.pi / 2]))["final_yaw"]
    flipped = task.cost_terms(static_traj(q + [0, 0, 0, 0, 0, np.pi]))["final_yaw"]
    assert float(flipped) > float(half) > 0


def test_state_from_obs_round_trips_obs_from_data(task):
    m = task.model
    d = mujoco.MjData(m)
    d.qpos[:] = [0.05, -0.1, 0.02, 0.03, 0.0, 7.0]  # yaw past 2 pi: observed wrapped
    d.qvel[:] = [0.1, -0.2, 0.03, 0.04, 0.0, 0.5]
    mujoco.mj_forward(m, d)
    obs = task.obs_from_data(m, d)
    assert obs.shape == (len(task.obs_names),)
    s = task.state_from_obs(obs)
    assert s.shape == (task.nstate,)
    np.testing.assert_allclose(s[:5], d.qpos[:5])
    assert np.cos(s[5]) == pytest.approx(np.cos(7.0)) and np.sin(s[5]) == pytest.approx(np.sin(7.0))
    assert -np.pi < s[5] <= np.pi
    np.testing.assert_allclose(s[6:], d.qvel)


def test_state_from_obs_rejects_bad_observations(task):
    with pytest.raises(TwinloopError, match="observation"):
        task.state_from_obs(np.zeros(5))
    with pytest.raises(TwinloopError, match="NaN"):
        task.state_from_obs(np.full(10, np.nan))


def test_initial_state_is_seeded_inside_the_workspace_and_clear_of_the_pusher(task):
    from twinloop.tasks.push_t import distance_to_t

    a = task.initial_state(np.random.default_rng(7))
    np.testing.assert_array_equal(a, task.initial_state(np.random.default_rng(7)))
    assert not np.array_equal(a, task.initial_state(np.random.default_rng(8)))
    for seed in range(30):
        s = task.initial_state(np.random.default_rng(seed))
        pose = s[[2, 3, 5]]
        corners = np.array(t_polygon(pose).exterior.coords)
        assert np.abs(corners).max() < 0.256
        assert distance_to_t(pose, s[0:2]) > 0.015
        assert not task.success(s[:6])
        assert np.all((s[:2] >= -0.206) & (s[:2] <= 0.194))  # [50, 450] px


def test_hold_action_keeps_the_pusher_in_place(task):
    s = task.initial_state(np.random.default_rng(0))
    np.testing.assert_allclose(task.hold_action(s), s[0:2])


def test_pusher_never_touches_the_floor_and_the_block_rests_on_it(task):
    m = task.model
    d = mujoco.MjData(m)
    d.qpos[:] = [-0.1, -0.1, 0.0, 0.0, 0.0, 0.0]
    d.ctrl[:] = [-0.1, -0.1]
    for _ in range(200):
        mujoco.mj_step(m, d)
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    pusher = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "pusher")
    pairs = {frozenset((int(c.geom1), int(c.geom2))) for c in d.contact[: d.ncon]}
    assert frozenset((floor, pusher)) not in pairs
    assert d.ncon >= 4  # the T's boxes on the floor
    assert abs(d.qpos[4]) < 1e-3  # resting, not sinking or flying


def push_distance(task, values):
    """How far a fixed 1 s push moves the block under parameter ``values``."""
    m = task.param_space().apply(task.model, values)
    d = mujoco.MjData(m)
    d.qpos[:] = [0.0, -0.02, 0.0, 0.0, 0.0, 0.0]
    d.ctrl[:] = [0.0, 0.06]
    for _ in range(200):
        mujoco.mj_step(m, d)
    return float(np.hypot(d.qpos[2], d.qpos[3]))


def test_pushing_moves_the_block_and_friction_and_mass_matter(task):
    nominal = task.param_space().nominal
    base = push_distance(task, nominal)
    assert base > 0.01
    # the stage is a PD spring: a heavier or grippier block stops it short
    assert push_distance(task, nominal * [2.5, 1, 1]) < base - 1e-3
    assert push_distance(task, nominal * [1, 4, 1]) < base - 1e-3


def test_param_space_reads_nominal_from_the_model(task):
    space = task.param_space()
    assert space.names[:3] == ["block_friction", "block_mass", "block_damping"]
    np.testing.assert_allclose(space.read(task.model), space.nominal)


def test_push_t_constructor_checks_arguments():
    with pytest.raises(TwinloopError, match="success_coverage"):
        PushT(success_coverage=1.5)
    with pytest.raises(TwinloopError, match="goal"):
        PushT(goal=[0.0, 0.0])


def test_cost_weights_can_be_overridden_by_name():
    q = qpos_at((300, 256, 0.0))
    base = PushT().cost_terms(static_traj(q))
    heavier = PushT(weights={"final_yaw": 2 * PushT.WEIGHTS["final_yaw"]}).cost_terms(static_traj(q))
    assert float(heavier["final_yaw"]) == pytest.approx(2 * float(base["final_yaw"]))
    assert float(heavier["final_position"]) == pytest.approx(float(base["final_position"]))
    with pytest.raises(TwinloopError, match="unknown push-t cost term"):
        PushT(weights={"speed": 1.0})


def test_the_policy_frame_is_the_blocks_own(task):
    obs = np.array([0.05, -0.02, 0.03, 0.01, 0.6, 0.1, 0.0, 0.02, -0.01, 0.3])
    frame = task.policy_frame(obs)
    np.testing.assert_allclose(frame, [0.03, 0.01, 0.6])
    seen = task.obs_in_frame(frame, obs)
    np.testing.assert_allclose(seen[2:5], 0.0, atol=1e-12)  # the block sits at the frame's origin
    # distances and speeds do not change with the frame; the yaw rate neither
    assert np.linalg.norm(seen[0:2]) == pytest.approx(np.hypot(0.02, -0.03))
    assert np.linalg.norm(seen[5:7]) == pytest.approx(0.1) and seen[9] == pytest.approx(0.3)


def test_a_moved_scene_looks_the_same_from_the_blocks_frame(task):
    obs = np.array([0.05, -0.02, 0.03, 0.01, 0.6, 0.1, 0.0, 0.02, -0.01, 0.3])
    g = np.array([0.04, -0.03, 1.1])
    goal = moved(g, np.r_[0, 0, task.goal, 0, 0, 0, 0, 0])[2:5]
    other = PushT(goal=goal)
    np.testing.assert_allclose(other.obs_in_frame(other.policy_frame(moved(g, obs)), moved(g, obs)),
                               task.obs_in_frame(task.policy_frame(obs), obs), atol=1e-12)
    np.testing.assert_allclose(other.goal_in_frame(other.policy_frame(moved(g, obs))),
                               task.goal_in_frame(task.policy_frame(obs)), atol=1e-12)


def test_actions_go_into_the_frame_and_back(task):
    frames = np.array([[0.03, 0.01, 0.6], [-0.1, 0.2, -2.5]])
    actions = np.random.default_rng(0).uniform(-0.2, 0.2, (2, 5, 2))
    local = task.actions_in_frame(frames[:, None], actions)
    np.testing.assert_allclose(task.actions_in_frame(frames[:, None], local, inverse=True), actions, atol=1e-12)
    np.testing.assert_allclose(task.actions_in_frame(frames[0], frames[0, :2]), 0.0, atol=1e-12)
