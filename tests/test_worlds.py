"""Stand-in worlds: ShiftedWorld (hidden physics, noise, delay) and the gymnasium adapter."""

import json

import mujoco
import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.tasks.block_push import BlockPush
from twinloop.worlds import GymWorld, PerEpisodeWorld, ShiftedWorld, SimWorld


@pytest.fixture(scope="module", params=["push-t", "block-push"])
def task(request):
    return make_task(request.param)


# -- ShiftedWorld ---------------------------------------------------------------------------


def test_hidden_params_differ_from_nominal(task):
    nominal = task.param_space().nominal
    for severity in (1, 2, 3):
        w = ShiftedWorld(task, severity=severity, seed=0)
        assert w.hidden_params.shape == nominal.shape
        assert np.all(np.abs(w.hidden_params - nominal) > 1e-6 * np.maximum(nominal, 1))


def test_hidden_params_grow_with_severity(task):
    space = task.param_space()
    pos = space.nominal > 0
    shift = [np.abs(np.log(ShiftedWorld(task, severity=s, seed=4).hidden_params[pos] / space.nominal[pos])).mean()
             for s in (1, 2, 3)]
    assert shift[0] < shift[1] < shift[2]


def test_hidden_params_are_seeded(task):
    a = ShiftedWorld(task, severity=2, seed=3).hidden_params
    np.testing.assert_array_equal(a, ShiftedWorld(task, severity=2, seed=3).hidden_params)
    assert not np.allclose(a, ShiftedWorld(task, severity=2, seed=4).hidden_params)


def test_hidden_params_are_in_the_world_model_within_bounds(task):
    w = ShiftedWorld(task, severity=3, seed=1)
    np.testing.assert_allclose(w.param_space.read(w.model), w.hidden_params)
    assert np.all(w.hidden_params >= w.param_space.low) and np.all(w.hidden_params <= w.param_space.high)
    # the twin's nominal model is untouched
    np.testing.assert_allclose(task.param_space().read(task.model), task.param_space().nominal)


def test_severity_zero_is_the_nominal_twin(task):
    w = ShiftedWorld(task, severity=0, seed=5)
    np.testing.assert_array_equal(w.hidden_params, task.param_space().nominal)
    assert w.delay_steps == 0 and not w.obs_noise.any()
    ref = SimWorld(task)
    np.testing.assert_array_equal(w.reset(2), ref.reset(2))
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = rng.uniform(task.action_low, task.action_high) * 0.3
        o1, i1 = w.step(a)
        o2, i2 = ref.step(a)
        np.testing.assert_allclose(o1, o2, atol=1e-12)
        np.testing.assert_allclose(i1["qpos"], i2["qpos"], atol=1e-12)


def test_severe_shift_changes_solver_settings(task):
    mild, severe = ShiftedWorld(task, severity=2, seed=0).model, ShiftedWorld(task, severity=3, seed=0).model
    nominal = task.model
    assert mild.opt.integrator == nominal.opt.integrator and mild.opt.cone == nominal.opt.cone
    assert severe.opt.integrator != nominal.opt.integrator
    assert severe.opt.cone != nominal.opt.cone
    assert np.all(severe.geom_solref[:, 0] > nominal.geom_solref[:, 0])


def test_a_severe_world_keeps_the_scene_timestep_of_a_task_that_declares_no_euler_step(task):
    assert task.euler_step is None
    severe = ShiftedWorld(task, severity=3, seed=0)
    assert severe.model.opt.timestep == task.model.opt.timestep and severe.delay_steps == 8
    assert severe.describe()["engine"] == "integrator=euler+cone=elliptic+timeconst=2"


def test_delay_holds_the_previous_command_for_delay_steps(task):
    w = ShiftedWorld(task, severity=2, seed=0)
    assert w.delay_steps > 0
    w.reset(1)
    # replay the same tick by hand: the hold command for delay_steps steps, then the action
    m, d = w.model, mujoco.MjData(w.model)
    d.qpos[:], d.qvel[:] = w.data.qpos, w.data.qvel
    hold = w.data.ctrl.copy()
    a = np.clip(hold + 0.05, task.action_low, task.action_high)
    _, info = w.step(a)
    for k in range(w.substeps):
        d.ctrl[:] = hold if k < w.delay_steps else a
        mujoco.mj_step(m, d)
    np.testing.assert_allclose(info["qpos"], d.qpos, atol=1e-12)
    # and it really differs from applying the action at once
    d2 = mujoco.MjData(m)
    w.reset(1)
    d2.qpos[:], d2.qvel[:], d2.ctrl[:] = w.data.qpos, w.data.qvel, a
    for _ in range(w.substeps):
        mujoco.mj_step(m, d2)
    assert np.abs(d2.qpos[:2] - d.qpos[:2]).max() > 1e-5


