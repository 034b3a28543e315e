"""The task contract: every hook declared with a default; a scene of your own in a few lines."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.tasks import TASKS, Residual, SceneTask, Task, make_task, register_task

EXAMPLE = Path(__file__).parents[1] / "examples" / "custom_scene.py"


def load_example():
    spec = importlib.util.spec_from_file_location("custom_scene", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_custom_scene_example_refines_a_reach_to_success():
    results = load_example().main(episodes=1, num_samples=16)
    assert results[0].success and results[0].final_error <= 0.01


def test_a_scene_task_takes_its_defaults_from_the_scene():
    task = load_example().make_reach_task()
    np.testing.assert_allclose(task.action_low, [-3.1, -2.6])
    np.testing.assert_allclose(task.action_high, [3.1, 2.6])
    np.testing.assert_allclose(task.initial_state(np.random.default_rng(0))[:2], [0.0, 0.3])  # the keyframe
    np.testing.assert_allclose(task.hold_action(None), [0.0, 0.3])
    assert task.obs_names == ("qpos:0", "qpos:1", "qvel:0", "qvel:1")
    assert task.obs_units() == ("rad", "rad", "rad/s", "rad/s")
    assert task.default_proposer() is None and task.failure(np.zeros(2)) == ""
    assert task.trace_points(np.zeros((5, 2)), np.zeros((5, 3))).shape == (5, 0, 3)


def test_a_scene_task_refuses_a_period_that_is_not_a_multiple_of_the_timestep():
    with pytest.raises(TwinloopError, match="not a multiple of timestep"):
        SceneTask(EXAMPLE.with_name("reach.xml"), residuals=[Residual("r", 1.0, lambda t: t.qpos)], error=lambda q: q[..., 0], control_period=0.0123)


@pytest.mark.parametrize("kw, match", [
    ({"residuals": []}, "residuals must be a non-empty"),
    ({"error": "distance"}, "error must be callable"),
    ({"tolerance": float("nan")}, "tolerance must be"),
])
def test_a_scene_task_names_what_is_wrong(kw, match):
    args = {"xml": EXAMPLE.with_name("reach.xml"), "residuals": [Residual("r", 1.0, lambda t: t.qpos)],
            "error": lambda q: q[..., 0], **kw}
    with pytest.raises(TwinloopError, match=match):
        SceneTask(**args)


def test_a_missing_scene_file_is_named():
    with pytest.raises(TwinloopError, match="does not exist"):
        SceneTask("/nonexistent/scene.xml", residuals=[Residual("r", 1.0, lambda t: t.qpos)], error=lambda q: q)


def test_the_default_excitation_is_seeded_smooth_and_within_bounds():
    task = load_example().make_reach_task()
    obs = np.zeros(len(task.obs_names))
    f, g = task.excitation(3), task.excitation(3)
    a = [f(obs, k) for k in range(30)]
    b = [g(obs, k) for k in range(30)]
    np.testing.assert_array_equal(a, b)
    a = np.array(a)
    assert np.all(a >= task.action_low) and np.all(a <= task.action_high)
    assert np.abs(np.diff(a, axis=0)).max() < 0.25 * (task.action_high - task.action_low).max()
    assert np.ptp(a, axis=0).min() > 0.1  # it does move every actuator


def test_a_task_without_its_required_hooks_says_which_is_missing():
    class Bare(Task):
        name = "bare"

    with pytest.raises(NotImplementedError, match="'bare' defines no residuals"):
        Bare().residuals()


def test_registering_a_task_by_module_path_imports_it_on_first_use():
    register_task("block-push-again", "twinloop.tasks.block_push:BlockPush")
    try:
        assert make_task("block-push-again").name == "block-push"
    finally:
        TASKS.pop("block-push-again")
    with pytest.raises(TwinloopError, match="factory must be callable"):
        register_task("x", "no-colon-here")


def test_the_description_is_the_first_docstring_paragraph():
    assert make_task("push-t").description().startswith("Push-T in MuJoCo")
