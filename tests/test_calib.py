"""Calibration: multiple-shooting windows, the methods behind calibrate(), the posterior."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twinloop.calib import (
    CalibConfig,
    Posterior,
    StateError,
    as_trajectories,
    calibrate,
    free_starts,
    make_windows,
    quiet_starts,
    record_trajectory,
)
from twinloop.calib.posterior import profile_factors
from twinloop.calib.windows import window_controls
from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import SimWorld

TRUTH = np.array([0.4, 0.7])  # block friction, block mass: a friction force the pusher overcomes


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


@pytest.fixture(scope="module")
def space(task):
    return task.param_space().subset(["block_friction", "block_mass"])


class DelayedWorld(SimWorld):
    """Hidden parameters plus an actuation delay of ``delay`` physics steps."""

    def __init__(self, task, model, delay):
        super().__init__(task, model)
        self.delay = delay

    def reset(self, seed):
        obs = super().reset(seed)
        self.queue = [self.data.ctrl.copy() for _ in range(self.delay)]
        return obs

    def step(self, action):
        import mujoco

        for _ in range(self.substeps):
            self.queue.append(np.asarray(action, float))
            self.data.ctrl[:] = self.queue.pop(0)
            mujoco.mj_step(self.model, self.data)
        self.t += 1
        return self._observe(), self.info()


def record(task, space, n, kind="excite", ticks=40, truth=TRUTH, world=None):
    world = world or SimWorld(task, model=space.apply(task.model, truth))
    return [record_trajectory(world, task.excitation(s, kind), s, ticks) for s in range(n)]


@pytest.fixture(scope="module")
def excited(task, space):
    return record(task, space, 3)


# -- windows -----------------------------------------------------------------------------------


def test_rollout_many_matches_one_rollout_per_start_state(task):
    twin = make_twin("mujoco", task.model, task.param_space())
    rng = np.random.default_rng(0)
    states = np.stack([task.initial_state(rng) for _ in range(3)])
    ctrl = rng.uniform(-0.1, 0.1, (3, 20, 2))
    params = np.stack([task.param_space().nominal, task.param_space().nominal * 1.5])
    many = twin.rollout_many(states, ctrl, params)
    assert many.qpos.shape == (2, 3, 21, task.model.nq)
    for b in range(3):
        one = twin.rollout(states[b], ctrl[b : b + 1], params)
        np.testing.assert_allclose(many.qpos[:, b], one.qpos[:, 0])
        np.testing.assert_allclose(many.qvel[:, b], one.qvel[:, 0])


def test_twin_rollout_uses_new_params_after_a_nominal_call(task):
    # regression: a cache keyed by id() of a freed list replayed stale models
    space = task.param_space()
    twin = make_twin("mujoco", task.model, space)
    s = task.initial_state(np.random.default_rng(0))
    u = np.tile([0.1, 0.0], (1, 50, 1))
    high = space.nominal.copy()
    high[0] = 1.4
    fresh = make_twin("mujoco", task.model, space).rollout(s, u, high[None]).qpos
    twin.rollout(s, u, None)
    np.testing.assert_allclose(twin.rollout(s, u, high[None]).qpos, fresh)


def test_episode_with_one_state_per_action_gives_one_transition_less(task):
    class Ep:
        def __init__(self, obs, actions, timestamps):
            self.obs, self.actions, self.timestamps, self.episode_index = obs, actions, timestamps, 3

    obs = np.zeros((6, len(task.obs_names)))
    obs[:, 2] = np.linspace(-0.1, 0.0, 6)
    (tr,) = as_trajectories(task, [Ep(obs, np.zeros((6, 2)), np.arange(6) * task.control_period)])
    assert tr.states.shape == (6, task.nstate) and tr.actions.shape == (5, 2) and tr.index == 3


def test_a_skipped_tick_splits_the_episode(task):
    class Ep:
        obs = np.zeros((6, len(task.obs_names)))
        actions = np.zeros((6, 2))
        timestamps = np.array([0.0, 0.1, 0.2, 0.4, 0.5, 0.6])  # tick at 0.3 s missing

    parts = as_trajectories(task, [Ep()])
    assert [p.ticks for p in parts] == [2, 2]


def test_windows_start_only_where_allowed(excited):
    tr = excited[0]
    ok = np.zeros(tr.ticks + 1, bool)
    ok[[3, 4, 12]] = True
    (w,) = make_windows([tr], 5, starts_ok=[ok])
    np.testing.assert_allclose(w.starts, tr.states[[3, 12]])
    np.testing.assert_allclose(w.targets[1], tr.states[13:18])


def test_free_starts_exclude_a_pusher_touching_the_block(task):
    s = task.initial_state(np.random.default_rng(0))
    touching = s.copy()
    touching[0:2] = s[2:4] - [0.04 + 0.015, 0.0]  # pusher against the block's face
    assert free_starts(task.model, np.stack([s, touching]), 0.003).tolist() == [True, False]


def test_quiet_starts_need_the_ticks_before_free_too_except_at_the_episode_start():
    free = np.array([1, 1, 0, 1, 1, 1, 0, 0, 1, 1], bool)
    np.testing.assert_array_equal(quiet_starts(free, 0), free)
    np.testing.assert_array_equal(quiet_starts(free, 1), [1, 1, 0, 0, 1, 1, 0, 0, 0, 1])
    np.testing.assert_array_equal(quiet_starts(free, 2), [1, 1, 0, 0, 0, 1, 0, 0, 0, 0])
    with pytest.raises(TwinloopError, match="quiet ticks"):
        quiet_starts(free, -1)


def test_quiet_starts_skip_the_unobserved_hop_a_push_leaves(task, space):
    # the world's true block height (unobserved: state_from_obs sets it to 0) at window starts
    world = SimWorld(task, model=space.apply(task.model, TRUTH))
    off = {0: [], 1: []}
    for seed in range(3):
        obs, policy = world.reset(seed), task.excitation(seed, "excite")
        states, heights = [task.state_from_obs(obs)], [world.data.qpos[4]]
        for k in range(40):
            obs, _ = world.step(policy(obs, k))
            states.append(task.state_from_obs(obs))
            heights.append(world.data.qpos[4])
        free = free_starts(task.model, np.array(states), 0.003)
        for q in off:
            off[q] += np.abs(np.array(heights)[quiet_starts(free, q)]).tolist()
    assert np.mean(off[0]) > 2e-5  # right after a push the block is still hopping
    assert np.mean(off[1]) < 0.5 * np.mean(off[0])


def test_calibration_windows_start_a_tick_after_a_contact_by_default(task, excited):
    from twinloop.calib.fit import _windows

    starts = {tuple(s) for w in _windows(task, excited, CalibConfig()) for s in w.starts}
    after_contact = [tr.states[k] for tr in excited for k in np.flatnonzero(~free_starts(task.model, tr.states, 0.003)) + 1
                     if k < tr.ticks]
    assert after_contact and not starts & {tuple(s) for s in after_contact}
    every = {tuple(s) for w in _windows(task, excited, CalibConfig(start_quiet=0)) for s in w.starts}
    assert every & {tuple(s) for s in after_contact}  # without the wait, some windows start there


def test_delayed_controls_start_with_the_action_before_the_window(excited):
    (w,) = make_windows(excited[:1], 4, starts_ok=None)
    c = window_controls(w, 10, delay=3)
    np.testing.assert_allclose(c[1, :3], np.repeat(w.before[1][None], 3, 0))
    np.testing.assert_allclose(c[1, 3:13], np.repeat(w.actions[1, :1], 10, 0))


def test_state_error_ignores_unmeasured_components_and_wraps_angles(task, excited):
    err = StateError.for_task(task, excited)
    assert not err.mask[4] and not err.mask[task.model.nq + 4]  # block height is never observed
    a, b = np.zeros(task.nstate), np.zeros(task.nstate)
    a[5], b[5] = np.pi - 0.01, -np.pi + 0.01  # 0.02 rad apart across the wrap
    r = err(a, b)
    assert np.abs(r).max() == pytest.approx(0.02 / err.scale[5])


# -- methods -----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["least_squares", "cma"])
def test_method_recovers_friction_and_mass_from_excited_data(task, space, excited, method):
    post = calibrate(task, excited, space, method, config=CalibConfig(max_evals=120))
    # the nominal twin is 25-29% off; contact roughness and the unobserved block height
    # leave a few percent even on noise-free data
    assert np.max(post.error(TRUTH)) < 0.08
    assert post.train_error[1] < post.train_error[0]
    assert np.all(post.interval[:, 0] <= post.estimate) and np.all(post.estimate <= post.interval[:, 1])


def test_constant_push_is_flagged_not_identifiable(task, space):
    post = calibrate(task, record(task, space, 2, "constant"), space, "least_squares", config=CalibConfig(max_evals=80))
    assert not post.identifiable.any()
    assert "NOT IDENTIFIABLE" in post.report()
    # the data fix the product friction x mass (log f + log m), far better than the ratio
    best, worst = post.log_directions[:, 0], post.log_directions[:, -1]
    assert best[0] * best[1] > 0 and worst[0] * worst[1] < 0
    assert post.log_direction_std[-1] > 3 * post.log_direction_std[0]


def test_fit_stays_within_its_simulation_budget(task, space, excited):
    post = calibrate(task, excited, space, "cma", config=CalibConfig(max_evals=30, errors_in_variables=False))
    assert 2 <= post.n_evals <= 30
    assert post.sim_steps == post.n_evals * post.n_windows * 5 * task.substeps


def test_same_seed_gives_the_same_posterior(task, space, excited):
    cfg = CalibConfig(method="cma", max_evals=40, seed=3)
    a, b = calibrate(task, excited, space, config=cfg), calibrate(task, excited, space, config=cfg)
    np.testing.assert_array_equal(a.estimate, b.estimate)
    np.testing.assert_array_equal(a.particles, b.particles)


def test_particles_lie_within_bounds_and_start_at_the_estimate(task, space, excited):
    post = calibrate(task, excited, space, config=CalibConfig(max_evals=40, particles=32))
    assert post.particles.shape == (32, 2)
    np.testing.assert_array_equal(post.particles[0], post.estimate)
    assert np.all(post.particles >= space.low) and np.all(post.particles <= space.high)
    assert np.ptp(post.particles, axis=0).min() > 0


def test_holdout_error_drops_after_the_fit(task, space):
    eps = record(task, space, 3)
    post = calibrate(task, eps, space, config=CalibConfig(max_evals=80, holdout_fraction=0.34))
    before, after = post.holdout_error
    assert after < before


def test_a_fit_that_worsens_held_out_error_keeps_the_previous_parameters(task, space):
    # trained on one world, judged on another whose physics is the starting point's
    train = record(task, space, 2, truth=np.array([0.9, 0.9]))
    held = record(task, space, 1, truth=space.nominal)
    cfg = CalibConfig(max_evals=40, errors_in_variables=False)
    post = calibrate(task, train, space, holdout=held, config=cfg)
    assert post.holdout_error[1] > post.holdout_error[0]
    assert post.kept_previous and np.array_equal(post.estimate, space.nominal)
    assert not np.allclose(post.fitted, space.nominal)  # the fit itself moved, and is kept for reading
    assert "FIT REJECTED" in post.report()
    kept = calibrate(task, train, space, holdout=held, config=CalibConfig(max_evals=40, errors_in_variables=False,
                                                                           keep_if_worse=False))
    assert not kept.kept_previous and np.array_equal(kept.estimate, kept.fitted)


def test_actuation_delay_is_estimated(task, space):
    world = DelayedWorld(task, space.apply(task.model, TRUTH), delay=4)
    post = calibrate(task, record(task, space, 2, world=world), space,
                     config=CalibConfig(max_evals=60, delay_steps=None, max_delay_steps=8))
    assert post.delay_steps == 4


def test_posterior_survives_a_json_round_trip(task, space, excited):
    import json

    post = calibrate(task, excited, space, config=CalibConfig(max_evals=60))
    back = Posterior.from_dict(json.loads(json.dumps(post.to_dict())))
    np.testing.assert_array_equal(back.covariance, post.covariance)
    assert back.report() == post.report()


def test_foreign_lerobot_parquet_calibrates_through_a_column_map(task, space, excited, tmp_path):
    from twinloop.data import load_lerobot

    rows = []
    for tr in excited:
        for k in range(tr.ticks):
            s = tr.states[k]
            obs = [s[0], s[1], s[2], s[3], s[5], s[6], s[7], s[8], s[9], s[11]]
            rows.append({"state": obs, "act": list(tr.actions[k]), "t": k * 0.1, "ep": tr.index})
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data.parquet")
    eps = load_lerobot(tmp_path / "data.parquet", {"obs": "state", "action": "act", "timestamp": "t",
                                                   "episode_index": "ep"})
    post = calibrate(task, eps, space, config=CalibConfig(max_evals=60))
    assert np.max(post.error(TRUTH)) < 0.1


def test_bad_input_is_named(task, space, excited):
    with pytest.raises(TwinloopError, match="no episodes"):
        calibrate(task, [], space)
    with pytest.raises(TwinloopError, match="calibration method"):
        calibrate(task, excited, space, "newton")
    with pytest.raises(TwinloopError, match="x0"):
        calibrate(task, excited, space, x0=[0.5])
    with pytest.raises(TwinloopError, match="outside its bounds"):
        calibrate(task, excited, space, x0=[9.0, 0.5])
    with pytest.raises(TwinloopError, match="window"):
        CalibConfig(window=0)
    with pytest.raises(TwinloopError, match="neither states"):
        as_trajectories(task, [object()])


def test_mjx_method_names_the_missing_extra(task, space, excited):
    try:
        import jax  # noqa: F401
        from mujoco import mjx  # noqa: F401

        pytest.skip("jax and mujoco-mjx are installed")
    except ImportError:
        pass
    with pytest.raises(TwinloopError, match=r"\[gpu\]"):
        calibrate(task, excited, space, "mjx", config=CalibConfig(max_evals=10))


@pytest.mark.slow
def test_mjx_forward_mode_jacobian_fits_like_least_squares(task, space):
    pytest.importorskip("jax")
    pytest.importorskip("mujoco.mjx")
    eps = record(task, space, 1, ticks=30)
    post = calibrate(task, eps, space, "mjx", config=CalibConfig(max_evals=40))  # compiles MJX (minutes on CPU)
    assert post.method == "mjx"
    assert post.train_error[1] < 0.5 * post.train_error[0]


# -- errors in variables -----------------------------------------------------------------------


def _noisy_windows(task, space, excited, copies, seed=0):
    """The excited data's windows, ``copies`` times, each with fresh unit noise (in error units)
    on the compared components of its start and of every target."""
    from twinloop.calib.fit import _windows
    from twinloop.calib.problem import WindowProblem
    from twinloop.calib.windows import Windows

    cfg = CalibConfig()
    error = StateError.for_task(task, excited)
    (w, *_) = _windows(task, excited, cfg)
    rng = np.random.default_rng(seed)
    rep = lambda a: np.concatenate([a] * copies)  # noqa: E731
    starts, targets = rep(w.starts), rep(w.targets)
    starts = starts + rng.standard_normal(starts.shape) * error.scale * error.mask
    targets = targets + rng.standard_normal(targets.shape) * error.scale * error.mask
    noisy = Windows(starts, rep(w.actions), targets, rep(w.episode), rep(w.before))
    return WindowProblem(task, make_twin("mujoco", task.model, space), [noisy], error, space)


def test_whitening_gives_unit_variance_residuals_when_starts_are_noisy(task, space, excited):
    problem = _noisy_windows(task, space, excited, copies=8)
    raw = problem.residuals(TRUTH[None])[0]
    assert raw.var() > 1.3  # the start's noise, propagated, adds to the targets' own
    assert problem.start_noise_cost == 2 * problem.error.size
    white = problem.with_start_noise(TRUTH).residuals(TRUTH[None])[0]
    assert white.shape == raw.shape
    assert 0.85 < white.var() < 1.15
    np.testing.assert_array_equal(problem.residuals(TRUTH[None])[0], raw)  # the problem itself is unchanged


def test_start_noise_sets_what_errors_in_variables_profiles_out(task, space, excited):
    from dataclasses import replace

    from twinloop.calib.fit import _windows
    from twinloop.calib.problem import WindowProblem

    (w, *_) = _windows(task, excited, CalibConfig())
    error = StateError.for_task(task, excited)
    rng = np.random.default_rng(0)
    # noise-free starts, unit noise on the targets
    targets = w.targets + rng.standard_normal(w.targets.shape) * error.scale * error.mask
    problem = WindowProblem(task, make_twin("mujoco", task.model, space), [replace(w, targets=targets)], error, space)
    raw = problem.residuals(TRUTH[None])[0]
    assert 0.85 < raw.var() < 1.15
    # by default a start carries one error unit of noise: these exact starts get over-whitened
    assert problem.with_start_noise(TRUTH).residuals(TRUTH[None])[0].var() < 0.95 * raw.var()
    exact = replace(problem, start_noise=np.zeros(task.nstate))
    np.testing.assert_allclose(exact.with_start_noise(TRUTH).residuals(TRUTH[None])[0], raw)
    # and start samples drawn with no noise are the recorded start's own replay
    sampled = replace(exact, start_samples=3)
    np.testing.assert_allclose(sampled.residuals(TRUTH[None], whiten=False), problem.residuals(TRUTH[None]))


def test_noise_from_data_sees_clean_starts_as_clean_where_the_error_units_assume_noise(task, space, excited):
    from twinloop.calib.noise import recorded_noise

    twin = make_twin("mujoco", task.model, space)
    error = StateError.for_task(task, excited)
    assert recorded_noise(task, excited, TRUTH, twin, CalibConfig()) is None  # default: one error unit
    std = recorded_noise(task, excited, TRUTH, twin, CalibConfig(noise_from_data=True))
    compared = error.mask & (np.arange(task.nstate) < task.model.nq)
    assert std.shape == (task.nstate,) and np.all(std[compared] < 0.2 * error.scale[compared])
    given = recorded_noise(task, excited, TRUTH, twin, CalibConfig(noise_from_data=True, start_noise=(2e-3, 0.02, 0)))
    assert given[0] == 2e-3  # a given noise wins
    assert recorded_noise(task, excited[:1], TRUTH, twin, CalibConfig(noise_from_data=True)) is not None
    with pytest.raises(TwinloopError, match="noise_from_data"):
        CalibConfig(noise_from_data="yes")


def test_start_noise_is_three_non_negative_stds(task, space, excited):
    assert CalibConfig(start_noise=(1e-3, 0.01, 0)).start_noise == (1e-3, 0.01, 0.0)
    for bad, match in (((1e-3, 0.01), "start_noise must be"), (0.001, "start_noise must be"),
                       ((1e-3, -0.01, 0), "start_noise angle"), ((np.nan, 0.01, 0), "start_noise position")):
        with pytest.raises(TwinloopError, match=match):
            CalibConfig(start_noise=bad)


def test_start_estimate_moves_noisy_start_positions_toward_the_true_ones(task, space, excited):
    from twinloop.calib.fit import _windows

    problem = _noisy_windows(task, space, excited, copies=2)
    (w, *_) = _windows(task, excited, CalibConfig())
    true = np.concatenate([w.starts] * 2)
    err = problem.error
    pos = err.mask & (np.arange(task.nstate) < task.model.nq)
    vel = err.mask & (np.arange(task.nstate) >= task.model.nq)

    def rms(starts, comps):
        return np.sqrt(np.mean(((starts - true) / err.scale)[:, comps] ** 2))

    linear = problem.with_start_noise(TRUTH)
    moved = linear.with_start_estimate(TRUTH, iterations=3)
    before, after = rms(problem.windows[0].starts, pos), rms(moved.windows[0].starts, pos)
    assert after < 0.9 * before  # the windows' own motion pins their starts down
    assert rms(moved.windows[0].starts, vel) == rms(problem.windows[0].starts, vel)  # velocities as recorded
    # the fit's objective around the new starts is lower at the truth: less of the noise is left to explain
    f = lambda p: float((p.residuals(TRUTH[None]) ** 2).sum())  # noqa: E731
    assert f(moved) < f(linear)
    with pytest.raises(TwinloopError, match="with_start_noise"):
        problem.with_start_estimate(TRUTH)


def test_errors_in_variables_asked_for_needs_budget_for_the_start_sensitivity(task, space, excited):
    with pytest.raises(TwinloopError, match="errors in variables"):
        calibrate(task, excited, space, config=CalibConfig(max_evals=30, errors_in_variables=True))
    post = calibrate(task, excited, space, config=CalibConfig(max_evals=30, errors_in_variables=False))
    assert post.n_evals <= 30 and not post.errors_in_variables


def test_by_default_errors_in_variables_are_used_when_the_budget_affords_them_and_the_report_says_so(
        task, space, excited):
    small = calibrate(task, excited, space, config=CalibConfig(max_evals=30))  # what errors in variables would cost
    assert small.n_evals <= 30 and not small.errors_in_variables
    assert "window starts trusted as recorded" in small.report()
    assert not Posterior.from_dict(small.to_dict()).errors_in_variables
    ample = calibrate(task, excited, space, config=CalibConfig(max_evals=120))
    assert ample.errors_in_variables and "trusted as recorded" not in ample.report()


# -- profile check -----------------------------------------------------------------------------


def _profile(space, f, lc):
    """Run the profile check on ``f(X) -> (P,)`` around the nominal point with unit scale
    1e-2 and principal directions along the axes; ``lc``: the Laplace variances it checks."""
    def fn(X):  # residuals whose half squared norm is f
        return np.sqrt(2 * np.maximum(f(np.atleast_2d(X)), 0.0))[:, None]

    x = space.nominal
    return profile_factors(fn, x, float(f(x[None])[0]), 1.0, np.full(2, 1e-2), space, np.eye(2),
                            np.asarray(lc, float))


def test_profile_check_keeps_a_true_curvature_and_widens_a_fake_one(space):
    sigma = np.array([0.02, 0.05])  # true 1-sd widths of a quadratic objective (s^2 = 1)
    x0 = space.nominal

    def f(X):
        return 0.5 * (((X - x0) / sigma) ** 2).sum(axis=1)

    true_var = (sigma / 1e-2) ** 2  # the objective's own Laplace variances in scaled units
    np.testing.assert_array_equal(_profile(space, f, 1.1 * true_var), [1.0, 1.0])
    # a local fit 5x too narrow in the second direction (25x in variance) is widened 5x
    got = _profile(space, f, true_var / [1.0, 25.0])
    assert got[0] == pytest.approx(1.0, abs=0.05) and got[1] == pytest.approx(5.0, rel=0.02)


def test_profile_check_finds_a_flat_valley_behind_a_rough_dip(space):
    x0 = space.nominal

    def f(X):  # a narrow dip (as contact roughness makes) in a valley flat along the second axis
        d = (X - x0) / 1e-2
        dip = np.where(np.abs(d[:, 1]) < 0.5, 0.0, 1.0)
        return 0.5 * (d[:, 0] / 2.0) ** 2 + dip

    got = _profile(space, f, [4.0, 0.3])  # the dip's steep walls fake a variance of 0.3
    assert got[0] < 1.5 and not np.isfinite(got[1])


def test_profile_check_discounts_rises_within_the_roughness(space):
    x0 = space.nominal

    def f(X, ripple=0.0):  # a quadratic, optionally with small-scale ripples (contact roughness)
        d = (X - x0) / 1e-2
        return 0.5 * ((d / 2.0) ** 2).sum(axis=1) + ripple * np.sin(7.0 * d).sum(axis=1)

    smooth = _profile(space, f, [3.0, 3.0])
    rough = _profile(space, lambda X: f(X, ripple=6.0), [3.0, 3.0])
    assert np.all(smooth < 1.5) and np.all(rough > smooth)


# -- bootstrap bias correction ----------------------------------------------------------------


def test_bootstrap_data_replay_the_recorded_actions_with_the_noise_asked_for(task, space):
    from twinloop.calib.bootstrap import simulate_like
    from twinloop.calib.fit import _windows
    from twinloop.calib.problem import WindowProblem

    data = record(task, space, 2, ticks=20)
    error = StateError.for_task(task, data)
    problem = WindowProblem(task, make_twin("mujoco", task.model, space), _windows(task, data, CalibConfig()), error,
                            space)
    rng = np.random.default_rng(0)
    clean = simulate_like(problem, data, TRUTH, np.zeros(task.nstate), rng)
    for sim, rec in zip(clean, data, strict=True):
        np.testing.assert_array_equal(sim.actions, rec.actions)
        np.testing.assert_allclose(sim.states, rec.states, atol=1e-9)  # unmeasured components keep their constant
    std = error.scale * error.mask
    noisy = simulate_like(problem, data, TRUTH, std, rng)
    d = np.concatenate([(n.states - c.states) / error.scale for n, c in zip(noisy, clean, strict=True)])
    assert 0.8 < d[:, error.mask].std() < 1.2
    assert not d[:, ~error.mask].any()
    # the replay applies the problem's actuation delay
    late = simulate_like(problem.with_delay(3), data, TRUTH, np.zeros(task.nstate), rng)
    assert np.abs(late[0].states - data[0].states).max() > 1e-3


def test_bootstrap_bias_keeps_a_bias_even_in_the_noise_and_cancels_scatter_linear_in_it(task, space):
    from twinloop.calib.bootstrap import bootstrap_bias, simulate_like
    from twinloop.calib.fit import _windows
    from twinloop.calib.problem import WindowProblem

    data = record(task, space, 2, ticks=20)
    error = StateError.for_task(task, data)
    problem = WindowProblem(task, make_twin("mujoco", task.model, space), _windows(task, data, CalibConfig()), error,
                            space)
    clean = np.concatenate([t.states for t in simulate_like(problem, data, TRUTH, np.zeros(task.nstate), np.random.default_rng(0))])
    std = error.scale * error.mask

    def refit(sim):  # a biased "estimator": 0.1 x (noise in units)^2 (even), 0.5 x noise (odd)
        u = ((np.concatenate([t.states for t in sim]) - clean) / error.scale)[:, error.mask]
        return TRUTH + np.array([0.1 * (u**2).mean(), 0.5 * u.mean()]), 7

    bias, cov, evals = bootstrap_bias(TRUTH, 4, lambda sign, rng: simulate_like(problem, data, TRUTH, sign * std, rng),
                                      refit, seed=3)
    assert evals == 28
    assert abs(bias[0] - 0.1) < 0.02  # 0.1 x the mean of squared unit noise (1), within 3 sd
    assert abs(bias[1]) < 1e-12  # each antithetic pair cancels it exactly
    assert cov.shape == (2, 2) and np.all(np.diag(cov) >= 0)


def test_closed_loop_bootstrap_data_rerun_the_recording_policy_from_each_episodes_reset(task, space):
    from twinloop.calib.bootstrap import simulate_closed_loop
    from twinloop.calib.fit import _windows
    from twinloop.calib.problem import WindowProblem

    data = record(task, space, 2, ticks=20)
    problem = WindowProblem(task, make_twin("mujoco", task.model, space), _windows(task, data, CalibConfig()),
                            StateError.for_task(task, data), space)
    n_obs = len(task.obs_names)
    policy = lambda i: task.excitation(i, "excite")  # noqa: E731
    clean = simulate_closed_loop(problem, data, TRUTH, np.zeros(n_obs), policy, np.random.default_rng(0))
    for sim, rec in zip(clean, data, strict=True):
        np.testing.assert_allclose(sim.states, rec.states, atol=1e-9)
        np.testing.assert_allclose(sim.actions, rec.actions, atol=1e-9)
    # with noise the policy reacts to it: the actions change, not only the recorded states
    noisy = simulate_closed_loop(problem, data, TRUTH, np.full(n_obs, 1e-3), policy, np.random.default_rng(0))
    assert np.abs(noisy[0].actions - data[0].actions).max() > 1e-4


def test_bootstrap_subtracts_its_bias_and_widens_the_interval(task, space, excited):
    cfg = CalibConfig(max_evals=40, errors_in_variables=False)
    plain = calibrate(task, excited, space, config=cfg)
    boot = calibrate(task, excited, space, config=CalibConfig(max_evals=40, errors_in_variables=False, bootstrap=2))
    np.testing.assert_array_equal(boot.fitted, plain.estimate)  # the same fit first
    assert boot.bias.shape == (2,) and np.any(boot.bias != 0) and plain.bias.size == 0
    np.testing.assert_allclose(boot.estimate, np.clip(boot.fitted - boot.bias, space.low, space.high))
    assert np.all(boot.interval[:, 0] <= boot.estimate) and np.all(boot.estimate <= boot.interval[:, 1])
    assert np.all(boot.std >= plain.std)
    assert boot.bootstrap_evals > 0 and "bootstrap bias correction" in boot.report()
    assert Posterior.from_dict(boot.to_dict()).bias.tolist() == boot.bias.tolist()


def test_bootstrap_is_a_non_negative_count_and_refuses_signal_parameters(task, excited):
    with pytest.raises(TwinloopError, match="bootstrap must be an integer >= 0, got -1"):
        CalibConfig(bootstrap=-1)
    from twinloop.params import ParamSpace

    space = ParamSpace.from_model(task.model, ["block"], ["mass", "delay"])
    with pytest.raises(TwinloopError, match="bootstrap bias correction simulates model parameters only"):
        calibrate(task, excited, space, config=CalibConfig(max_evals=30, errors_in_variables=False, bootstrap=2))


def test_the_calibrate_command_estimates_the_start_noise_where_the_library_takes_error_units():
    from twinloop.run.calibrate import CalibrateConfig

    assert CalibrateConfig().calib.noise_from_data and not CalibConfig().noise_from_data


def test_a_profiled_delay_is_the_one_whose_fit_predicts_held_out_episodes_best(task, space):
    # judged at a starting point far off (slippery, heavy), the objective picks 3 steps for the true 4
    world = DelayedWorld(task, space.apply(task.model, TRUTH), delay=4)
    eps = record(task, space, 3, world=world)
    cfg = CalibConfig(max_evals=60, delay_steps=None, max_delay_steps=8, holdout_fraction=0.34,
                      errors_in_variables=False)
    x0 = np.array([0.1, 2.0])
    judged = calibrate(task, eps, space, x0=x0, config=cfg)
    profiled = calibrate(task, eps, space, x0=x0, config=replace(cfg, delay_profile=1))
    assert judged.delay_steps == 3 and profiled.delay_steps == 4
    assert profiled.holdout_error[1] < judged.holdout_error[1]
    assert profiled.n_evals > 2 * judged.n_evals  # three fits
    np.testing.assert_allclose(profiled.estimate, TRUTH, rtol=0.05)


def test_pusher_excitation_spread_bounds_the_push_directions_around_the_tables_middle():
    from twinloop.tasks.scripted import pusher_excitation

    task = make_task("push-t")
    obs = np.zeros(len(task.obs_names))
    obs[2:4] = (0.1, 0.0)  # block right of the middle: the middle lies along -x
    for seed in range(20):
        act = pusher_excitation(task, seed, reach=0.09, spread=0.05)(obs, 0)  # approach behind the block
        d = obs[2:4] - act  # from the approach point to the block: the push direction
        assert abs(np.arctan2(d[1], -d[0])) <= 0.05 + 1e-9
    wide = [pusher_excitation(task, s, reach=0.09)(obs, 0) for s in range(20)]
    assert max(abs(np.arctan2((obs[3] - a[1]), -(obs[2] - a[0]))) for a in wide) > 0.3  # the task's 0.8 rad