def test_observation_noise_is_seeded(task):
    w = ShiftedWorld(task, severity=2, seed=0)
    a = (task.action_low + task.action_high) / 2

    def run(seed):
        obs = [w.reset(seed)]
        obs += [w.step(a)[0] for _ in range(3)]
        return np.array(obs)

    np.testing.assert_array_equal(run(11), run(11))
    assert not np.allclose(run(11), run(12))


def test_observation_noise_has_the_documented_size(task):
    w = ShiftedWorld(task, severity=2, seed=0)
    w.reset(0)
    truth = task.obs_from_data(w.model, w.data)
    err = np.array([w._observe() - truth for _ in range(4000)])
    np.testing.assert_allclose(err.std(axis=0), w.obs_noise, rtol=0.1)
    assert np.abs(err.mean(axis=0)).max() < 0.2 * w.obs_noise.max()


def test_episode_start_comes_from_the_task_reset_distribution(task):
    w = ShiftedWorld(task, severity=2, seed=0)
    w.reset(5)
    expected = task.initial_state(np.random.default_rng([5, 0]))
    np.testing.assert_allclose(w.data.qpos[[0, 1, 2, 3, 5]], expected[[0, 1, 2, 3, 5]])


def test_describe_is_json_and_names_the_hidden_values(task):
    w = ShiftedWorld(task, severity=3, seed=2)
    d = json.loads(json.dumps(w.describe()))
    assert d["severity"] == 3 and d["seed"] == 2 and d["task"] == task.name
    assert list(d["params"]) == task.param_space().names
    np.testing.assert_allclose(list(d["params"].values()), w.hidden_params)
    assert d["delay_steps"] == w.delay_steps
    assert d["solver"]["integrator"] != mujoco.mjtIntegrator(task.model.opt.integrator).name


@pytest.mark.parametrize("severity", [-1, 4, 1.5, True])
def test_bad_severity_is_rejected(task, severity):
    with pytest.raises(TwinloopError, match="severity"):
        ShiftedWorld(task, severity=severity)


def test_shifted_world_rejects_bad_actions(task):
    w = ShiftedWorld(task, severity=2, seed=0)
    w.reset(0)
    with pytest.raises(TwinloopError, match="shape"):
        w.step(np.zeros(3))
    with pytest.raises(TwinloopError, match="NaN"):
        w.step(np.array([np.nan, 0.0]))
    with pytest.raises(TwinloopError, match="outside"):
        w.step(task.action_high + 1.0)


# -- PerEpisodeWorld ------------------------------------------------------------------------


def test_per_episode_world_meets_each_episode_in_the_world_its_seed_draws(task):
    w = PerEpisodeWorld(lambda s: ShiftedWorld(task, severity=2, seed=s), first=0)
    hidden = {}
    for seed in (7, 8, 7):
        obs = w.reset(seed)
        alone = ShiftedWorld(task, severity=2, seed=seed)
        np.testing.assert_array_equal(w.world.hidden_params, alone.hidden_params)
        np.testing.assert_array_equal(obs, alone.reset(seed))  # same start, same noise
        assert w.drawn()["world_seed"] == seed and w.model is w.world.model
        hidden[seed] = w.world.hidden_params
    assert not np.allclose(hidden[7], hidden[8])


def test_per_episode_world_describes_the_distribution_without_one_draw(task):
    w = PerEpisodeWorld(lambda s: ShiftedWorld(task, severity=3, seed=s))
    d = json.loads(json.dumps(w.describe()))
    assert d["world_per_episode"] and d["severity"] == 3 and d["world"] == "shifted"
    assert "params" not in d and "seed" not in d


# -- GymWorld -------------------------------------------------------------------------------


