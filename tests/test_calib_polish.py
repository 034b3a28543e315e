"""Calibration's polish: least squares again from the fit, its Jacobian a finer secant."""

from __future__ import annotations

import numpy as np
import pytest

from twinloop.calib import CalibConfig, calibrate, record_trajectory
from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.worlds import SimWorld

TRUTH = np.array([0.4, 0.7])  # block friction, block mass


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


@pytest.fixture(scope="module")
def space(task):
    return task.param_space().subset(["block_friction", "block_mass"])


@pytest.fixture(scope="module")
def excited(task, space):
    world = SimWorld(task, model=space.apply(task.model, TRUTH))
    return [record_trajectory(world, task.excitation(s), s, 40) for s in range(3)]


def test_polish_takes_a_fit_that_stopped_short_further_down(task, space, excited):
    # a budget too small for least squares to reach the minimum from the nominal twin
    short = CalibConfig(max_evals=10, errors_in_variables=False)
    first = calibrate(task, excited, space, config=short)
    polished = calibrate(task, excited, space, config=CalibConfig(max_evals=10, errors_in_variables=False,
                                                                  polish_evals=30))
    assert polished.train_error[1] < 0.9 * first.train_error[1]
    assert np.max(polished.error(TRUTH)) < np.max(first.error(TRUTH))
    assert first.n_evals <= 10 < polished.n_evals <= 10 + 30


def test_polish_measures_the_start_noise_again_at_the_fit_under_errors_in_variables(task, space, excited):
    cfg = CalibConfig(max_evals=60, errors_in_variables=True)
    plain = calibrate(task, excited, space, config=cfg)
    polished = calibrate(task, excited, space, config=CalibConfig(max_evals=60, errors_in_variables=True,
                                                                  polish_evals=20))
    assert polished.errors_in_variables
    # the polish's budget plus one start-sensitivity measurement (2 per compared component)
    assert plain.n_evals < polished.n_evals <= plain.n_evals + 20 + 2 * 12


@pytest.mark.parametrize("bad", [{"polish_evals": -1}, {"polish_step": 0.0}, {"polish_step": 20.0}])
def test_a_bad_polish_is_named(bad):
    with pytest.raises(TwinloopError, match=next(iter(bad))):
        CalibConfig(**bad)


def test_the_quadruped_polishes_its_fit_by_default_and_other_tasks_do_not():
    from twinloop.cli.generate import resolve
    from twinloop.run.calibrate import CalibrateConfig

    cfg, sources, _ = resolve(CalibrateConfig, "calibrate", None, {}, "task", lambda: "quadruped-walk")
    assert cfg.calib.polish_evals == 300 and sources["calib.polish_evals"] == "task"
    other, _, _ = resolve(CalibrateConfig, "calibrate", None, {"task": "block-push"}, "task", lambda: "quadruped-walk")
    assert other.calib.polish_evals == 0
