"""A deformable at another resolution than the world's: the state maps and the coarse twin."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from twinloop.control import RefinerConfig
from twinloop.errors import TwinloopError
from twinloop.run.build import planning_task
from twinloop.run.compare import RunConfig
from twinloop.tasks import make_task
from twinloop.tasks.cloth_fold import fold
from twinloop.tasks.resolution import restate
from twinloop.twin import make_twin

COARSE = {"cloth-fold": {"resolution": 3}, "rope-shape": {"links": 4}}


def scripted_states(task, seed: int, ticks: int) -> list[np.ndarray]:
    """Twin states ``[qpos, qvel, act]`` at each tick of the nominal script in ``task``'s own scene."""
    prop, m = task.default_proposer(), task.model
    d = mujoco.MjData(m)
    s = task.initial_state(np.random.default_rng(seed))
    d.qpos[:], d.qvel[:], d.act[:] = s[: m.nq], s[m.nq : m.nq + m.nv], s[m.nq + m.nv :]
    out = []
    for _ in range(ticks):
        out.append(np.concatenate([d.qpos, d.qvel, d.act]))
        d.ctrl[:] = prop.propose(None, out[-1])[0]
        for _ in range(round(task.control_period / m.opt.timestep)):
            mujoco.mj_step(m, d)
    return out


@pytest.mark.parametrize("name", list(COARSE))
def test_coarse_task_keeps_the_object_goal_and_observation(name):
    fine, coarse = make_task(name), make_task(name, **COARSE[name])
    assert coarse.model.nq < fine.model.nq
    assert coarse.obs_names == fine.obs_names
    np.testing.assert_allclose(coarse.goal, fine.goal, atol=1e-12)
    mass = lambda t: t.model.body_mass[2:].sum()  # noqa: E731 - the object: every body but world and gripper
    assert mass(coarse) == pytest.approx(mass(fine), rel=1e-6)
    start = fine.initial_state(np.random.default_rng(0))
    assert coarse.error(restate(start, fine, coarse)[: coarse.model.nq]) == pytest.approx(
        fine.error(start[: fine.model.nq]), abs=0.003)


def test_a_flat_and_a_folded_towel_map_to_three_by_three_and_back_exactly():
    fine, coarse = make_task("cloth-fold"), make_task("cloth-fold", resolution=3)
    for shape in (fine.rest, fold(fine.rest) + [0, 0, 0.0]):
        q = np.zeros(fine.model.nq)
        q[fine._vq[:, None] + np.arange(3)] = shape - fine.rest
        q[0:3] = [0.0, 0.0, 0.2]
        state = np.concatenate([q, np.zeros(fine.model.nv + fine.model.na)])
        back = restate(restate(state, fine, coarse), coarse, fine)
        np.testing.assert_allclose(fine.vertices(back[: fine.model.nq]), shape, atol=1.5e-3)


@pytest.mark.parametrize("name, ticks, mean_error", [("cloth-fold", 8, 0.005), ("rope-shape", 16, 0.006)])
def test_states_round_trip_through_the_coarse_mesh_within_mm(name, ticks, mean_error):
    # along the nominal script: flat, pinched, lifted and swung, laid down. The rope's 2 s swing
    # bends it hardest mid-swing: measured up to 5.6 mm mean, 14 mm at one point (4.5 and 12 mm
    # along the 0.8 s swing); laid down 4.3 mm
    fine, coarse = make_task(name), make_task(name, **COARSE[name])
    nq = fine.model.nq
    for state in scripted_states(fine, 1, ticks):
        back = restate(restate(state, fine, coarse), coarse, fine)
        err = np.linalg.norm(fine.keypoint_positions(back[:nq]) - fine.keypoint_positions(state[:nq]), axis=-1)
        assert err.mean() < mean_error and err.max() < 0.015
        np.testing.assert_allclose(back[:3], state[:3])  # the gripper as observed


@pytest.mark.parametrize("name, tolerance", [("cloth-fold", 0.04), ("rope-shape", 0.015)])
def test_coarse_twin_rolls_the_nominal_script_out_near_the_fine_twin(name, tolerance):
    # the nominal script's whole episode of controls (closed loop in the world's mesh), open loop
    # in both twins: the coarse twin's keypoints end within ``tolerance`` (mean, m) of the fine
    # twin's on each of three starts, under a third of how far they moved (measured: towel
    # 3x3 0.7-3.5 cm of 11 cm, rope of 4 links 0.9-1.4 cm of 11 cm)
    fine, coarse = make_task(name), make_task(name, **COARSE[name])
    nq, steps = fine.model.nq, round(fine.control_period / fine.model.opt.timestep)
    for seed in range(3):
        states = scripted_states(fine, seed, fine.max_ticks)
        prop = fine.default_proposer()
        u = np.repeat([prop.propose(None, s)[0] for s in states], steps, axis=0)[None]
        qf = make_twin("mujoco", fine.model, nthread=1).rollout(states[0], u).qpos[0, 0, -1]
        qc = make_twin("mujoco", coarse.model, nthread=1).rollout(restate(states[0], fine, coarse), u).qpos[0, 0, -1]
        kf, kc = fine.keypoint_positions(qf), coarse.keypoint_positions(qc)
        moved = np.linalg.norm(kf - fine.keypoint_positions(states[0][:nq]), axis=-1).mean()
        gap = np.linalg.norm(kf - kc, axis=-1).mean()
        assert gap < tolerance and gap < moved / 3


