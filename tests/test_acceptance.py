"""Acceptance rules: when the controller sends the refined plan rather than the base proposal."""

import numpy as np
import pytest

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.control.hooks import RobustAcceptance, acceptance_hooks
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import SimWorld


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


def _controller(task, hooks, k=8):
    twin = make_twin("mujoco", task.model, task.param_space())
    refiner = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=k, horizon=0.3))
    return Controller(refiner, task.default_proposer(), hooks=hooks)


def _run(ctl, ticks=4, seed=0):
    world = SimWorld(ctl.task)
    obs = world.reset(seed)
    ctl.reset(seed)
    infos = []
    for _ in range(ticks):
        obs, _ = world.step(ctl.act(obs))
        infos.append(ctl.last)
    return infos


def _rigged(ctl, hook, refined_wins: int):
    """Make the refined plan win under exactly ``refined_wins`` of the hook's particles; returns
    the number of particles and plans of each cost query."""
    n, calls = hook.n, []

    def rigged(state, plans, params, line=None):
        calls.append((len(params), len(plans)))
        refined = np.where(np.arange(n) < refined_wins, 0.0, 2.0)  # the refined plan first, then the base
        return np.stack([refined, np.ones(n)], axis=1)

    ctl.refiner.plan_costs = rigged
    return calls


def test_robust_acceptance_sends_the_refined_plan_only_when_it_wins_under_every_particle(task):
    hook = RobustAcceptance(particles=4, quantile=1.0)
    ctl = _controller(task, [hook])
    calls = _rigged(ctl, hook, refined_wins=4)
    infos = _run(ctl, ticks=2)
    assert [t.accept for t in infos] == ["refined", "refined"]
    assert calls == [(4, 2), (4, 2)]  # the refined plan and the base, under 4 particles, each tick

    hook = RobustAcceptance(particles=4, quantile=1.0)
    ctl = _controller(task, [hook])
    _rigged(ctl, hook, refined_wins=3)
    infos = _run(ctl, ticks=2)
    assert all(t.accept == "base: refined wins under 3 of 4 parameter particles" for t in infos)
    for t in infos:  # what is sent is the base proposal, as rehearsed
        np.testing.assert_allclose(t.action, ctl.refiner.spec.bound(t.plan.first_action()))
        assert t.cost == t.prior_cost
    assert hook.report() == {"accept": {"refined": 0, "base": 2}}


def test_robust_acceptance_quantile_lowers_the_bar(task):
    hook = RobustAcceptance(particles=4, quantile=0.75)
    ctl = _controller(task, [hook])
    _rigged(ctl, hook, refined_wins=3)
    assert [t.accept for t in _run(ctl, ticks=2)] == ["refined", "refined"]


def test_robust_acceptance_judges_nothing_when_the_refiner_chose_the_base(task):
    from dataclasses import replace

    hook = RobustAcceptance(particles=4, quantile=1.0)
    ctl = _controller(task, [hook])
    calls = _rigged(ctl, hook, refined_wins=4)
    decide = hook.decide

    def refiner_keeps_the_base(tick, batch):  # the exact prior won the batch
        spec = ctl.refiner.spec
        tick.plan = replace(batch.prior, knots=np.clip(batch.prior.knots, spec.low, spec.high))
        decide(tick, batch)

    hook.decide = refiner_keeps_the_base
    infos = _run(ctl, ticks=2)
    assert [t.accept for t in infos] == ["base: the refiner chose the base proposal"] * 2
    assert calls == []  # no particle rollouts for two identical plans
    assert hook.report() == {"accept": {"refined": 0, "base": 2}}


def test_the_base_sent_by_an_acceptance_rule_is_the_proposers_own_action(task):
    base = _controller(task, [])
    base.refine_enabled = False
    hook = RobustAcceptance(particles=4)
    ctl = _controller(task, [hook])
    _rigged(ctl, hook, refined_wins=0)
    sent = [t.action for t in _run(ctl, ticks=3)]
    alone = [t.action for t in _run(base, ticks=3)]
    np.testing.assert_allclose(sent, alone, atol=1e-9)


def test_robust_acceptance_particles_are_seeded_per_episode(task):
    hook = RobustAcceptance(particles=5)
    _controller(task, [hook])
    hook.reset(3)
    a = hook.params.copy()
    hook.reset(3)
    np.testing.assert_array_equal(a, hook.params)
    np.testing.assert_array_equal(a[0], task.param_space().nominal)  # the nominal is always among them
    assert len(hook.models) == 5  # built once an episode
    hook.reset(4)
    assert not np.array_equal(a, hook.params)


def test_robust_acceptance_is_the_default_and_does_not_apply_in_real_time(task):
    from twinloop.control import AsyncController
    from twinloop.run.compare import RunConfig, controller_in_world

    cfg = RunConfig(task="block-push", video=False, record=False)
    (hook,) = controller_in_world(cfg, "refined")[1].hooks
    assert isinstance(hook, RobustAcceptance) and (hook.n, hook.quantile) == (8, 0.75)
    assert controller_in_world(cfg, "base")[1].hooks == ()
    _, rt = controller_in_world(RunConfig(task="block-push", video=False, record=False, realtime=True), "refined")
    assert isinstance(rt, AsyncController)


def test_robust_acceptance_on_the_real_twin_records_a_verdict_every_tick(task):
    ctl = _controller(task, acceptance_hooks(RefinerConfig(accept="robust", accept_particles=3)))
    infos = _run(ctl, ticks=3)
    assert all(t.accept == "refined" or t.accept.startswith("base: refined wins under") for t in infos)
    from twinloop.data.episodes import ACCEPT, EpisodeRecorder

    rec = EpisodeRecorder.for_task(ctl.task, 0)
    for i, t in enumerate(infos):
        rec.add(0.1 * i, np.zeros(len(ctl.task.obs_names)), t.action, tick=t)
    assert rec.to_table().column(ACCEPT).to_pylist() == [t.accept for t in infos]


@pytest.mark.parametrize("kw, message", [
    ({"accept": "sometimes"}, "unknown accept 'sometimes'"),
    ({"accept": "robust", "accept_particles": 1}, "accept_particles must be an integer >= 2"),
    ({"accept": "robust", "accept_quantile": 0.0}, "accept_quantile must be"),
])
def test_bad_acceptance_settings_are_refused(kw, message):
    with pytest.raises(TwinloopError, match=message):
        RefinerConfig(**kw)
