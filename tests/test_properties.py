"""Properties that hold for any input (hypothesis): the public rollout, params, refiner and dataset
APIs either give a correct answer or refuse with a TwinloopError; never another exception, a
NaN where a number was promised, or data that read back different from what was written."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from twinloop.control import Refiner, RefinerConfig
from twinloop.data import Dataset, EpisodeRecorder
from twinloop.errors import TwinloopError, number
from twinloop.params import Param
from twinloop.plan import make_optimizer
from twinloop.tasks import make_task
from twinloop.twin import make_twin

# bounded, no deadline: each example may run a physics rollout on a shared 2-core machine.
# Seeded by default, so the suite gives the same verdict on every run; TWINLOOP_EXPLORE=1 draws
# new examples, ten times as many, to look for new failures (add what it finds as a test).
EXPLORE = os.environ.get("TWINLOOP_EXPLORE") == "1"
FAST, SLOW = (settings(max_examples=n * (10 if EXPLORE else 1), derandomize=not EXPLORE, deadline=None,
                       suppress_health_check=[HealthCheck.function_scoped_fixture]) for n in (40, 15))

TASK = make_task("block-push")
SPACE = TASK.param_space()
TWIN = make_twin("mujoco", TASK.model, SPACE, nthread=1)

any_float = st.floats(allow_nan=True, allow_infinity=True, width=64)
# anything a user might pass where a number is asked for
anything = st.one_of(any_float, st.integers(-10**6, 10**6), st.booleans(), st.none(), st.text(max_size=3),
                     st.lists(st.floats(), max_size=2))


@FAST
@given(x=anything, low=st.one_of(st.none(), st.floats(-10, 10)), integer=st.booleans())
def test_number_returns_a_value_in_range_or_refuses(x, low, integer):
    try:
        v = number(x, "x", low=low, integer=integer)
    except TwinloopError as exc:
        assert str(exc).startswith("x must be")
        return
    assert math.isfinite(v) and (low is None or v >= low) and isinstance(v, int if integer else float)


# -- rollouts -------------------------------------------------------------------------------------


def _arrays(shape_dims, elements):
    return hnp.arrays(np.float64, hnp.array_shapes(min_dims=shape_dims[0], max_dims=shape_dims[1], min_side=0,
                                                   max_side=14), elements=elements)


NSTATE, NU = TASK.nstate, TASK.nu
# mostly well-shaped arrays of ordinary values, some odd shapes and some NaN / inf / huge
states = st.one_of(hnp.arrays(np.float64, NSTATE, elements=st.floats(-1, 1)),
                   hnp.arrays(np.float64, NSTATE, elements=any_float), _arrays((0, 2), any_float))
ctrls = st.one_of(hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 12), st.just(NU)),
                             elements=st.floats(-0.3, 0.3)),
                  hnp.arrays(np.float64, st.tuples(st.integers(1, 12), st.just(NU)), elements=st.floats(-1e6, 1e6)),
                  _arrays((1, 4), any_float))


@FAST
@given(state=states, ctrl=ctrls)
def test_rollout_of_any_arrays_answers_with_the_right_shapes_or_refuses(state, ctrl):
    try:
        r = TWIN.rollout(state, ctrl)
    except TwinloopError:
        event("refused")
        return
    event("simulated")
    K, T = (1, *ctrl.shape[:1]) if ctrl.ndim == 2 else ctrl.shape[:2]
    assert r.qpos.shape == (1, K, T + 1, TASK.model.nq) and r.ok.shape == (1, K)
    assert np.isfinite(r.qpos[r.ok]).all() and np.isfinite(r.qvel[r.ok]).all()


within = hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.just(len(SPACE))), elements=st.floats(0, 1)).map(
    lambda u: SPACE.low + u * (SPACE.high - SPACE.low))
values_any = hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 4)), elements=any_float)


@FAST
@given(values=st.one_of(within, values_any))
def test_rollout_under_any_parameter_values_is_within_bounds_or_refused(values):
    s = TASK.initial_state(np.random.default_rng(0))
    try:
        r = TWIN.rollout(s, np.zeros((2, 5, TASK.nu)), params=values)
    except TwinloopError as exc:
        event("refused")
        assert "params" in str(exc)
        assert values.shape[1] != len(SPACE) or not (np.isfinite(values).all() and (values >= SPACE.low).all()
                                                     and (values <= SPACE.high).all())
        return
    event("simulated")
    assert r.qpos.shape[0] == len(values)


# -- params ---------------------------------------------------------------------------------------


@FAST
@given(low=any_float, high=any_float, nominal=any_float, std=st.one_of(st.none(), any_float))
def test_a_param_is_consistent_or_refused(low, high, nominal, std):
    try:
        p = Param("f", "geom:block/friction[0]", low, high, nominal, std)
    except TwinloopError:
        return
    assert math.isfinite(p.std) and p.std > 0 and p.low <= p.nominal <= p.high and p.low < p.high


@FAST
@given(u=hnp.arrays(np.float64, len(SPACE), elements=st.floats(0, 1)))
def test_values_written_to_a_model_read_back(u):
    x = SPACE.low + u * (SPACE.high - SPACE.low)
    np.testing.assert_allclose(SPACE.read(SPACE.apply(TASK.model, x)), x, rtol=1e-12, atol=1e-15)


@FAST
@given(n=st.integers(1, 20), seed=st.integers(0, 2**32 - 1))
def test_prior_samples_are_finite_and_within_bounds(n, seed):
    x = SPACE.sample_prior(np.random.default_rng(seed), n)
    assert x.shape == (n, len(SPACE)) and np.isfinite(x).all()
    assert (x >= SPACE.low).all() and (x <= SPACE.high).all()


# -- the refiner ----------------------------------------------------------------------------------


def _mostly(valid, invalid):
    """Valid values nine times in ten: the property is about what a refiner does, not only refusals."""
    return st.one_of(*[valid] * 9, invalid)


refiner_kwargs = st.fixed_dictionaries({}, optional={
    "num_samples": _mostly(st.integers(2, 12), any_float), "horizon": _mostly(st.floats(0.05, 0.5), any_float),
    "n_knots": _mostly(st.integers(1, 6), st.integers(-1, 0)), "iterations": _mostly(st.integers(1, 3), st.just(0)),
    "spline": _mostly(st.sampled_from(["zero", "linear", "cubic"]), st.just("x")),
    "risk": _mostly(st.sampled_from(["mean", "worst", "cvar"]), st.just("y")),
    "cvar_alpha": _mostly(st.floats(0.01, 1.0), any_float), "seed": _mostly(st.integers(0, 10), st.just(-1)),
    "deadline": _mostly(st.none(), any_float)})


@FAST
@given(kw=refiner_kwargs, optimizer=st.sampled_from(["mppi", "cem", "predictive", "best_of_n"]),
       seed=st.integers(0, 1000))
def test_a_refined_plan_is_finite_and_within_the_action_bounds(kw, optimizer, seed):
    try:
        cfg = RefinerConfig(**kw)
    except TwinloopError:
        event("refused")
        return
    # keep each example small (defaults: 64 x 1 s); a horizon under one tick plans one tick
    assume(cfg.num_samples * max(cfg.horizon, TASK.control_period) <= 64)
    event("refined")
    ref = Refiner(TASK, TWIN, make_optimizer(optimizer), cfg)
    res = ref.refine(TASK.initial_state(np.random.default_rng(seed)))
    a = res.plan.actions()
    assert np.isfinite(a).all() and (a >= TASK.action_low).all() and (a <= TASK.action_high).all()
    assert math.isfinite(res.cost) and 1 <= res.iterations <= cfg.iterations


# -- datasets -------------------------------------------------------------------------------------


frames = st.integers(1, 6).flatmap(lambda T: st.tuples(
    hnp.arrays(np.float64, (T, 3), elements=any_float),  # obs: NaN and inf are stored as they are
    hnp.arrays(np.float64, (T, 2), elements=st.floats(-1e300, 1e300)),
    st.lists(st.floats(1e-3, 10), min_size=T, max_size=T),  # time steps
    st.booleans()))


@pytest.fixture
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("prop")


@SLOW
@given(episodes=st.lists(frames, min_size=1, max_size=3), flip=st.integers(0, 10**6))
def test_a_written_dataset_reads_back_identical_and_any_flipped_byte_is_refused(root, episodes, flip):
    path = Path(tempfile.mkdtemp(dir=root)) / "ds"  # one per example: Hypothesis may replay an example
    ds = Dataset.create(path, {"fps": 10, "task": "prop"})
    for i, (obs, act, dts, success) in enumerate(episodes):
        rec = EpisodeRecorder(i)
        for k, t in enumerate(np.cumsum(dts)):
            rec.add(t, obs[k], act[k])
        rec.finish(success)
        ds.write(rec)
    again = Dataset(path)
    for i, (obs, act, dts, success) in enumerate(episodes):
        ep = again.read(i)
        np.testing.assert_array_equal(ep.obs, obs)
        np.testing.assert_array_equal(ep.actions, act)
        np.testing.assert_array_equal(ep.timestamps, np.cumsum(dts))
        assert ep.success == success
    f = again.path(flip % len(episodes))
    data = bytearray(f.read_bytes())
    data[flip % len(data)] ^= 1 << (flip % 8)
    f.write_bytes(bytes(data))
    with pytest.raises(TwinloopError, match=f.name):
        again.read(flip % len(episodes))


@FAST
@given(ts=st.lists(any_float, min_size=1, max_size=6))
def test_a_recorder_takes_exactly_the_finite_increasing_timestamps(ts):
    rec = EpisodeRecorder(0)
    ok = all(math.isfinite(t) for t in ts) and all(b > a for a, b in zip(ts, ts[1:]))
    try:
        for t in ts:
            rec.add(t, [0.0], [0.0])
    except TwinloopError:
        assert not ok
        return
    assert ok and len(rec) == len(ts)

