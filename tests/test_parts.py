"""The controller's parts: a state estimator, candidate sources and tick hooks defined outside
the control package, and the trusted acceptance rule."""

from dataclasses import replace

import numpy as np
import pytest

from twinloop.control import Controller, Refiner, RefinerConfig, TrustedAcceptance
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.run.compare import RunConfig, controller_in_world, episode_stats
from twinloop.tasks import make_task
from twinloop.twin import MujocoTwin
from twinloop.worlds import ShiftedWorld, SimWorld


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


@pytest.fixture(scope="module")
def twin(task):
    return MujocoTwin(task.model, task.param_space(), nthread=1)


def refiner(task, twin, **kw):
    kw.setdefault("num_samples", 12)
    kw.setdefault("horizon", 0.5)
    return Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(**kw))


class StraightAtTheGoal:
    """Pushes straight at the goal (a base proposer)."""

    def __init__(self, task):
        self.task = task

    def propose(self, obs, state):
        return np.tile(np.clip(self.task.goal[:2], -0.3, 0.3), (10, 1))


class LaggingEstimator:
    """A state estimator of this test file: the observation one tick late (the first as is)."""

    def __init__(self, task):
        self.task, self.calls, self._last = task, [], None

    def reset(self, seed=None):
        self.calls.append(("reset", seed))
        self._last = None

    def estimate(self, obs):
        now = self.task.state_from_obs(obs)
        out, self._last = (now if self._last is None else self._last), now
        self.calls.append(("estimate",))
        return out

    def sent(self, action):
        self.calls.append(("sent",))


class HoldStill:
    """A candidate source of this test file: two chunks, holding the pusher where it is and
    where it is plus 2 cm in x."""

    def __init__(self, task):
        self.task, self.states = task, []

    def offer(self, obs, state, ticks, rng):
        self.states.append(np.array(state))
        hold = self.task.hold_action(state)
        return np.stack([np.tile(hold, (ticks, 1)), np.tile(hold + [0.02, 0.0], (ticks, 1))])


def test_a_controller_runs_an_estimator_and_a_source_defined_outside_the_package(task, twin):
    est, src = LaggingEstimator(task), HoldStill(task)
    ctl = Controller(refiner(task, twin), StraightAtTheGoal(task), estimator=est, sources=[src])
    world = SimWorld(task)
    obs = world.reset(5)
    ctl.reset(5)
    seen = []
    for _ in range(3):
        seen.append(task.state_from_obs(obs))
        obs, _ = world.step(ctl.act(obs))
    assert est.calls == [("reset", 5)] + [("estimate",), ("sent",)] * 3
    # the source was asked from the estimated state: a tick late after the first
    np.testing.assert_array_equal(src.states[0], seen[0])
    np.testing.assert_array_equal(src.states[2], seen[1])
    # its chunks joined the first batch after the incumbent and the prior, rehearsed as offered
    r = ctl.refiner
    res = ctl.last.result
    plans = [r.plan_from_actions(c) for c in src.offer(None, src.states[2], r.spec.horizon_ticks, None)]
    _, want = r.evaluate(src.states[2], np.stack([p.knots for p in plans]), in_flight=None)
    np.testing.assert_allclose(res.offered_costs, want, rtol=1e-9)


def test_a_source_with_bad_chunks_is_refused(task, twin):
    class Wrong:
        def offer(self, obs, state, ticks, rng):
            return np.zeros((2, ticks, 5))

    ctl = Controller(refiner(task, twin), sources=[Wrong()])
    with pytest.raises(TwinloopError, match=r"offered chunks of shape \(2, 5, 5\), expected \(M, L, 2\)"):
        ctl.act(SimWorld(task).reset(0))


# -- the trusted acceptance rule (RefinerConfig.accept) ---------------------------------------


class Oracle:
    """A state estimator of this test file: the world's true state (block-push does not
    observe the block's height, and a push is so sensitive to it that a few micrometres turn
    the cost of a plan rehearsed from it by several units)."""

    def __init__(self, world):
        self.world = world

    def reset(self, seed=None):
        pass

    def estimate(self, obs):
        return self.world.true_state()

    def sent(self, action):
        pass


def trusted(task, twin, world, ticks=4, seed=3, factor=1.0):
    hook = TrustedAcceptance(factor)
    ctl = Controller(refiner(task, twin), StraightAtTheGoal(task), estimator=Oracle(world), hooks=[hook])
    obs = world.reset(seed)
    ctl.reset(seed)
    infos = []
    for _ in range(ticks):
        obs, _ = world.step(ctl.act(obs))
        infos.append(ctl.last)
    return ctl, hook, infos


def test_the_twins_cost_error_is_nil_in_its_own_world_and_grows_in_a_shifted_one(task, twin):
    _, same, _ = trusted(task, twin, SimWorld(task), ticks=6)
    _, shifted, _ = trusted(task, twin, ShiftedWorld(task, severity=3, seed=0), ticks=6)
    assert len(same.errors) == 5 and max(same.errors) < 1e-6
    assert len(shifted.errors) == 5 and shifted.error > 1e-3


