"""Worlds that do not wait (RealtimeWorld) and the asynchronous controller.

Timing here is wall-clock on a shared, loaded machine: the tests assert orders and generous
bounds (a tick happened, at least a few ticks, later than), never tight numbers.
"""

import time

import numpy as np
import pytest

from twinloop.control import AsyncConfig, AsyncController, Controller, Refiner, RefinerConfig
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.run.experiment import run_episode
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import RealtimeWorld, SimWorld


@pytest.fixture(scope="module")
def task():
    return make_task("push-t")


@pytest.fixture
def world(task):
    w = RealtimeWorld(SimWorld(task, period=0.02))  # 50 Hz, real time
    yield w
    w.close()


def refiner(task, **kw):
    cfg = RefinerConfig(**{"num_samples": 8, "horizon": 0.5, **kw})
    return Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi"), cfg)


def test_realtime_world_advances_while_the_controller_sleeps(world):
    world.reset(0)
    _, info0 = world.observe()
    time.sleep(0.4)  # ~20 ticks at 50 Hz
    _, info1 = world.observe()
    assert info1["tick"] >= info0["tick"] + 4
    assert info1["time"] == pytest.approx(info1["tick"] * 0.02)
    assert len(world.log) >= 4 and not any(r.fresh for r in world.log)  # it held, nobody sent


def test_step_waits_for_the_next_published_observation(world):
    world.reset(1)
    _, info = world.observe()
    _, after = world.step(world.task.hold_action(world.task.state_from_obs(world.observe()[0])))
    assert after["tick"] > info["tick"]
    assert after["wall"] > info["wall"]


def test_a_late_action_is_applied_late_and_recorded_so(world, task):
    obs = world.reset(2)
    a = task.hold_action(task.state_from_obs(obs))
    world.step(a)  # a first, timely action: from here on, held ticks are deadline misses
    _, seen = world.observe()
    time.sleep(0.3)  # the controller "thinks" for ~15 ticks
    late = np.clip(a + 0.01, task.action_low, task.action_high)
    world.step(late)
    deadline = time.monotonic() + 5.0  # the tick's record is logged once its step is done
    while not (applied := [r for r in world.log if r.fresh and np.allclose(r.action, late)]):
        assert time.monotonic() < deadline, "the late action was never applied"
        time.sleep(0.01)
    first = applied[0]
    assert first.tick > seen["tick"] + 3                  # applied late ...
    assert first.age >= 0.1                               # ... and its age says how stale it was
    held = [r for r in world.log if seen["tick"] < r.tick < first.tick]
    assert len(held) >= 3 and not any(r.fresh for r in held)
    assert world.stats()["misses"] >= 3


def test_realtime_world_needs_reset_and_checks_actions(task):
    w = RealtimeWorld(SimWorld(task, period=0.02))
    with pytest.raises(TwinloopError, match="reset"):
        w.observe()
    w.reset(0)
    with pytest.raises(TwinloopError, match="shape"):
        w.send(np.zeros(3))
    w.close()
    with pytest.raises(TwinloopError, match="rate"):
        RealtimeWorld(SimWorld(task), rate=0)


def test_sim_world_period_must_divide_into_timesteps(task):
    with pytest.raises(TwinloopError, match="does not divide its step period 0.0123 s"):
        SimWorld(task, period=0.0123)


def test_async_controller_needs_a_world_that_stamps_time(task):
    ctl = AsyncController(refiner(task), task.default_proposer())
    with pytest.raises(TwinloopError, match="real-time world"):
        ctl.act(SimWorld(task).reset(0), {"time": 0.0})


def test_in_flight_controls_are_the_sent_actions_then_the_current_plan(task):
    ref = refiner(task)
    ctl = AsyncController(ref, task.default_proposer())
    ctl._period = 0.02
    a_sent, a_plan = np.array([0.01, 0.02]), np.array([-0.03, 0.04])
    ctl._sent = {5: a_sent}
    plan = ref.hold_plan(a_plan)
    ctl._current = (plan, 0.12, None, plan.actions())
    ctrl = ctl._in_flight(0.10, 0.16, hold=np.zeros(2))  # ticks 5, 6, 7 at 20 ms
    per_tick = int(round(0.02 / ref.twin.dt))
    assert ctrl.shape == (3 * per_tick, 2)
    np.testing.assert_allclose(ctrl[:per_tick], np.tile(a_sent, (per_tick, 1)))
    np.testing.assert_allclose(ctrl[per_tick:], np.tile(a_plan, (2 * per_tick, 1)))


