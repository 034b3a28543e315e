"""Learned twins: the ensemble learns, its rollouts follow the protocol, the hybrid corrects a
twin that is wrong about the world, and both plan in the refiner."""

import numpy as np
import pytest

pytest.importorskip("torch")

from twinloop.calib.windows import record_trajectory  # noqa: E402
from twinloop.control import Refiner, RefinerConfig  # noqa: E402
from twinloop.errors import TwinloopError  # noqa: E402
from twinloop.plan import make_optimizer  # noqa: E402
from twinloop.tasks import make_task  # noqa: E402
from twinloop.twin import make_twin  # noqa: E402
from twinloop.twin.learned import EnsembleConfig, HybridTwin, LearnedTwin  # noqa: E402
from twinloop.worlds import TwinWorld  # noqa: E402

SMALL = EnsembleConfig(members=3, hidden=(64, 64), epochs=150, batch_size=128)


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


@pytest.fixture(scope="module")
def heavy_world(task):
    """Block-push with the block's friction and mass far from the twin's: the plain twin is wrong."""
    space = task.param_space()
    values = space.nominal.copy()
    values[space.names.index("block_friction")] *= 2.5
    values[space.names.index("block_mass")] *= 0.5
    return TwinWorld(task, values)


@pytest.fixture(scope="module")
def data(task, heavy_world):
    return [record_trajectory(heavy_world, task.excitation(s), s, 40) for s in range(16)]


@pytest.fixture(scope="module")
def learned(task, data):
    return LearnedTwin.fit(task.model, data, task.control_period, SMALL)


def _ctrl(task, actions):
    return np.repeat(np.asarray(actions)[None], task.substeps, axis=1)


def test_the_ensembles_training_loss_falls(learned):
    losses = learned.dynamics.losses
    assert len(losses) == SMALL.epochs
    assert losses[-1] < 0.5 * losses[0]


def test_learned_rollouts_have_the_protocol_shapes_members_as_particles(task, learned, data):
    K, ticks = 4, 6
    ctrl = np.repeat(np.stack([data[k].actions[:ticks] for k in range(K)]), task.substeps, axis=1)
    r = learned.rollout(data[0].states[0], ctrl)
    T = ticks * task.substeps
    m = task.model
    assert r.qpos.shape == (SMALL.members, K, T + 1, m.nq) and r.qvel.shape == (SMALL.members, K, T + 1, m.nv)
    assert r.sensordata.shape == (SMALL.members, K, T + 1, m.nsensordata) and r.ok.shape == (SMALL.members, K)
    assert r.uncertainty.shape == (K, T + 1, m.nq) and r.ok.all()
    np.testing.assert_allclose(r.qpos[:, :, 0], np.broadcast_to(data[0].states[0][: m.nq], (SMALL.members, K, m.nq)))
    assert np.all(r.uncertainty[:, 0] < 1e-12) and np.all(r.uncertainty[:, -1].max(axis=-1) > 1e-6)
    with pytest.raises(TwinloopError, match="whole control ticks"):
        learned.rollout(data[0].states[0], ctrl[:, :-1])
    with pytest.raises(TwinloopError, match="no physical parameters"):
        learned.rollout(data[0].states[0], ctrl, task.param_space().nominal[None])


def test_a_saved_learned_twin_reloads_by_backend_name_with_the_same_rollouts(task, learned, data, tmp_path):
    path = learned.save(tmp_path / "learned.pt")
    again = make_twin("learned", task.model, checkpoint=str(path))
    ctrl = _ctrl(task, data[1].actions[:5])
    np.testing.assert_array_equal(again.rollout(data[1].states[0], ctrl).qpos, learned.rollout(data[1].states[0], ctrl).qpos)
    with pytest.raises(TwinloopError, match="not a 'hybrid' twin"):
        make_twin("hybrid", task.model, checkpoint=str(path))


def _one_step_error(task, twin, trajs, params=None):
    """Mean block-position error (m) of one-tick predictions from recorded states (members averaged)."""
    errs = []
    for tr in trajs:
        for k in range(len(tr.actions)):
            r = twin.rollout(tr.states[k], _ctrl(task, tr.actions[k : k + 1]), params)
            errs.append(np.linalg.norm(r.qpos[:, 0, -1, 2:4].mean(axis=0) - tr.states[k + 1][2:4]))
    return float(np.mean(errs))


def test_the_hybrid_reduces_the_one_step_error_where_the_plain_twin_is_wrong(task, heavy_world, data):
    hybrid = HybridTwin.fit(task.model, data, task.control_period, SMALL, param_space=task.param_space())
    held_out = [record_trajectory(heavy_world, task.excitation(s), s, 40) for s in (100, 101)]
    plain = make_twin("mujoco", task.model, task.param_space())
    e_plain, e_hybrid = _one_step_error(task, plain, held_out), _one_step_error(task, hybrid, held_out)
    assert e_hybrid < 0.6 * e_plain, (e_hybrid, e_plain)


def test_the_refiner_plans_in_a_learned_twin_over_its_members(task, learned, heavy_world):
    ref = Refiner(task, learned, make_optimizer("mppi"), RefinerConfig(num_samples=8, horizon=0.3, risk="worst"))
    obs = heavy_world.reset(0)
    res = ref.refine(task.state_from_obs(obs))
    assert res.n_rollouts == SMALL.members * 8 and np.isfinite(res.cost)
    assert res.plan.knots.shape == (ref.spec.n_knots, task.nu)


def test_evaluate_takes_saved_learned_twins_as_worlds_and_as_the_refiners_twin(task, learned, tmp_path):
    from twinloop.run.evaluate import EvaluateConfig, run_evaluation

    path = learned.save(tmp_path / "learned.pt")
    cfg = EvaluateConfig(task="block-push", policies=("scripted", f"scripted+mppi@k=8,backend=learned,twin={path}"),
                         episodes=2, max_ticks=5, twins=("nominal",), models=(f"learned={path}",), n_boot=20,
                         record=False, out=str(tmp_path / "eval"))
    s = run_evaluation(cfg, log=lambda m: None)
    assert set(s["evaluation"]["twins"]) == {"learned", "nominal"}
    assert set(s["per_episode"]) == {"world", "learned", "nominal"}
    assert all(len(v) == 2 for v in s["per_episode"]["learned"].values())