def pendulum_state(obs):
    """Pendulum-v1 observes (cos th, sin th, th_dot); the controller wants (th, th_dot)."""
    return np.array([np.arctan2(obs[1], obs[0]), obs[2]])


def test_gym_world_reset_is_seeded():
    w = GymWorld("Pendulum-v1", pendulum_state)
    a, b = w.reset(3), w.reset(3)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, w.reset(4))


def test_gym_world_applies_the_state_map_and_steps():
    w = GymWorld("Pendulum-v1", pendulum_state)
    obs = w.reset(0)
    assert obs.shape == (2,)
    raw = w.env.unwrapped.state  # (th, th_dot)
    assert np.cos(obs[0]) == pytest.approx(np.cos(raw[0]), abs=1e-6)
    assert obs[1] == pytest.approx(raw[1], abs=1e-6)
    obs2, info = w.step(np.array([1.0]))
    assert set(info) >= {"reward", "terminated", "truncated", "time"}
    assert info["time"] == pytest.approx(0.05)  # Pendulum's dt
    assert isinstance(info["reward"], float) and not info["terminated"]
    np.testing.assert_allclose(obs2, pendulum_state(info["raw_obs"]))
    assert not np.allclose(obs, obs2)


def test_gym_world_same_seed_same_episode():
    def run():
        w = GymWorld("Pendulum-v1", pendulum_state)
        out = [w.reset(9)]
        out += [w.step(np.array([0.5]))[0] for _ in range(5)]
        return np.array(out)

    np.testing.assert_array_equal(run(), run())


def test_gym_world_accepts_an_env_instance_and_identity_map():
    import gymnasium as gym

    w = GymWorld(gym.make("Pendulum-v1"))
    assert w.reset(0).shape == (3,)


@pytest.mark.parametrize(
    "action, match",
    [(np.zeros(2), "shape"), (np.array([np.nan]), "NaN"), (np.array([5.0]), "bounds"), ("left", "numeric")],
)
def test_gym_world_rejects_bad_actions(action, match):
    w = GymWorld("Pendulum-v1", pendulum_state)
    w.reset(0)
    with pytest.raises(TwinloopError, match=match):
        w.step(action)


def test_gym_world_discrete_actions_are_checked():
    w = GymWorld("CartPole-v1")
    w.reset(0)
    _, info = w.step(1)
    assert info["reward"] == 1.0
    with pytest.raises(TwinloopError, match="integer"):
        w.step(2)


def test_gym_world_step_before_reset_is_an_error():
    with pytest.raises(TwinloopError, match="reset"):
        GymWorld("Pendulum-v1").step(np.zeros(1))


def test_gym_world_bad_env_or_map_is_an_error():
    with pytest.raises(TwinloopError, match="NoSuchEnv"):
        GymWorld("NoSuchEnv-v0")
    with pytest.raises(TwinloopError, match="env_or_id"):
        GymWorld(42)
    with pytest.raises(TwinloopError, match="callable"):
        GymWorld("Pendulum-v1", state_from_obs=3)
    w = GymWorld("Pendulum-v1", lambda o: o[7])
    with pytest.raises(TwinloopError, match="state_from_obs"):
        w.reset(0)


# -- GymWorld for envs others wrote ---------------------------------------------------------


class SubstepEnv:
    """A gym-pusht-like env: ``dt`` is its physics substep, a step lasts ``1 / control_hz``;
    velocities only in ``info``; its own success flag; actions in pixels (0..512)."""

    @staticmethod
    def make(**kw):
        import gymnasium as gym
        from gymnasium import spaces

        class Env(gym.Env):
            metadata = {"render_fps": 10}

            def __init__(self, control_hz=10, horizon=4):
                self.dt, self.control_hz, self.horizon = 0.01, control_hz, horizon
                self.action_space = spaces.Box(0.0, 512.0, (2,), np.float64)
                self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float64)
                self.received = []

            def reset(self, seed=None, options=None):
                super().reset(seed=seed)
                self.x, self.k = np.zeros(2), 0
                return self.x.copy(), {"vel": np.zeros(2), "is_success": False}

            def step(self, action):
                self.received.append(np.array(action))
                v = (np.asarray(action) - 256.0) / 1000.0 - self.x
                self.x = self.x + v
                self.k += 1
                done = self.k >= 2
                return self.x.copy(), 0.0, done, self.k >= self.horizon, {"vel": v, "is_success": done}

        return Env(**kw)


