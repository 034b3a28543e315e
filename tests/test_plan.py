"""Plans as spline knots: evaluation, bounds, re-timing (warm start)."""

import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.plan import Plan, PlanBasis, PlanSpec
from twinloop.plan.spline import interpolation_matrix


def spec(kind="cubic", n=4, H=10):
    return PlanSpec(H, 0.1, 20, n, kind, np.array([-1.0, -2.0]), np.array([1.0, 2.0]))


@pytest.mark.parametrize("kind", ["zero", "linear", "cubic"])
def test_spline_passes_through_its_knots(kind):
    t = np.linspace(0, 1, 5)
    W = interpolation_matrix(t, t, kind)
    np.testing.assert_allclose(W, np.eye(5), atol=1e-12)


def test_linear_spline_interpolates_between_knots():
    W = interpolation_matrix(np.array([0.0, 1.0]), np.array([0.25, 0.5]), "linear")
    np.testing.assert_allclose(W @ np.array([0.0, 4.0]), [1.0, 2.0])


def test_zero_order_hold_keeps_previous_knot():
    W = interpolation_matrix(np.array([0.0, 1.0, 2.0]), np.array([0.5, 1.5, 1.99]), "zero")
    np.testing.assert_allclose(W @ np.array([1.0, 2.0, 3.0]), [1.0, 2.0, 2.0])


def test_controls_hold_each_tick_for_its_substeps_and_respect_bounds():
    s = spec("linear")
    basis = PlanBasis(s)
    knots = np.array([[[-5.0, 0.0], [0.0, 0.5], [0.5, 1.0], [5.0, 9.0]]])
    u = basis.controls(knots)
    assert u.shape == (1, s.horizon_ticks * s.substeps, 2)
    assert (u >= s.low).all() and (u <= s.high).all()
    ticks = u[0, :: s.substeps]
    np.testing.assert_array_equal(u[0, : s.substeps], np.repeat(ticks[:1], s.substeps, axis=0))


def test_shifted_plan_is_the_same_plan_one_tick_later():
    s = spec("linear", n=10)
    a = np.stack([np.linspace(-1, 1, 10), np.linspace(-2, 0, 10)], axis=1)
    p = Plan(PlanBasis(s).knots_from_ticks(a), s)
    np.testing.assert_allclose(p.actions(), a, atol=1e-9)
    shifted = p.shifted().actions()
    np.testing.assert_allclose(shifted[:-1], a[1:], atol=1e-9)
    np.testing.assert_allclose(shifted[-1], a[-1], atol=1e-9)  # holds the last action


def test_short_action_chunk_is_held_to_the_horizon():
    s = spec("zero", n=10)
    p = Plan(PlanBasis(s).knots_from_ticks(np.array([[0.1, 0.2], [0.3, 0.4]])), s)
    np.testing.assert_allclose(p.actions()[2:], np.tile([0.3, 0.4], (8, 1)))


def test_an_action_with_equal_bounds_is_held_and_never_sampled():
    from twinloop.plan import make_optimizer

    s = PlanSpec(10, 0.1, 20, 4, "cubic", np.array([-1.0, 0.3]), np.array([1.0, 0.3]))
    for name in ("mppi", "cem", "predictive", "best_of_n"):
        opt = make_optimizer(name)
        st = opt.init(np.tile([0.0, 0.3], (4, 1)), None, s.low, s.high)
        cand = opt.sample(st, np.random.default_rng(0), 16)
        assert np.ptp(cand[..., 0]) > 0.1 and np.all(cand[..., 1] == 0.3), name
    u = PlanBasis(s).controls(np.random.default_rng(1).normal(size=(3, 4, 2)))
    assert np.all(u[..., 1] == 0.3)


def test_bad_plan_specs_are_rejected():
    with pytest.raises(TwinloopError, match="unknown spline kind"):
        spec("quintic")
    with pytest.raises(TwinloopError, match="low <= high"):
        PlanSpec(10, 0.1, 20, 4, "zero", np.array([1.0]), np.array([0.0]))
    with pytest.raises(TwinloopError, match="at least one action"):
        PlanSpec(10, 0.1, 20, 4, "zero", np.array([1.0]), np.array([1.0]))
    with pytest.raises(TwinloopError, match="action chunk must have shape"):
        PlanBasis(spec()).knots_from_ticks(np.zeros((3, 5)))
    with pytest.raises(TwinloopError, match="NaN"):
        PlanBasis(spec()).knots_from_ticks(np.full((3, 2), np.nan))


def step_chunk(H: int = 6) -> np.ndarray:
    """``(H, 2)``: the second action steps from 0 to 1 between ticks 1 and 2 (a grasp closing)."""
    return np.column_stack([np.linspace(-0.5, 0.5, H), (np.arange(H) >= 2).astype(float)])


def test_a_plan_made_from_a_chunk_sends_the_chunk_exactly():
    s = spec("cubic", n=4, H=6)
    a = step_chunk()
    assert np.abs(PlanBasis(s).ticks(PlanBasis(s).knots_from_ticks(a)) - a).max() > 0.05  # knots alone smooth the step
    np.testing.assert_allclose(PlanBasis(s).plan_from_ticks(a).actions(), a, atol=1e-12)


def test_a_plan_with_detail_shifted_one_tick_is_the_chunk_one_tick_later():
    s = spec("cubic", n=4, H=6)
    a = step_chunk()
    shifted = PlanBasis(s).plan_from_ticks(a).shifted().actions()
    np.testing.assert_allclose(shifted[:-1], a[1:], atol=1e-9)
    np.testing.assert_allclose(shifted[-1], a[-1], atol=1e-9)


def test_a_binary_action_is_snapped_at_mid_range_and_the_others_are_left_exact():
    s = PlanSpec(10, 0.1, 20, 4, "cubic", np.array([-1.0, 0.0]), np.array([1.0, 1.0]), binary=(1,))
    chunk = np.column_stack([np.linspace(-0.9, 0.9, 10), [0.0, 0.3, 0.49, 0.5, 0.56, 0.9, 0.7, 0.2, 1.0, 0.6]])
    a = PlanBasis(s).plan_from_ticks(chunk).actions()
    np.testing.assert_array_equal(a[:, 1], [0, 0, 0, 1, 1, 1, 1, 0, 1, 1])
    np.testing.assert_allclose(a[:, 0], chunk[:, 0], atol=1e-12)
    u = PlanBasis(s).controls(np.random.default_rng(0).uniform(-1, 2, size=(8, 4, 2)))
    assert set(np.unique(u[..., 1])) <= {0.0, 1.0} and len(np.unique(u[..., 0])) > 2


def test_bad_binary_actions_are_refused():
    lo, hi = np.array([-1.0, 0.3, 0.0]), np.array([1.0, 0.3, 1.0])
    for bad, msg in (((3,), "binary \\(action index\\) must be an integer >= 0 and <= 2, got 3"),
                     ((2, 2), "distinct actions"), ((1,), "low < high"), (2, "tuple of action indices")):
        with pytest.raises(TwinloopError, match=msg):
            PlanSpec(10, 0.1, 20, 4, "zero", lo, hi, binary=bad)