def test_prediction_runs_to_the_plan_start_and_hands_on_the_delay_line(task):
    """With a 40 ms actuation delay (2 ticks of 20 ms) a plan starting at 0.16 s meets the state
    reached through the actions applied over [0.06, 0.12); those applied over [0.12, 0.16) are
    still in the delay line the refiner rolls its candidates out behind."""
    acts = {j: np.array([0.01 * j, -0.005 * j]) for j in range(1, 9)}
    state = task.initial_state(np.random.default_rng(0))
    out = {}
    for delay in (0.04, 0.0):
        ctl = AsyncController(refiner(task, actuation_delay=delay), None)
        ctl._period, ctl._sent = 0.02, dict(acts)
        out[delay] = ctl.predict(state, 0.10, 0.16)
    (delayed, line, lead), (undelayed, no_line, lead0) = out[0.04], out[0.0]
    assert lead == lead0 == pytest.approx(0.06) and no_line is None
    twin = ctl.refiner.twin
    per_tick = int(round(0.02 / twin.dt))
    r = twin.rollout(state, np.repeat(np.stack([acts[j] for j in range(3, 6)]), per_tick, axis=0))
    np.testing.assert_allclose(delayed[: task.model.nq], r.qpos[0, 0, -1])
    np.testing.assert_allclose(line, np.repeat(np.stack([acts[6], acts[7]]), per_tick, axis=0))
    assert not np.allclose(undelayed[: task.model.nq], delayed[: task.model.nq])


@pytest.mark.parametrize("comp", [True, False])
def test_async_controller_plans_ahead_only_with_latency_compensation(task, comp):
    world = RealtimeWorld(SimWorld(task, period=0.02))
    ctl = AsyncController(refiner(task), task.default_proposer(), AsyncConfig(latency_comp=comp, budget=0.04))
    try:
        res = run_episode(world, ctl, 0, max_ticks=40, record=False)  # 0.8 s of world time
    finally:
        world.close()
    assert res.ticks >= 10
    assert len(ctl.cycles) >= 2
    starts = np.array([c.start for c in ctl.cycles])
    leads = np.array([c.lead for c in ctl.cycles])
    if comp:  # each plan starts after the observation it came from, at a tick boundary
        assert np.all(leads >= 0.02 - 1e-9)
        np.testing.assert_allclose(starts / 0.02, np.round(starts / 0.02), atol=1e-6)
    else:
        assert np.all(leads == 0) and np.all(np.isnan(starts))
    sent = [r for r in world.log if r.fresh]
    assert len(sent) >= res.ticks // 2  # the actuation side sent at the world's rate


@pytest.mark.parametrize("comp", [True, False])
def test_async_controller_rolls_its_candidates_out_behind_the_delay_line(task, comp):
    """With an actuation delay (40 ms: 8 twin steps) every planning cycle hands the refiner
    the delay line: the predicted one, or without compensation the one at the observation."""
    world = RealtimeWorld(SimWorld(task, period=0.02))
    ctl = AsyncController(refiner(task, actuation_delay=0.04), task.default_proposer(),
                          AsyncConfig(latency_comp=comp, budget=0.04))
    lines, plan = [], ctl.plan
    ctl.plan = lambda obs, state, warm, carry=None, in_flight=None, **kw: (lines.append(in_flight), plan(obs, state, warm, carry, in_flight, **kw))[1]
    try:
        run_episode(world, ctl, 0, max_ticks=30, record=False)
    finally:
        world.close()
    assert len(lines) >= 2 and all(np.shape(x) == (8, task.nu) and np.isfinite(x).all() for x in lines)
    sent = {tuple(r.action) for r in world.log if r.fresh}
    assert {tuple(a) for a in lines[-1]} <= sent  # by then the line holds actions sent, not the start's hold