def test_gym_world_takes_the_period_from_the_control_rate_not_the_substep():
    w = GymWorld(SubstepEnv.make())
    assert w.period == pytest.approx(0.1) and w.describe()["control_period_source"] == "1 / env.control_hz"
    w.reset(0)
    assert w.step(np.array([256.0, 256.0]))[1]["time"] == pytest.approx(0.1)


def test_gym_world_refuses_an_ambiguous_dt_that_differs_from_the_task():
    import gymnasium as gym

    env = gym.make("Pendulum-v1")  # dt 0.05 s, nothing else says what a step is
    task = make_task("push-t")     # acts every 0.1 s
    with pytest.raises(TwinloopError, match="physics substep.*control_period="):
        GymWorld(env, task=task)
    with pytest.raises(TwinloopError, match="acts every 0.1 s"):
        GymWorld(env, task=task, control_period=0.05)


def test_gym_world_maps_actions_and_reads_velocities_from_info():
    task = make_task("push-t")
    env = SubstepEnv.make()

    def obs_from_env(raw, info):
        return np.concatenate([raw, raw, [0.0], info["vel"], info["vel"], [0.0]])

    w = GymWorld(env, task=task, obs_from_env=obs_from_env, action_to_env=lambda a: np.asarray(a) * 1000 + 256)
    w.reset(0)
    obs, _ = w.step(np.array([0.01, -0.02]))
    np.testing.assert_allclose(env.received[-1], [266.0, 236.0])
    np.testing.assert_allclose(obs[5:7], [0.01, -0.02])  # velocity, from info
    with pytest.raises(TwinloopError, match="task's bounds"):
        w.step(np.array([1.0, 0.0]))  # outside push-t's workspace, refused before mapping


def test_run_episode_honours_the_env_success_flag_and_truncation():
    from twinloop.control import Controller, Refiner
    from twinloop.plan import make_optimizer
    from twinloop.run.experiment import run_episode
    from twinloop.twin import make_twin

    task = make_task("push-t")

    def obs_from_env(raw, info):
        return np.concatenate([raw, raw, [0.0], np.zeros(5)])

    ctl = Controller(Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi")), task.default_proposer(),
                     refine=False)
    w = GymWorld(SubstepEnv.make(), task=task, obs_from_env=obs_from_env, action_to_env=lambda a: np.asarray(a) * 1000 + 256)
    r = run_episode(w, ctl, 0, record=False)
    assert r.success and r.ticks == 2  # the env said so (terminated, is_success) at its second step
    w = GymWorld(SubstepEnv.make(horizon=1), task=task, obs_from_env=obs_from_env,
                 action_to_env=lambda a: np.asarray(a) * 1000 + 256)
    r = run_episode(w, ctl, 0, record=False)
    assert r.ticks == 1 and not r.success  # truncated after one step, not the task's 150


def test_calibration_says_when_timestamps_do_not_match_the_control_period():
    from twinloop.calib.windows import as_trajectories
    from twinloop.data.episodes import Episode

    task = make_task("push-t")
    obs = np.tile(SimWorld(task).reset(0), (6, 1))
    ep = Episode(0, obs, np.zeros((6, 2)), timestamps=np.arange(6) * 0.01)  # a substep, not 0.1 s
    with pytest.raises(TwinloopError, match=r"timestamps step by 0.01 s.*acts every 0.1 s.*control_period="):
        as_trajectories(task, [ep])

# -- PyBullet as the world (optional extra) ---------------------------------------------------


@pytest.mark.parametrize("name", ["block-push", "push-t"])
def test_bullet_world_rebuilds_the_scene_and_reports_the_task_layout(name):
    pytest.importorskip("pybullet")
    from twinloop.tasks import make_task
    from twinloop.worlds import make_world

    task = make_task(name)
    world = make_world(task, "bullet", noise=0)
    obs = world.reset(3)
    state = task.initial_state(np.random.default_rng([3, 0]))
    np.testing.assert_allclose(world.info()["qpos"][[0, 1, 2, 3, 5]], state[[0, 1, 2, 3, 5]], atol=1e-6)
    assert obs.shape == (len(task.obs_names),)
    for _ in range(5):  # holding the pusher still leaves the block at rest on the floor
        obs, info = world.step(task.hold_action(task.state_from_obs(obs)))
    np.testing.assert_allclose(info["qpos"][2:6], [*state[2:4], 0.0, state[5]], atol=2e-3)
    assert world.describe()["engine"] == "pybullet"
    world.close()


