"""Specification of twinloop.stats: Wilson intervals, seeded bootstrap intervals and the ranking
metrics of policy evaluation (Pearson, Spearman, Kendall, SIMPLER's MMRV) on hand-computed
examples."""

import numpy as np
import pytest
from scipy import stats as sps

from twinloop.errors import TwinloopError
from twinloop.stats import bootstrap_ci, kendall, mmrv, paired_difference, pearson, spearman, wilson

Z95 = float(sps.norm.ppf(0.975))


@pytest.mark.parametrize("k,n", [(0, 10), (1, 10), (5, 10), (10, 10), (7, 23), (150, 200)])
def test_wilson_matches_scipy_wilson_interval(k, n):
    ref = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    lo, hi = wilson(k, n, z=Z95)
    assert lo == pytest.approx(ref.low, abs=1e-9)
    assert hi == pytest.approx(ref.high, abs=1e-9)


def test_wilson_default_z_is_95_percent():
    lo, hi = wilson(5, 10)
    assert (lo, hi) == pytest.approx((0.2366, 0.7634), abs=1e-4)


def test_wilson_at_zero_and_all_successes_stays_in_unit_interval_with_width():
    lo0, hi0 = wilson(0, 8)
    lo1, hi1 = wilson(8, 8)
    assert lo0 == 0.0 and 0 < hi0 < 1
    assert hi1 == 1.0 and 0 < lo1 < 1


def test_wilson_narrows_with_more_trials():
    w_small = np.subtract(*wilson(5, 10)[::-1])
    w_large = np.subtract(*wilson(50, 100)[::-1])
    assert w_large < w_small


@pytest.mark.parametrize("k,n,match", [(0, 0, "n"), (1, -3, "n"), (11, 10, "successes"),
                                       (-1, 10, "successes"), (1.5, 10, "integer")])
def test_wilson_rejects_bad_counts(k, n, match):
    with pytest.raises(TwinloopError, match=match):
        wilson(k, n)


def test_bootstrap_same_seed_same_interval_and_other_seed_differs():
    x = np.random.default_rng(1).normal(size=50)
    assert bootstrap_ci(x, seed=3) == bootstrap_ci(x, seed=3)
    assert bootstrap_ci(x, seed=3) != bootstrap_ci(x, seed=4)


def test_bootstrap_mean_interval_agrees_with_normal_theory_on_a_large_sample():
    x = np.random.default_rng(0).normal(2.0, 1.0, size=400)
    lo, hi = bootstrap_ci(x, n_boot=4000, seed=0)
    half = Z95 * x.std(ddof=1) / np.sqrt(x.size)
    assert lo < x.mean() < hi
    assert lo == pytest.approx(x.mean() - half, abs=0.15 * half)
    assert hi == pytest.approx(x.mean() + half, abs=0.15 * half)


def test_bootstrap_statistic_without_axis_gives_the_same_interval():
    x = np.random.default_rng(2).exponential(size=30)
    with_axis = bootstrap_ci(x, stat=np.median, n_boot=200, seed=5)
    without_axis = bootstrap_ci(x, stat=lambda s: float(np.median(s)), n_boot=200, seed=5)
    assert with_axis == pytest.approx(without_axis)


def test_bootstrap_higher_level_gives_wider_interval():
    x = np.random.default_rng(3).normal(size=40)
    lo90, hi90 = bootstrap_ci(x, level=0.90)
    lo99, hi99 = bootstrap_ci(x, level=0.99)
    assert lo99 <= lo90 and hi99 >= hi90 and (hi99 - lo99) > (hi90 - lo90)


@pytest.mark.parametrize("kw,match", [({"values": []}, "empty"), ({"level": 1.0}, "level"),
                                      ({"n_boot": 0}, "n_boot"), ({"values": [1.0, np.nan]}, "NaN")])
def test_bootstrap_rejects_bad_input(kw, match):
    args = {"values": [1.0, 2.0, 3.0], **kw}
    with pytest.raises(TwinloopError, match=match):
        bootstrap_ci(**args)


# -- ranking metrics -------------------------------------------------------------------------


def test_pearson_matches_a_hand_computed_example():
    # centred x = (-1, 0, 1), y = (-7, -1, 8)/3: r = 5 / sqrt(2 * 114/9)
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / np.sqrt(2 * 114 / 9), abs=1e-12)