def test_resolution_outside_the_tasks_choices_is_refused_by_name():
    with pytest.raises(TwinloopError, match="resolution must be one of"):
        make_task("cloth-fold", resolution=4)
    with pytest.raises(TwinloopError, match="resolution must be one of"):
        make_task("rope-shape", links=5)
    with pytest.raises(TwinloopError, match="no deformable"):
        planning_task(make_task("push-t"), RunConfig(task="push-t", twin_resolution=3))


def test_twin_resolution_refuses_particles_and_posteriors():
    cfg = RunConfig(task="rope-shape", twin_resolution=4, particles=4)
    with pytest.raises(TwinloopError, match="twin_resolution=4.*particles"):
        planning_task(make_task("rope-shape"), cfg)
    assert planning_task(make_task("rope-shape"), RunConfig(task="rope-shape", twin_resolution=4)).links == 4


@pytest.mark.parametrize("name", list(COARSE))
def test_a_subclass_plans_with_its_own_variant_at_another_resolution(name):
    """A user's variant of a deformable task (here: another script) keeps its class, weights and
    script in the coarse twin the refined controller plans with, not the registered task's."""
    from dataclasses import replace

    base = type(make_task(name))

    class Slow(base):
        def default_proposer(self):
            prop = super().default_proposer()
            prop.config = replace(prop.config, arc_time=2.0)
            return prop

    fine = Slow(weights={"hold": 3.0})
    coarse = planning_task(fine, RunConfig(task=name, twin_resolution=next(iter(COARSE[name].values()))))
    assert type(coarse) is Slow and coarse.model.nq < fine.model.nq
    assert coarse._weight_overrides == {"hold": 3.0}
    assert coarse.default_proposer().config.arc_time == 2.0


def test_a_run_plans_in_the_coarse_twin_and_is_judged_in_the_worlds_mesh():
    from twinloop.run.build import controller_in_world
    from twinloop.run.experiment import run_episode

    cfg = RunConfig(task="rope-shape", twin_resolution=4, episodes=1, refiner=RefinerConfig(num_samples=8, horizon=0.4))
    world, ctl = controller_in_world(cfg, "refined")
    assert ctl.task.links == 4 and ctl.refiner.twin.model.nq == ctl.task.model.nq < world.task.model.nq
    r = run_episode(world, ctl, 3, max_ticks=2, record=False)
    assert r.ticks == 2 and r.qpos.shape[1] == world.task.model.nq
    assert r.final_error == pytest.approx(world.task.error(r.qpos[-1]))
    _, base = controller_in_world(cfg, "base")
    assert base.task.model.nq == world.task.model.nq  # the base row plans nothing: the world's mesh


def test_the_refined_controller_in_a_coarse_twin_proposes_the_base_controllers_actions():
    # planned in a rope of 4 links, the controller estimates the twin's state; its base (what it
    # rehearses, and sends where the base wins) is the base controller's action, tick by tick,
    # where the swing read from the coarse estimate is off by a little (enough to end a marginal
    # episode otherwise: a rope laid at the success threshold)
    from twinloop.policies import make_proposer
    from twinloop.run.build import controller_in_world

    cfg = RunConfig(task="rope-shape", twin_resolution=4, episodes=1, refiner=RefinerConfig(num_samples=8, horizon=0.4))
    world, ctl = controller_in_world(cfg, "refined")
    _, base = controller_in_world(cfg, "base")
    coarse_script = make_proposer(ctl.task, "scripted")
    obs = world.reset(5)
    base.reset(5)
    ctl.reset(5)
    gaps = []
    for _ in range(8):
        a = base.act(obs)
        state = ctl.estimator.estimate(obs)
        assert np.array_equal(ctl.refiner.spec.bound(ctl.proposer.propose(obs, state)[0]), a)
        gaps.append(np.abs(ctl.refiner.spec.bound(coarse_script.propose(obs, state)[0]) - a).max())
        obs, _ = world.step(a)
    assert max(gaps) > 1e-5  # the script on the coarse estimate: what the controller proposed before


def test_over_worlds_every_episodes_world_keeps_the_worlds_mesh():
    from twinloop.run.build import build

    cfg = RunConfig(task="rope-shape", twin_resolution=4, episodes=2, world_per_episode=True,
                    refiner=RefinerConfig(num_samples=8, horizon=0.4))
    world_task, world, _, refiner = build(cfg, check_twin=False)
    fine = world_task.model.nq
    assert refiner.task.model.nq < fine
    world.reset(world.seed + 1)  # a new draw: built after the planning task was chosen
    assert world.world.model.nq == world.world.task.model.nq == fine


def test_a_world_distribution_refuses_a_draw_of_another_scene():
    from twinloop.worlds import PerEpisodeWorld, make_world

    fine, coarse = make_task("rope-shape"), make_task("rope-shape", links=4)
    world = PerEpisodeWorld(lambda s: make_world(fine if s == 0 else coarse, "shifted", seed=s), 0)
    with pytest.raises(TwinloopError, match="another task or scene"):
        world.reset(1)
