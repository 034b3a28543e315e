"""Refiner and receding-horizon controller: selection, deadline, fallback, end to end."""

import re

import numpy as np
import pytest

from twinloop.control import Controller, ProposerSamples, Refiner, RefinerConfig
from twinloop.errors import RefinementFailed, TwinloopError
from twinloop.plan import Plan, make_optimizer
from twinloop.run.experiment import run_episode
from twinloop.tasks import make_task
from twinloop.tasks.base import Task
from twinloop.tasks.block_push import BlockPush
from twinloop.twin import MujocoTwin
from twinloop.worlds import SimWorld, TwinWorld


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


@pytest.fixture(scope="module")
def twin(task):
    return MujocoTwin(task.model, task.param_space(), nthread=2)


def refiner(task, twin, name="mppi", **kw):
    kw.setdefault("num_samples", 16)
    return Refiner(task, twin, make_optimizer(name), RefinerConfig(**kw))


class Proposer:
    """Pushes straight at the goal from wherever the pusher is."""

    def __init__(self, task):
        self.task = task

    def propose(self, obs, state):
        return np.tile(np.clip(self.task.goal[:2], -0.3, 0.3), (10, 1))


class BrokenTwin:
    """A twin whose rollouts all come back unstable (or that raises)."""

    def __init__(self, twin, raise_error=False, keep=()):
        self.inner, self.raise_error, self.keep = twin, raise_error, keep
        self.dt, self.nu, self.nstate, self.param_space = twin.dt, twin.nu, twin.nstate, twin.param_space

    def rollout(self, state, ctrl, params=None):
        if self.raise_error:
            raise RuntimeError("engine crashed")
        r = self.inner.rollout(state, ctrl, params)
        ok = np.zeros_like(r.ok)
        ok[:, list(self.keep)] = True
        r.ok = ok
        return r


def test_refined_plan_is_never_worse_than_the_prior(task, twin):
    ref = refiner(task, twin, iterations=3)
    s = task.initial_state(np.random.default_rng(0))
    prior = ref.plan_from_actions(np.tile(s[:2], (10, 1)))
    res = ref.refine(s, prior=prior)
    assert res.cost <= res.prior_cost
    assert res.plan.knots.shape == (ref.spec.n_knots, task.nu)
    assert res.iterations == 3 and res.n_rollouts == 3 * 16


def test_a_refiner_that_keeps_the_prior_rehearses_and_sends_it_exactly(task, twin):
    # a chunk whose target jumps between ticks 1 and 2: the 4 knots of a 5-tick plan cannot
    # express it, and an open-loop chunk sent smoothed drifts off its own timeline
    ref = refiner(task, twin, num_samples=2, horizon=0.5, exact_prior=True)
    s = task.initial_state(np.random.default_rng(0))
    H = ref.spec.horizon_ticks
    chunk = np.tile(s[:2], (H, 1))
    chunk[2:] += [0.03, -0.02]
    res = ref.refine(s, prior=ref.plan_from_actions(chunk))  # the batch: the prior twice
    np.testing.assert_allclose(res.plan.actions(), chunk, atol=1e-12)
    exact = ref.score(twin.rollout(s, np.repeat(chunk, ref.spec.substeps, axis=0)[None]))
    assert res.prior_cost == pytest.approx(float(exact[0]))


def test_samples_around_a_warm_plan_keep_its_detail(task, twin):
    # last tick's plan, made from a chunk with a step, shifted: its samples keep the step
    ref = Refiner(task, twin, make_optimizer("predictive", noise=1e-9), RefinerConfig(num_samples=4, horizon=0.5, exact_prior=True))
    s = task.initial_state(np.random.default_rng(0))
    chunk = np.tile(s[:2], (ref.spec.horizon_ticks, 1))
    chunk[2:] += [0.03, -0.02]
    res = ref.refine(s, warm=ref.plan_from_actions(chunk))
    np.testing.assert_allclose(res.plan.actions(), chunk, atol=1e-6)


@pytest.mark.parametrize("name", ["mppi", "cem"])
def test_proposer_samples_join_the_first_batch_of_any_optimizer_with_their_detail(task, twin, name):
    # K=3: the incumbent, the prior and one slot, which the proposal takes instead of a sample
    ref = refiner(task, twin, name, num_samples=3, horizon=0.5, exact_prior=True)
    s = task.initial_state(np.random.default_rng(0))
    H = ref.spec.horizon_ticks
    chunk = np.tile(s[:2], (H, 1))
    chunk[2:] += [0.03, -0.02]  # a jump its knots cannot express: the detail must travel with it
    offered = ref.plan_from_actions(chunk)
    res = ref.refine(s, prior=ref.plan_from_actions(np.tile(s[:2], (H, 1))), proposals=offered.knots[None],
                     proposal_detail=offered.detail[None])
    _, (want,) = ref.evaluate(s, offered.knots[None], detail=offered.detail[None])
    assert res.costs[2] == pytest.approx(want, rel=1e-9)