def test_bullet_world_pushes_the_block_where_the_pusher_goes():
    pytest.importorskip("pybullet")
    from twinloop.tasks import make_task
    from twinloop.worlds import BulletWorld

    task = make_task("block-push")
    world = BulletWorld(task, noise=0)
    obs = world.reset(0)
    s = task.state_from_obs(obs)
    for _ in range(15):  # drive the pusher through the block's centre, along the line between them
        d = s[2:4] - s[0:2]
        obs, info = world.step(np.clip(s[0:2] + 0.05 * d / np.linalg.norm(d), task.action_low, task.action_high))
        s = task.state_from_obs(obs)
    moved = info["qpos"][2:4] - task.initial_state(np.random.default_rng([0, 0]))[2:4]
    assert np.linalg.norm(moved) > 0.02
    world.close()


# -- the task's bound on body speed ---------------------------------------------------------


class BoundedBlockPush(BlockPush):
    max_body_speed = 1.0


class KickedWorld(SimWorld):
    """The world whose block is struck to ``speed`` m/s along x after the 5th physics step of its
    second tick, with no MuJoCo warning (a blow-up that stays finite); ``transient``: the block
    stops dead one physics step later, at rest again well before the tick ends."""

    def __init__(self, task, speed=4.0, transient=False):
        super().__init__(task)
        self.speed, self.transient, self.n = speed, transient, 0
        self.block = self.model.body("block").id

    def reset(self, seed):
        self.n = 0
        return super().reset(seed)

    def _physics_step(self):
        super()._physics_step()
        self.n += 1
        dof = self.model.body_dofadr[self.block]
        if self.n == self.substeps + 5:
            self.data.qvel[dof] = self.speed
        elif self.transient and self.n == self.substeps + 6:
            self.data.qvel[dof : dof + 4] = 0.0


def proposer_alone(task):
    from twinloop.control import Controller, Refiner
    from twinloop.plan import make_optimizer
    from twinloop.twin import make_twin

    return Controller(Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi")), task.default_proposer(),
                      refine=False)


@pytest.mark.parametrize("name", ["rope-shape", "block-push"])
def test_body_speeds_are_mujocos_centre_of_mass_velocities(name):
    from twinloop.worlds.base import body_speeds

    m = make_task(name).model
    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    d.qpos[:] = make_task(name).initial_state(rng)[: m.nq]
    d.qvel[:] = rng.normal(size=m.nv)
    mujoco.mj_forward(m, d)
    v = np.zeros(6)
    want = []
    for b in range(m.nbody):
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_BODY, b, v, 0)
        want.append(np.linalg.norm(v[3:]))
    np.testing.assert_allclose(body_speeds(m, d), want, atol=1e-12)


@pytest.mark.parametrize(("name", "watched"), [("rope-shape", [f"rope_{i}" for i in range(8)]), ("block-push", ["block"]),
                                               ("peg-insert", ["peg"]), ("pusher-v5", ["object", "goal"])])
def test_the_bound_watches_the_scenes_objects_not_the_robot(name, watched):
    from twinloop.worlds.base import watched_bodies

    m = make_task(name).model
    assert [m.body(int(b)).name for b in watched_bodies(m)] == watched  # no gripper, arm link or finger


def test_a_body_faster_than_the_tasks_bound_ends_the_episode_as_a_failure_that_says_why():
    from twinloop.run.experiment import run_episode

    task = BoundedBlockPush()
    world = KickedWorld(task)
    res = run_episode(world, proposer_alone(task), 0, record=True)
    assert (res.ticks, res.success, len(res.recorder)) == (2, False, 2)  # it ends there; what it recorded is kept
    assert res.failure == ("simulation unstable: body 'block' reached 4.0 m/s, above the task's bound of 1 m/s (a "
                           "physics blow-up MuJoCo did not reset, e.g. a contact pinched through; Task.max_body_speed)")
    assert world.info()["terminated"] and world.info()["failure"] == res.failure
    world.reset(0)  # a new episode starts clean
    assert "failure" not in world.info() and world.peak_speed < 1.0