def test_pearson_is_one_for_equal_values_and_undefined_for_a_constant_side():
    assert pearson([0.3, 0.3], [0.3, 0.3]) == 1.0  # SIMPLER's convention
    assert np.isnan(pearson([0.5, 0.5, 0.5], [0.1, 0.4, 0.9]))


def test_spearman_shares_ranks_between_ties():
    # twin ranks (1.5, 1.5, 3, 4), world ranks (1, 2, 3, 4): rho = 4.5 / sqrt(4.5 * 5)
    assert spearman([0.1, 0.1, 0.5, 0.9], [0.0, 0.2, 0.3, 0.8]) == pytest.approx(4.5 / np.sqrt(22.5), abs=1e-12)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)


def test_kendall_counts_concordant_minus_discordant_pairs():
    assert kendall([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx((5 - 1) / 6)


def test_mmrv_is_the_mean_of_each_policys_largest_misordered_real_gap():
    # policies 1 and 2 are swapped by the twin; their real rates differ by 0.5
    assert mmrv([0.1, 0.5, 0.9], [0.2, 0.9, 0.4]) == pytest.approx(1 / 3)
    # a swap of two policies 10 points apart in the world, four policies: (0.1 + 0.1) / 4
    assert mmrv([0.2, 0.6, 0.4, 0.8], [0.1, 0.5, 0.6, 0.9]) == pytest.approx(0.05)
    assert mmrv([0.1, 0.2, 0.3], [0.0, 0.5, 1.0]) == 0.0


def test_mmrv_charges_a_tie_in_the_twin_once_as_simpler_does():
    # (s1 > s0) is False but (r1 > r0) is True: policy 1 gets the violation 0.6, policy 0 none
    assert mmrv([0.5, 0.5], [0.2, 0.8]) == pytest.approx(0.3)


def test_ranking_metrics_need_two_policies_of_equal_count():
    with pytest.raises(TwinloopError, match="at least two"):
        pearson([0.5], [0.5])
    with pytest.raises(TwinloopError, match="world values"):
        mmrv([0.1, 0.2], [0.1, 0.2, 0.3])


def _paired(a, b, c, d):
    """Successes of x and y over a + b + c + d episodes: a both, b x only, c y only, d neither."""
    return [1] * (a + b) + [0] * (c + d), [1] * a + [0] * b + [1] * c + [0] * d


def test_paired_difference_without_correlation_is_the_square_and_add_of_the_two_wilson_intervals():
    # ad - bc = 12 - 7 = 5 <= n/2: no correlation term, so the interval is the plain square-and-add
    x, y = _paired(1, 1, 7, 12)
    (l1, u1), (l2, u2) = wilson(2, 21), wilson(8, 21)
    p1, p2 = 2 / 21, 8 / 21
    d, lo, hi = paired_difference(x, y)
    assert d == pytest.approx(p1 - p2)
    assert lo == pytest.approx(d - np.hypot(p1 - l1, u2 - p2))
    assert hi == pytest.approx(d + np.hypot(u1 - p1, p2 - l2))


def test_paired_difference_is_narrower_for_correlated_pairs_and_antisymmetric():
    # the same margins, the pairs agreeing more: concordant episodes narrow the interval
    loose = paired_difference(*_paired(30, 10, 10, 10))
    tight = paired_difference(*_paired(38, 2, 2, 18))
    assert loose[0] == tight[0] == 0.0
    assert tight[2] - tight[1] < loose[2] - loose[1]
    x, y = _paired(59, 6, 16, 80)
    d, lo, hi = paired_difference(x, y)
    assert lo < d < hi < 0  # ten more wins of y among the discordant: y better, shown at 95%
    d2, lo2, hi2 = paired_difference(y, x)
    assert (d2, lo2, hi2) == pytest.approx((-d, -hi, -lo))
    assert paired_difference([1] * 20, [1] * 20) == pytest.approx((0.0, -0.161, 0.161), abs=1e-3)


def test_paired_difference_rejects_bad_input():
    with pytest.raises(TwinloopError, match="equally long"):
        paired_difference([1, 0], [1])
    with pytest.raises(TwinloopError, match="booleans"):
        paired_difference([1, 2], [1, 0])