def test_proposal_samples_need_a_proposer_that_samples(task, twin):
    with pytest.raises(TwinloopError, match="proposal_samples=2 needs a stochastic proposer"):
        ProposerSamples(Proposer(task), 2)


def test_refinement_lowers_the_cost_of_a_poor_start(task, twin):
    ref = refiner(task, twin, iterations=4, num_samples=32)
    s = task.initial_state(np.random.default_rng(1))
    away = ref.hold_plan(np.array([-0.3, 0.3]))
    _, c0 = ref.evaluate(s, away.knots[None])
    assert ref.refine(s, warm=away).cost < 0.9 * c0[0]


def test_a_prior_margin_keeps_the_prior_unless_a_candidate_beats_it_by_that_fraction(task, twin):
    s = task.initial_state(np.random.default_rng(1))
    prior = refiner(task, twin).hold_plan(np.array([-0.3, 0.3]))
    free = refiner(task, twin, iterations=2, num_samples=32).refine(s, prior=prior)
    gain = 1 - free.cost / free.prior_cost
    assert 0 < gain < 1
    kept = refiner(task, twin, iterations=2, num_samples=32, prior_margin=gain + 0.01).refine(s, prior=prior)
    np.testing.assert_array_equal(kept.plan.knots, prior.knots)
    assert kept.cost == kept.prior_cost
    won = refiner(task, twin, iterations=2, num_samples=32, prior_margin=gain - 0.01).refine(s, prior=prior)
    np.testing.assert_array_equal(won.plan.knots, free.plan.knots)
    assert won.cost == free.cost


def test_a_prior_kept_by_the_margin_is_sent_exactly(task, twin):
    ref = refiner(task, twin, num_samples=16, horizon=0.5, exact_prior=True, prior_margin=0.99)
    s = task.initial_state(np.random.default_rng(0))
    chunk = np.tile(s[:2], (ref.spec.horizon_ticks, 1))
    chunk[2:] += [0.03, -0.02]  # a step the knots cannot express
    res = ref.refine(s, prior=ref.plan_from_actions(chunk), warm=ref.hold_plan(s[:2]))
    np.testing.assert_allclose(res.plan.actions(), chunk, atol=1e-12)


def test_same_seed_same_plan(task, twin):
    s = task.initial_state(np.random.default_rng(2))
    a = refiner(task, twin, seed=3).refine(s).plan.knots
    b = refiner(task, twin, seed=3).refine(s).plan.knots
    c = refiner(task, twin, seed=4).refine(s).plan.knots
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_deadline_returns_the_best_plan_so_far(task, twin):
    ref = refiner(task, twin, iterations=1000, deadline=1e-6)
    res = ref.refine(task.initial_state(np.random.default_rng(3)))
    assert res.iterations == 1  # the first iteration always completes; no second one starts
    assert np.isfinite(res.cost)


def test_unstable_rollouts_are_never_selected(task, twin):
    # only candidate 0 (the incumbent warm plan) is stable, and it is not the cheapest
    ref = Refiner(task, BrokenTwin(twin, keep=(0,)), make_optimizer("predictive"), RefinerConfig(num_samples=16))
    s = task.initial_state(np.random.default_rng(4))
    warm = ref.hold_plan(np.array([0.3, -0.3]))
    res = ref.refine(s, warm=warm)
    np.testing.assert_array_equal(res.plan.knots, warm.knots)
    assert res.n_unstable == 15


def test_all_unstable_raises_refinement_failed(task, twin):
    ref = Refiner(task, BrokenTwin(twin), make_optimizer("mppi"), RefinerConfig(num_samples=8))
    with pytest.raises(RefinementFailed, match="all 8 rollouts"):
        ref.refine(task.initial_state(np.random.default_rng(5)))


@pytest.mark.parametrize("raise_error", [False, True])
def test_controller_falls_back_to_the_base_proposal_and_says_so(task, twin, raise_error):
    ref = Refiner(task, BrokenTwin(twin, raise_error=raise_error), make_optimizer("mppi"), RefinerConfig(num_samples=8))
    ctl = Controller(ref, proposer=Proposer(task))
    world = SimWorld(task)
    obs = world.reset(0)
    a = ctl.act(obs)
    np.testing.assert_allclose(a, task.goal[:2])
    assert ctl.last.fallback and ctl.n_fallbacks == 1
    assert ("engine crashed" if raise_error else "RefinementFailed") in ctl.last.reason