def test_a_spike_over_before_the_tick_ends_is_caught():
    task = BoundedBlockPush()
    world = KickedWorld(task, transient=True)
    world.reset(0)
    hold = task.hold_action(world.true_state())
    assert "failure" not in world.step(hold)[1]
    info = world.step(hold)[1]
    assert info["terminated"] and "body 'block' reached 4.0 m/s" in info["failure"]
    assert abs(info["qvel"][world.model.body_dofadr[world.block]]) < 0.1  # at rest again at the tick's end


def test_a_task_without_a_bound_is_never_flagged_but_its_peak_is_kept():
    from twinloop.run.experiment import run_episode

    task = make_task("block-push")
    assert task.max_body_speed is None
    world = KickedWorld(task, speed=50.0)
    res = run_episode(world, proposer_alone(task), 0, record=False, max_ticks=4)
    assert (res.ticks, res.failure) == (4, "")
    assert world.peak_speed == pytest.approx(50.0) and world.peak_body == world.block


@pytest.mark.parametrize("name", ["rope-shape", "cloth-fold"])
def test_a_normal_episode_stays_under_its_tasks_bound(name):
    from twinloop.run.experiment import run_episode

    task = make_task(name)
    assert task.max_body_speed is not None
    world = ShiftedWorld(task, severity=2, seed=0)
    res = run_episode(world, proposer_alone(task), 0, record=False)
    assert res.failure == "" and res.ticks > 1
    assert 0 < world.peak_speed < task.max_body_speed


@pytest.mark.parametrize("bound", [0, -1.0, float("nan"), float("inf"), "fast", True])
def test_a_bad_speed_bound_is_refused(bound):
    task = type("Bad", (BlockPush,), {"max_body_speed": bound})()
    with pytest.raises(TwinloopError, match="block-push.*max_body_speed .*must be a finite number > 0"):
        SimWorld(task)


# -- capabilities: what a run checks instead of a world's name ----------------------------------


def test_each_registered_world_declares_what_it_can_do():
    from twinloop.worlds import world_type

    caps = ("simulated", "adjustable_period", "has_hidden_params", "keeps_clock", "remote", "records_twin_state")
    got = {n: tuple(n_ for n_ in caps if getattr(world_type(n), n_)) for n in ("nominal", "shifted", "changing", "gym")}
    assert got == {"nominal": ("simulated", "adjustable_period", "records_twin_state"),
                   "shifted": ("simulated", "adjustable_period", "has_hidden_params", "records_twin_state"),
                   "changing": ("simulated", "has_hidden_params", "records_twin_state"), "gym": ()}
    assert world_type("remote:localhost:1").remote and world_type("gym:CartPole-v1") is GymWorld
    assert world_type("changing").counterpart is None and world_type("bullet").counterpart is None
    with pytest.raises(TwinloopError, match="unknown world 'mars'"):
        world_type("mars")


def test_a_worlds_nominal_counterpart_keeps_its_noise_and_drops_its_hidden_physics():
    from twinloop.worlds import world_type

    task = make_task("block-push")
    shifted = ShiftedWorld(task, severity=2, seed=0)
    twin_like = world_type("shifted").counterpart(task, 2, None)
    assert twin_like.obs_noise.tolist() == shifted.obs_noise.tolist()
    np.testing.assert_allclose(twin_like.params, task.param_space().nominal)
    plain = world_type("nominal").counterpart(task, 3, None)  # severity is a shifted world's: none here
    assert not np.any(plain.obs_noise) and plain.delay_steps == 0
    from twinloop.run.compare import RunConfig, monitor_world
    from twinloop.worlds import TwinWorld

    # a world without a counterpart: the monitor is calibrated in the twin's own scene
    cfg = RunConfig(task="block-push", world="changing", monitor="flag")
    assert world_type("changing").counterpart is None
    assert isinstance(monitor_world(cfg, task, task.control_period), TwinWorld)