def test_sync_controller_runs_on_a_realtime_world(task):
    world = RealtimeWorld(SimWorld(task, period=0.02))
    ctl = Controller(refiner(task), task.default_proposer(), refine=False)
    try:
        res = run_episode(world, ctl, 3, max_ticks=15, record=True)
    finally:
        world.close()
    ts = res.recorder.to_table()["timestamp"].to_numpy()
    assert np.all(np.diff(ts) > 0)  # recorded with the world's time stamps
    assert res.ticks <= 15


EXIT_SCRIPT = """
from twinloop.control import AsyncController, Refiner, RefinerConfig
from twinloop.plan import make_optimizer
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import RealtimeWorld, SimWorld

task = make_task("push-t")
world = RealtimeWorld(SimWorld(task), rate=1000.0)  # steps back to back: always inside MuJoCo
obs = world.reset(0)
refiner = Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi"),
                  RefinerConfig(num_samples=64, horizon=1.0))
ctrl = AsyncController(refiner)
ctrl.reset(0)
obs, info = world.observe()
ctrl.act(obs, info)  # starts the planner thread, which plans from now on
# exit without close() or stop(): both threads are inside MuJoCo calls
"""


def test_the_process_exits_cleanly_with_engine_threads_still_running(tmp_path):
    """A daemon thread inside a MuJoCo call at interpreter exit used to kill the process
    with a segmentation fault after its work was done; twinloop.threads stops them first."""
    import subprocess
    import sys

    script = tmp_path / "leave_threads.py"
    script.write_text(EXIT_SCRIPT)
    for _ in range(3):
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:])


class Timed:
    """A proposer that records the world times it is told before each proposal."""

    def __init__(self, proposer):
        self.proposer, self.times = proposer, []

    def set_time(self, t):
        self.times.append(t)

    def propose(self, obs, state):
        return self.proposer.propose(obs, state)


@pytest.mark.parametrize("comp", [True, False])
def test_async_controller_tells_a_timed_proposer_when_its_plan_starts(task, comp):
    world = RealtimeWorld(SimWorld(task, period=0.02))
    proposer = Timed(task.default_proposer())
    ctl = AsyncController(refiner(task), proposer, AsyncConfig(latency_comp=comp, budget=0.04))
    try:
        run_episode(world, ctl, 0, max_ticks=15, record=False)
    finally:
        world.close()
    cycles = list(ctl.cycles)
    assert len(cycles) >= 2
    expected = [c.start if comp else c.obs_time for c in cycles]
    np.testing.assert_allclose(proposer.times[: len(cycles)], expected)


def test_actions_in_flight_reach_a_twin_of_any_step():
    from twinloop.control.asynchronous import per_twin_step

    acts = np.arange(12.0).reshape(6, 2)  # six world ticks of 10 ms
    np.testing.assert_array_equal(per_twin_step(acts, 0.01, 0.005), np.repeat(acts, 2, axis=0))
    np.testing.assert_array_equal(per_twin_step(acts, 0.01, 0.01), acts)
    # a twin step twice the world's tick: each step holds the action of the tick it starts in
    np.testing.assert_array_equal(per_twin_step(acts, 0.01, 0.02), acts[::2])
    assert per_twin_step(acts[:0], 0.01, 0.02).shape == (0, 2)


def test_real_time_plans_in_a_twin_coarser_than_the_worlds_tick():
    from twinloop.cli.generate import resolve
    from twinloop.run.compare import RunConfig, controller_in_world
    from twinloop.run.experiment import run_episode

    cfg, _, _ = resolve(RunConfig, "run", None, {"experiment.task": "block-push", "realtime": True,
                                                 "planner.refiner.num_samples": 8, "planner.twin_timestep": 0.02})
    world, ctl = controller_in_world(cfg, "refined")
    assert ctl.refiner.twin.dt > world.period  # 20 ms against the world's 10 ms
    r = run_episode(world, ctl, 0, max_ticks=30, record=False)
    assert r.ticks == 30