def test_controller_rejects_nonfinite_observations(task, twin):
    ctl = Controller(refiner(task, twin))
    obs = SimWorld(task).reset(0)
    obs[3] = np.inf
    with pytest.raises(TwinloopError, match="NaN or inf"):
        ctl.act(obs)
    with pytest.raises(TwinloopError, match="observation must have shape"):
        ctl.act(obs[:4])


def test_config_rejects_bad_values():
    with pytest.raises(TwinloopError, match="num_samples"):
        RefinerConfig(num_samples=1)
    with pytest.raises(TwinloopError, match="unknown risk"):
        RefinerConfig(risk="median")
    with pytest.raises(TwinloopError, match="deadline"):
        RefinerConfig(deadline=0)
    with pytest.raises(TwinloopError, match="prior_margin must be a finite number >= 0 and < 1, got 1"):
        RefinerConfig(prior_margin=1.0)


def test_particles_and_risk_reach_the_cost(task, twin):
    space = task.param_space()
    parts = space.sample_prior(np.random.default_rng(0), 4)
    ref = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=8, risk="worst"), params=parts)
    s = task.initial_state(np.random.default_rng(6))
    r, agg = ref.evaluate(s, np.tile(ref.hold_plan(s[:2]).knots, (8, 1, 1)))
    assert r.qpos.shape[0] == 4
    np.testing.assert_allclose(agg, task.cost(r).max(axis=0))


def test_refiner_alone_pushes_the_block_to_its_goal(task, twin):
    """End to end: no proposer, nominal twin as the world, MPPI, K=64."""
    ctl = Controller(refiner(task, twin, num_samples=64))
    world = SimWorld(task)
    for seed in (0, 1):
        res = run_episode(world, ctl, seed, record=False)
        assert res.success, f"seed {seed}: final error {res.final_error:.3f}"
        assert res.ticks < task.max_ticks


class BlowsUpAtTick2(SimWorld):
    """The nominal world whose state turns non-finite during its second tick (as a world with
    too large a time step for its physics does): MuJoCo resets it and counts a warning."""

    def step(self, action):
        if self.t == 1:
            self.data.qvel[:] = np.nan
        return super().step(action)


def test_an_unstable_world_ends_the_episode_as_a_failure_that_says_why(task, twin):
    world = BlowsUpAtTick2(task)
    res = run_episode(world, Controller(refiner(task, twin), proposer=Proposer(task), refine=False), 0, record=False)
    assert (res.ticks, res.success) == (2, False)
    assert res.failure.startswith("simulation unstable") and "velocities" in res.failure
    world.reset(0)  # a new episode starts clean
    assert "failure" not in world.info()


def test_proposer_alone_is_a_baseline(task, twin):
    ctl = Controller(refiner(task, twin), proposer=Proposer(task), refine=False)
    obs = SimWorld(task).reset(0)
    np.testing.assert_allclose(ctl.act(obs), task.goal[:2])
    with pytest.raises(TwinloopError, match="needs a proposer"):
        Controller(refiner(task, twin), refine=False)


def test_without_exact_prior_a_chunk_is_sent_as_its_spline_fit(task, twin):
    ref = refiner(task, twin, horizon=0.5)
    chunk = np.zeros((ref.spec.horizon_ticks, task.nu))
    chunk[2:] += [0.03, -0.02]
    plan = ref.plan_from_actions(chunk)
    assert plan.detail is None
    np.testing.assert_allclose(plan.actions(), ref.basis.ticks(ref.basis.knots_from_ticks(chunk)))


# -- a known actuation delay ---------------------------------------------------------------------

DELAY = 30  # physics steps of 5 ms: 1.5 control ticks, so the line holds two ticks' actions


def delayed_refiner(task, twin, delay_steps=DELAY, **kw):
    return refiner(task, twin, horizon=0.5, actuation_delay=delay_steps * twin.dt, **kw)


def world_state(world):
    return np.concatenate([world.data.qpos, world.data.qvel, world.data.act])


def test_with_an_actuation_delay_a_candidate_is_rolled_out_as_the_delayed_world_executes_it(task, twin):
    """The twin applies the actions still in the delay line first, then the candidate's, late:
    tick by tick its rollout is the state of a world with the same delay sent the same plan."""
    ref = delayed_refiner(task, twin)
    world = TwinWorld(task, delay_steps=DELAY)
    world.reset(4)
    s0 = world_state(world)
    line = None
    for a in ([0.2, -0.1], [-0.15, 0.25]):  # two ticks already sent
        world.step(np.array(a))
        line = ref.sent(s0, line, np.array(a))
    state = world_state(world)
    knots = np.random.default_rng(1).uniform(-0.3, 0.3, (1, *ref.hold_plan(np.zeros(2)).knots.shape))
    r, _ = ref.evaluate(state, knots, in_flight=line)
    for i, a in enumerate(Plan(knots[0], ref.spec).actions()):
        world.step(a)
        np.testing.assert_allclose(r.qpos[0, 0, (i + 1) * ref.spec.substeps], world.data.qpos, atol=1e-8)
    assert not np.allclose(r.qpos[0, 0, -1], refiner(task, twin, horizon=0.5).evaluate(state, knots)[0].qpos[0, 0, -1])


