"""Gap metrics: zero when the twin is the world, growing with a known parameter shift."""

from __future__ import annotations

import numpy as np
import pytest

from twinloop.calib import (
    METRICS,
    GapConfig,
    Trajectory,
    divergence,
    gap,
    transitions,
)
from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.worlds import SimWorld

TRUTH = np.array([0.4, 0.7, 0.05])  # friction, mass, damping of the world
SHIFTS = (0.8, 0.6, 0.4)  # twin friction = truth x shift (lower: the block still slides)


class NoisyWorld(SimWorld):
    """The world with hidden parameters and 0.5 mm / 0.005 rad / 0.01 m/s observation noise."""

    std = np.array([5e-4, 5e-4, 5e-4, 5e-4, 5e-3, 1e-2, 1e-2, 1e-2, 1e-2, 1e-2])

    def _observe(self):
        return super()._observe() + self.rng.standard_normal(10) * self.std


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


def _record(world, task, seeds, ticks=40, true_state=False):
    out = []
    for s in seeds:
        obs = world.reset(s)
        policy = task.excitation(s)
        states, actions = [], []
        for k in range(ticks):
            a = policy(obs, k)
            states.append(world.true_state() if true_state else task.state_from_obs(obs))
            actions.append(a)
            obs, _ = world.step(a)
        states.append(world.true_state() if true_state else task.state_from_obs(obs))
        out.append(Trajectory(np.array(states), np.array(actions), s))
    return out


@pytest.fixture(scope="module")
def noisy(task):
    world = NoisyWorld(task, task.param_space().apply(task.model, TRUTH))
    return _record(world, task, range(4)), _record(world, task, range(100, 104))


def _shifted(f):
    p = TRUTH.copy()
    p[0] *= f
    return p


def test_metrics_are_exactly_zero_when_the_twin_replays_the_world_exactly(task):
    world = SimWorld(task, task.param_space().apply(task.model, TRUTH))
    eps = _record(world, task, [0], ticks=20, true_state=True)  # full state, no noise
    X, Y = transitions(task, eps, TRUTH)
    np.testing.assert_allclose(X, Y, atol=1e-6)  # error units: 1e-6 mm
    for m in METRICS:
        assert abs(divergence(X, Y, GapConfig(metric=m, n_boot=20)).value) < 1e-6


@pytest.mark.parametrize("metric", METRICS)
def test_twin_equal_to_world_is_far_below_two_samples_of_the_world(task, noisy, metric):
    a, b = noisy
    cfg = GapConfig(metric=metric, n_boot=50)
    same = gap(task, a, TRUTH, cfg)
    Xa, _ = transitions(task, a, TRUTH)
    Xb, _ = transitions(task, b, TRUTH)
    n = min(len(Xa), len(Xb))
    reference = divergence(Xa[:n], Xb[:n], cfg)  # a held-out sample of the same world
    # no larger than what separates two samples of the world itself
    assert same.value <= reference.ci[1]
    if metric != "mmd":  # KL and distances between different samples stay well above zero
        assert same.value < 0.5 * reference.value


@pytest.mark.parametrize("metric", METRICS)
def test_gap_grows_monotonically_with_a_friction_shift(task, noisy, metric):
    a, _ = noisy
    cfg = GapConfig(metric=metric, n_boot=50)
    values = [gap(task, a, _shifted(f), cfg).value for f in (1.0, *SHIFTS)]
    assert all(x < y for x, y in zip(values, values[1:], strict=False)), values


@pytest.mark.parametrize("metric", METRICS)
def test_a_shift_gives_a_strictly_positive_significant_gap(task, noisy, metric):
    # a kernel estimate that returns zero for any shift would fail here
    a, _ = noisy
    cfg = GapConfig(metric=metric, n_boot=100)
    base = gap(task, a, TRUTH, cfg)
    shifted = gap(task, a, _shifted(SHIFTS[-1]), cfg)
    assert shifted.value > 0 and shifted.ci[0] > 0
    assert shifted.ci[0] > base.ci[1]


def test_interval_holds_the_value_and_is_seeded(task, noisy):
    a, _ = noisy
    g1 = gap(task, a, TRUTH, GapConfig(metric="kl", n_boot=60, seed=4))
    g2 = gap(task, a, TRUTH, GapConfig(metric="kl", n_boot=60, seed=4))
    assert g1 == g2
    assert g1.ci[0] <= g1.value <= g1.ci[1]


def test_divergences_of_known_gaussians():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((800, 1))
    Y = X + 1.0  # same shape, mean shifted by one std
    cfg = GapConfig(n_boot=10, ridge=0.0)
    assert divergence(X, Y, GapConfig(metric="kl", n_boot=10, ridge=0.0)).value == pytest.approx(0.5, rel=0.1)
    assert divergence(X, Y, GapConfig(metric="swd", n_boot=10)).value == pytest.approx(1.0, rel=0.1)
    assert divergence(X, Y, cfg).value > 50 * abs(divergence(X, rng.standard_normal((800, 1)), cfg).value)


def test_bad_input_is_named():
    with pytest.raises(TwinloopError, match="gap metric"):
        GapConfig(metric="tv")
    with pytest.raises(TwinloopError, match="same shape"):
        divergence(np.zeros((10, 2)), np.zeros((10, 3)))
    with pytest.raises(TwinloopError, match="at least 4"):
        divergence(np.zeros((2, 2)), np.zeros((2, 2)))