def test_a_refined_plan_is_sent_only_when_its_advantage_exceeds_the_twin_error(task, twin):
    world = SimWorld(task)
    ctl, hook, infos = trusted(task, twin, world)
    assert infos[0].accept == "refined" and infos[0].cost < infos[0].prior_cost  # no error known yet
    hook.errors.append(1e9)  # a twin known to be far off
    obs = world.reset(3)
    action = ctl.act(obs)
    tick = ctl.last
    assert tick.accept.startswith("base: advantage ") and tick.accept.endswith("< twin error 1e+09")
    spec = ctl.refiner.spec
    prior = ctl.refiner.plan_from_actions(StraightAtTheGoal(task).propose(obs, None))
    np.testing.assert_allclose(action, replace(prior, knots=np.clip(prior.knots, spec.low, spec.high)).first_action())
    assert tick.cost == tick.prior_cost and tick.result.cost < tick.prior_cost  # the refiner found better
    assert hook.report()["accept"]["base"] == 1


def test_without_a_base_proposal_the_refined_plan_is_always_sent(task, twin):
    hook = TrustedAcceptance()
    ctl = Controller(refiner(task, twin), hooks=[hook])
    hook.errors.append(1e9)
    ctl.act(SimWorld(task).reset(0))
    assert ctl.last.accept == "refined: no base proposal"


def test_trusted_acceptance_is_chosen_by_the_refiner_config():
    cfg = RunConfig(task="block-push", video=False, record=False,
                    refiner=RefinerConfig(num_samples=8, horizon=0.5, accept="always"))
    assert controller_in_world(cfg, "refined")[1].hooks == ()
    on = replace(cfg, refiner=replace(cfg.refiner, accept="trusted", accept_factor=2.0))
    world, ctl = controller_in_world(on, "refined")
    (hook,) = ctl.hooks
    assert isinstance(hook, TrustedAcceptance) and hook.factor == 2.0
    assert controller_in_world(on, "base")[1].hooks == ()
    obs = world.reset(0)
    ctl.reset(0)
    for _ in range(3):
        obs, _ = world.step(ctl.act(obs))
    stats = episode_stats(world, ctl)
    assert sum(stats["accept"].values()) == 3 and stats["twin_cost_error"] >= 0


def test_a_runs_summary_says_per_episode_how_often_each_plan_was_sent(tmp_path):
    from twinloop.run.compare import run_comparison

    cfg = RunConfig(task="block-push", episodes=1, max_ticks=3, video=False, record=False, out=str(tmp_path / "run"),
                    refiner=RefinerConfig(num_samples=8, horizon=0.5, accept="trusted"))
    s = run_comparison(cfg, log=lambda *_: None)
    (row,) = s["per_episode"]["refined"]
    assert sum(row["accept"].values()) == 3 and row["twin_cost_error"] >= 0
    assert "accept" not in s["per_episode"]["base"][0]


def test_bad_acceptance_settings_are_refused():
    with pytest.raises(TwinloopError, match="unknown accept 'sometimes'; choose one of: always, trusted, robust"):
        RefinerConfig(accept="sometimes")
    with pytest.raises(TwinloopError, match="accept_factor must be a finite number >= 0"):
        RefinerConfig(accept_factor=-1)


def test_which_plan_was_sent_and_why_reaches_the_recorded_episode(task, twin, tmp_path):
    from twinloop.data import Dataset
    from twinloop.run.experiment import run_episode

    world = SimWorld(task)
    hook = TrustedAcceptance()
    ctl = Controller(refiner(task, twin), StraightAtTheGoal(task), estimator=Oracle(world), hooks=[hook])
    res = run_episode(world, ctl, 3, max_ticks=4)
    ds = Dataset.create(tmp_path / "ds", {"fps": 1 / task.control_period, "task": task.name})
    ds.write(res.recorder)
    ep = Dataset(tmp_path / "ds").read(0)
    assert len(ep.refine["accept"]) == 4 and ep.refine["accept"][0] == "refined"
    plain = run_episode(world, Controller(refiner(task, twin), StraightAtTheGoal(task)), 3, max_ticks=2)
    assert "refine.accept" not in plain.recorder.to_table().column_names  # no rule, no column


def test_the_twins_prediction_runs_behind_the_actuation_delay_line(task, twin):
    from twinloop.worlds import TwinWorld

    world = TwinWorld(task, delay_steps=6)  # 6 physics steps late, as the refiner knows
    hook = TrustedAcceptance()
    ref = refiner(task, twin, actuation_delay=6 * task.model.opt.timestep)
    ctl = Controller(ref, StraightAtTheGoal(task), estimator=Oracle(world), hooks=[hook])
    obs = world.reset(3)
    ctl.reset(3)
    for _ in range(6):
        obs, _ = world.step(ctl.act(obs))
    assert len(hook.errors) == 5 and max(hook.errors) < 1e-6