class FullStateBlockPush(BlockPush):
    """Block-push observed as its whole twin state (the task's own observation drops the
    block's height), so that a prediction can be compared with the world exactly."""

    obs_from_data, state_from_obs = Task.obs_from_data, Task.state_from_obs
    obs_names = Task.obs_names


def test_a_delay_aware_controller_predicts_the_delayed_world_tick_by_tick(twin):
    """The controller keeps the delay line as it sends: the rollout of the plan it sent
    predicts the world's next state (the line spans 1.5 ticks, so every tick's prediction
    depends on the last two actions sent)."""
    task = FullStateBlockPush()
    ref = Refiner(task, twin, make_optimizer("mppi"),
                  RefinerConfig(num_samples=8, horizon=0.5, actuation_delay=DELAY * twin.dt), keep_rollouts=True)
    ctl = Controller(ref, Proposer(task))
    world = TwinWorld(task, delay_steps=DELAY)
    obs = world.reset(2)
    ctl.reset(2)
    for _ in range(6):
        a = ctl.act(obs)
        res = ctl.last.result
        predicted = res.rollouts.qpos[0, int(np.argmin(res.costs)), ref.spec.substeps]
        obs, _ = world.step(a)
        np.testing.assert_allclose(predicted, world.data.qpos, atol=1e-8)


def test_without_an_actuation_delay_candidates_act_at_once(task, twin):
    s = task.initial_state(np.random.default_rng(3))
    ref = refiner(task, twin, horizon=0.5, actuation_delay=0.0)
    assert ref.delay_steps == 0
    knots = np.random.default_rng(2).uniform(-0.3, 0.3, (3, *ref.hold_plan(np.zeros(2)).knots.shape))
    r, _ = ref.evaluate(s, knots, in_flight=np.ones((5, 2)))  # a line is ignored: nothing is in flight
    np.testing.assert_array_equal(r.ctrl, ref.basis.controls(knots))


def test_an_actuation_delay_rounds_to_whole_twin_steps(task, twin):
    assert delayed_refiner(task, twin, delay_steps=4.4).delay_steps == 4
    assert delayed_refiner(task, twin, delay_steps=0.4).delay_steps == 0


@pytest.mark.parametrize("delay, message", [(-0.01, "actuation_delay (s) must be a finite number >= 0, got -0.01"),
                                            (float("nan"), "actuation_delay (s) must be a finite number >= 0, got nan")])
def test_a_negative_or_nan_actuation_delay_is_refused(delay, message):
    with pytest.raises(TwinloopError, match=re.escape(message)):
        RefinerConfig(actuation_delay=delay)


def test_an_actuation_delay_as_long_as_the_horizon_is_refused(task, twin):
    with pytest.raises(TwinloopError, match=r"actuation_delay 0.5 s is not shorter than the horizon 0.5 s"):
        refiner(task, twin, horizon=0.5, actuation_delay=0.5)


def test_a_delay_line_of_the_wrong_length_is_refused(task, twin):
    ref = delayed_refiner(task, twin)
    s = task.initial_state(np.random.default_rng(0))
    with pytest.raises(TwinloopError, match=re.escape("in_flight (delay line) must have shape (30, 2)")):
        ref.refine(s, in_flight=np.zeros((20, 2)))


@pytest.mark.parametrize("warm_start", [True, False])
def test_without_warm_start_a_plan_depends_on_the_state_not_on_earlier_plans(task, twin, warm_start):
    world = SimWorld(task)
    o1, o2, o3 = world.reset(0), world.reset(1), world.reset(2)

    class AtTheBlock:  # a proposal that depends on the state, so that the first plans differ
        def propose(self, obs, state):
            return np.tile(obs[2:4], (10, 1))

    def action_at_o3_after(first):
        ctl = Controller(refiner(task, twin, num_samples=8), proposer=AtTheBlock(), warm_start=warm_start)
        ctl.reset(7)
        ctl.act(first)
        return ctl.act(o3)

    # the same seed draws the same samples each tick; only the earlier plan differs
    same = np.allclose(action_at_o3_after(o1), action_at_o3_after(o2))
    assert same == (not warm_start)
