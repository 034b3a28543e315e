"""Anytime planning: a refine that spends what its deadline allows, in samples as well as
iterations, and the real-time default that derives that deadline from the world's period.

Time here is a fake clock that a slow twin advances per candidate rolled out, never the
machine's speed.
"""

import numpy as np
import pytest

from twinloop.control import AsyncConfig, AsyncController, Controller, Refiner, RefinerConfig
from twinloop.control.anytime import chunk_size, cycle_deadline
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.run.compare import realtime_summary
from twinloop.run.experiment import run_episode
from twinloop.tasks import make_task
from twinloop.twin import MujocoTwin
from twinloop.worlds import RealtimeWorld, SimWorld


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


@pytest.fixture(scope="module")
def twin(task):
    return MujocoTwin(task.model, task.param_space(), nthread=2)


class SlowTwin:
    """A twin whose rollouts take ``seconds(n)`` of a fake clock for ``n`` candidates; it
    keeps the sizes of the batches it was asked for."""

    def __init__(self, twin, seconds=lambda n: float(n)):
        self.inner, self.seconds, self.now, self.batches = twin, seconds, 0.0, []
        self.dt, self.nu, self.nstate, self.param_space = twin.dt, twin.nu, twin.nstate, twin.param_space

    def clock(self) -> float:
        return self.now

    def rollout(self, state, ctrl, params=None):
        self.batches.append(len(ctrl))
        self.now += self.seconds(len(ctrl))
        return self.inner.rollout(state, ctrl, params)


def slow_refiner(task, twin, seconds=lambda n: float(n), **kw):
    slow = SlowTwin(twin, seconds)
    cfg = RefinerConfig(**{"num_samples": 16, "horizon": 0.5, "chunks": 4, **kw})
    return Refiner(task, slow, make_optimizer("mppi"), cfg, clock=slow.clock), slow


def start(task, seed=0):
    s = task.initial_state(np.random.default_rng(seed))
    return s, np.tile(np.clip(task.goal[:2], -0.3, 0.3), (10, 1))


def test_a_deadline_for_part_of_k_evaluates_fewer_samples_and_selects_among_them(task, twin):
    """1 s per candidate, chunks of 4, 8.5 s: two chunks fit, the third would end at 12 s."""
    s, chunk = start(task)
    ref, slow = slow_refiner(task, twin, deadline=8.5)
    prior = ref.plan_from_actions(chunk)
    res = ref.refine(s, prior=prior)
    assert slow.batches == [4, 4] and res.n_samples == 8 and res.cut and res.iterations == 1
    assert len(res.costs) == 8 and res.cost == np.min(res.costs)  # the best of what it evaluated
    assert res.prior_cost == res.costs[1]                           # the base proposal among them
    # the same candidates, all 16 evaluated: the first 8 cost the same, so the cut selected among them
    full, _ = slow_refiner(task, twin)
    whole = full.refine(s, prior=full.plan_from_actions(chunk))
    np.testing.assert_array_equal(whole.costs[:8], res.costs)
    assert whole.n_samples == 16 and not whole.cut and whole.cost <= res.cost


def test_the_base_proposal_is_evaluated_even_when_no_chunk_fits(task, twin):
    s, chunk = start(task, 1)
    ref, slow = slow_refiner(task, twin, deadline=0.1)
    res = ref.refine(s, prior=ref.plan_from_actions(chunk))
    assert slow.batches == [4] and res.n_samples == 4 and np.isfinite(res.prior_cost)
    res = ref.refine(s, prior=ref.plan_from_actions(chunk), deadline=0)  # a call's own deadline: 0 s
    assert res.n_samples == 4 and res.deadline == 0


def test_without_a_deadline_one_batch_per_iteration_and_a_deadline_that_never_cuts_changes_nothing(task, twin):
    s, chunk = start(task, 2)
    plans = {}
    for name, kw in (("none", {}), ("ample", {"deadline": 1e9})):
        ref, slow = slow_refiner(task, twin, iterations=3, seed=5, **kw)
        res = ref.refine(s, prior=ref.plan_from_actions(chunk))
        plans[name] = (res.plan.knots, res.costs, res.n_samples, slow.batches)
    assert plans["none"][3] == [16, 16, 16] and plans["ample"][3] == [4] * 12
    np.testing.assert_array_equal(plans["none"][0], plans["ample"][0])  # bit for bit
    np.testing.assert_array_equal(plans["none"][1], plans["ample"][1])
    assert plans["none"][2] == plans["ample"][2] == 48


