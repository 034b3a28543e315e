"""Optimizers: each samples around its state and updates toward low cost; risk aggregation."""

import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.plan import CEM, MPPI, BestOfN, PredictiveSampling, aggregate, make_optimizer

LOW, HIGH = np.array([-1.0, -1.0]), np.array([1.0, 1.0])
TARGET = np.array([[0.5, -0.3]] * 3)


def quadratic(c):
    return ((c - TARGET) ** 2).sum(axis=(1, 2))


def optimize(opt, iters=15, n=64, seed=0, prior=None):
    rng = np.random.default_rng(seed)
    st = opt.init(np.zeros((3, 2)), prior, LOW, HIGH)
    for _ in range(iters):
        c = np.clip(np.concatenate([st.mean[None], opt.sample(st, rng, n - 1)]), LOW, HIGH)
        st = opt.update(st, c, quadratic(c))
    return st.mean


@pytest.mark.parametrize("name", ["mppi", "cem", "predictive", "best_of_n"])
def test_optimizer_moves_toward_the_minimum(name):
    mean = optimize(make_optimizer(name))
    assert np.abs(mean - TARGET).max() < 0.15
    assert quadratic(mean[None])[0] < quadratic(np.zeros((1, 3, 2)))[0] / 10


@pytest.mark.parametrize("name", ["mppi", "cem", "predictive", "best_of_n"])
def test_optimizer_is_seeded(name):
    opt = make_optimizer(name)
    np.testing.assert_array_equal(optimize(opt, iters=3, seed=7), optimize(opt, iters=3, seed=7))
    assert not np.array_equal(optimize(opt, iters=3, seed=7), optimize(opt, iters=3, seed=8))


def test_mppi_mean_is_shaped_by_both_prior_and_warm_start():
    warm, prior = np.zeros((3, 2)), np.ones((3, 2)) * 0.8
    st = MPPI(prior_weight=0.25).init(warm, prior, LOW, HIGH)
    np.testing.assert_allclose(st.mean, 0.2)
    assert np.allclose(MPPI().init(warm, None, LOW, HIGH).mean, 0)


def test_mppi_weights_favour_low_cost():
    st = MPPI(temperature=0.05).init(np.zeros((1, 1)), None, LOW[:1], HIGH[:1])
    c = np.array([[[0.0]], [[1.0]]])
    st = MPPI(temperature=0.05).update(st, c, np.array([10.0, 0.0]))
    assert st.mean[0, 0] > 0.99


def test_cem_shrinks_its_distribution_to_the_elites():
    opt = CEM(elite_fraction=0.25, min_noise=0.01)
    st = opt.init(np.zeros((3, 2)), None, LOW, HIGH)
    rng = np.random.default_rng(0)
    c = opt.sample(st, rng, 100)
    st2 = opt.update(st, c, quadratic(c))
    assert st2.std.mean() < st.std.mean()


def test_best_of_n_samples_around_proposer_samples_and_ranks_them():
    opt = BestOfN(noise=0.0)  # no perturbation: every sample is one of the proposals
    st = opt.init(np.zeros((3, 2)), None, LOW, HIGH)
    props = np.stack([np.zeros((3, 2)), TARGET, -TARGET])
    st = st.with_(proposals=props)
    c = opt.sample(st, np.random.default_rng(0), 12)
    assert all(any(np.array_equal(x, p) for p in props) for x in c)
    assert any(np.array_equal(x, TARGET) for x in c)
    assert np.allclose(opt.update(st, c, quadratic(c)).mean, TARGET)


def test_predictive_sampling_keeps_the_incumbent_when_nothing_is_better():
    opt = PredictiveSampling()
    st = opt.init(TARGET.copy(), None, LOW, HIGH)
    c = np.concatenate([st.mean[None], opt.sample(st, np.random.default_rng(1), 10)])
    np.testing.assert_array_equal(opt.update(st, c, quadratic(c)).mean, TARGET)


def test_risk_aggregation_mean_worst_cvar():
    costs = np.array([[1.0, 5.0], [3.0, 5.0], [8.0, 5.0], [0.0, 5.0]])
    ok = np.ones_like(costs, bool)
    np.testing.assert_allclose(aggregate(costs, ok, "mean"), [3.0, 5.0])
    np.testing.assert_allclose(aggregate(costs, ok, "worst"), [8.0, 5.0])
    np.testing.assert_allclose(aggregate(costs, ok, "cvar", alpha=0.5), [5.5, 5.0])
    # cvar prefers the consistent candidate where the mean does not
    assert np.argmin(aggregate(costs, ok, "cvar", 0.25)) == 1
    assert np.argmin(aggregate(costs, ok, "mean")) == 0


def test_unstable_particle_makes_the_candidate_infinite():
    costs = np.ones((3, 2))
    ok = np.ones((3, 2), bool)
    ok[1, 0] = False
    for risk in ("mean", "worst", "cvar"):
        out = aggregate(costs, ok, risk)
        assert np.isinf(out[0]) and out[1] == 1.0


def test_bad_optimizer_configuration_is_rejected():
    with pytest.raises(TwinloopError, match="unknown optimizer 'ppo'"):
        make_optimizer("ppo")
    with pytest.raises(TwinloopError, match="temperature"):
        MPPI(temperature=0)
    with pytest.raises(TwinloopError, match="elite_fraction"):
        CEM(elite_fraction=0)
    with pytest.raises(TwinloopError, match="unknown risk"):
        aggregate(np.ones((1, 1)), np.ones((1, 1), bool), "median")
