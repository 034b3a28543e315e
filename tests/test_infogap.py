"""InfoGap: the refiner prefers actions whose outcomes tell the parameter particles apart."""

from __future__ import annotations

import numpy as np
import pytest

from twinloop.calib import infogap_cost, information_gain
from twinloop.control import Refiner, RefinerConfig
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.tasks.block_push import BlockPush
from twinloop.twin import make_twin


class NoTaskCost(BlockPush):
    """block-push with a zero task cost: every candidate is equally good for the task."""

    def cost(self, rollouts):
        return np.zeros(rollouts.qpos.shape[:2])


@pytest.fixture(scope="module")
def setup():
    task = NoTaskCost()
    space = task.param_space().subset(["block_friction", "block_mass"])
    twin = make_twin("mujoco", task.model, space)
    particles = space.sample_prior(np.random.default_rng(0), 6)
    state = task.initial_state(np.random.default_rng(1))
    return task, space, twin, particles, state


def _refiner(setup, beta, params=None):
    task, _, twin, particles, _ = setup
    extra = [infogap_cost(beta, stride=task.substeps)] if beta else []
    return Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=16, horizon=0.6, seed=0),
                   params=particles if params is None else params, extra_costs=extra)


def _still_and_push(ref, state):
    still = ref.hold_plan(state[0:2]).knots  # pusher stays clear of the block
    push = ref.hold_plan(np.clip(state[2:4] + [0.12, 0.0], -0.3, 0.3)).knots  # drives through it
    return np.stack([still, push])


def test_with_beta_the_refiner_prefers_the_candidate_that_moves_the_block(setup):
    state = setup[4]
    ref = _refiner(setup, beta=0.1)
    _, costs = ref.evaluate(state, _still_and_push(ref, state))
    assert costs[1] < costs[0]


def test_without_beta_the_two_candidates_cost_the_same(setup):
    state = setup[4]
    ref = _refiner(setup, beta=0.0)
    _, costs = ref.evaluate(state, _still_and_push(ref, state))
    assert costs[0] == costs[1]


def test_refined_plan_with_beta_moves_the_block_more_than_without(setup):
    state = setup[4]
    moved = []
    for beta in (0.0, 0.1):
        ref = _refiner(setup, beta)
        plan = ref.refine(state).plan
        r = ref.twin.rollout(state, ref.basis.controls(plan.knots[None]), None)
        moved.append(np.linalg.norm(r.qpos[0, 0, -1, 2:4] - state[2:4]))
    assert moved[1] > moved[0] + 0.01


def test_information_is_zero_when_particles_agree(setup):
    task, _, twin, particles, state = setup
    ref = _refiner(setup, 0.1, params=np.repeat(particles[:1], 3, axis=0))
    r, _ = ref.evaluate(state, _still_and_push(ref, state))
    np.testing.assert_allclose(information_gain(r, stride=task.substeps), 0.0, atol=1e-9)
    single = twin.rollout(state, ref.basis.controls(_still_and_push(ref, state)), particles[:1])
    np.testing.assert_array_equal(information_gain(single), [0.0, 0.0])


def test_information_grows_with_the_spread_of_the_particles(setup):
    task, space, twin, particles, state = setup
    ref = _refiner(setup, 0.1)
    push = _still_and_push(ref, state)[1:]
    centre = space.nominal
    gains = []
    for spread in (0.05, 0.2, 0.5):
        p = np.clip(centre * (1 + spread * np.array([[-1, -1], [1, 1], [-1, 1], [1, -1]])), space.low, space.high)
        gains.append(information_gain(twin.rollout(state, ref.basis.controls(push), p), stride=task.substeps)[0])
    assert gains[0] < gains[1] < gains[2]


def test_unstable_candidates_get_no_bonus(setup):
    task, _, twin, particles, state = setup
    ref = _refiner(setup, 0.1)
    r = twin.rollout(state, ref.basis.controls(_still_and_push(ref, state)), particles)
    r.ok[0, 1] = False
    assert np.isnan(information_gain(r, stride=task.substeps)[1])


def test_bad_input_is_named(setup):
    task, _, twin, particles, state = setup
    r = twin.rollout(state, np.zeros((1, 10, 2)), particles)
    with pytest.raises(TwinloopError, match="beta"):
        infogap_cost(-1.0)
    with pytest.raises(TwinloopError, match="stride"):
        information_gain(r, stride=0)
    with pytest.raises(TwinloopError, match="noise_std"):
        information_gain(r, noise_std=0.0)


@pytest.mark.parametrize("name", ["block-push", "push-t"])
def test_observed_qpos_skips_the_unmeasured_height_and_gives_angles_their_noise(name):
    from twinloop.calib import observed_qpos
    from twinloop.tasks import make_task

    task = make_task(name)
    index, noise = observed_qpos(task, 1e-3, 2e-2)
    # qpos = [pusher x, y, block x, y, z, yaw]: the height is not observed, the yaw is an angle
    np.testing.assert_array_equal(index, [0, 1, 2, 3, 5])
    np.testing.assert_array_equal(noise, [1e-3, 1e-3, 1e-3, 1e-3, 2e-2])
    with pytest.raises(TwinloopError, match="noise"):
        observed_qpos(task, 0.0)