def test_one_chunk_means_the_deadline_stops_only_between_iterations(task, twin):
    s, chunk = start(task, 3)
    ref, slow = slow_refiner(task, twin, iterations=5, chunks=1, deadline=40.0)
    res = ref.refine(s, prior=ref.plan_from_actions(chunk))
    assert slow.batches == [16, 16] and res.iterations == 2 and res.n_samples == 32 and res.cut


@pytest.mark.parametrize("slowdown", [1.0, 3.0, 10.0])
@pytest.mark.parametrize("deadline", [0.5, 5.0, 11.0, 30.0])
def test_a_call_never_runs_past_its_deadline_by_more_than_one_chunk(task, twin, slowdown, deadline):
    """Chunks after the second run ``slowdown`` times slower than the one before predicted."""
    calls = []

    def seconds(n):
        calls.append(n)
        return n * (slowdown if len(calls) > 2 else 1.0)

    s, _ = start(task, 4)
    ref, slow = slow_refiner(task, twin, seconds, iterations=4, deadline=deadline)
    res = ref.refine(s)
    longest = max(seconds_of(c, i, slowdown) for i, c in enumerate(calls))
    assert slow.now <= deadline + longest
    assert res.seconds == slow.now and res.n_samples == sum(slow.batches) and res.deadline == deadline


def seconds_of(n, i, slowdown):
    return n * (slowdown if i >= 2 else 1.0)


def test_chunks_are_checked_and_hold_the_incumbent_and_the_prior():
    assert chunk_size(64, 4) == 16 and chunk_size(10, 4) == 3 and chunk_size(16, 100) == 2
    with pytest.raises(TwinloopError, match="chunks"):
        RefinerConfig(chunks=0)
    with pytest.raises(TwinloopError, match="margin"):
        AsyncConfig(margin=1.0)


def test_each_tick_records_the_samples_and_iterations_its_refine_spent(task, twin):
    ref, _ = slow_refiner(task, twin, deadline=8.5)
    ctl = Controller(ref, None)
    res = run_episode(SimWorld(task), ctl, 0, max_ticks=3, record=True)
    table = res.recorder.to_table()
    assert table["refine.samples"].to_pylist() == [8, 8, 8]
    assert table["refine.iterations"].to_pylist() == [1, 1, 1]


def test_anytime_real_time_derives_the_refine_deadline_from_the_world_period(task, twin):
    ctl = AsyncController(Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=8, horizon=0.5)),
                          config=AsyncConfig(anytime=True))
    assert ctl.config.margin == 0.1
    assert ctl.deadline(0.02, spent=0.003) == pytest.approx(0.9 * 0.02 - 0.003)  # before any cycle
    assert cycle_deadline(0.1, [0.01, 0.03, 0.02], 0.1) == pytest.approx(0.06)   # the slowest recent overhead
    assert cycle_deadline(0.1, [0.5], 0.1) == 0.0                                  # then the first chunk only
    assert AsyncController(ctl.refiner).deadline(0.02, spent=0.003) == ctl.deadline(0.02, spent=0.003)  # default
    off = AsyncController(ctl.refiner, config=AsyncConfig(anytime=False))
    assert off.deadline(0.02, spent=0.0) is None                                   # every sample, every cycle
    own = AsyncController(Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=8, deadline=0.5)),
                          config=AsyncConfig(anytime=True))
    assert own.deadline(0.02, spent=0.0) is None                                   # the user's deadline stands


def test_an_anytime_realtime_run_plans_each_cycle_within_one_world_tick(task, twin):
    """Wall-clock, so only what the controller decided is asserted: every cycle's deadline is
    the tick less the margin and the measured overhead, and the spend is reported."""
    world = RealtimeWorld(SimWorld(task, period=0.02))  # 50 Hz
    ctl = AsyncController(Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=32, horizon=0.5)),
                          config=AsyncConfig(anytime=True))
    try:
        run_episode(world, ctl, 0, max_ticks=15, record=False)
    finally:
        world.close()
    cyc = ctl.cycles
    assert len(cyc) >= 2
    for prev, c in zip(cyc, cyc[1:], strict=False):
        assert c.deadline <= max(0.9 * 0.02 - prev.overhead, 0.0) + 1e-12
        assert 1 <= c.iterations and 4 <= c.samples <= 32 and c.cut == (c.samples < 32)
    st = ctl.stats()
    assert st["deadline_median"] <= 0.018 and st["samples_min"] >= 4  # one chunk of 32 / 8
    row = realtime_summary([{**world.stats(), **st}])
    assert row["samples_median"] == st["samples_median"] and row["cut_cycles"] == st["cut_cycles"]
