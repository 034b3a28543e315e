"""Worlds that see: rendering per seed, the appearance shift, what a camera world hides."""

import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.run.compare import RunConfig
from twinloop.tasks import make_task
from twinloop.worlds import ShiftedWorld
from twinloop.worlds.camera import CameraObs, CameraSpec, CameraWorld

SMALL = (CameraSpec(size=32),)


@pytest.fixture(scope="module")
def task():
    return make_task("push-t")


def images(world, seed, ticks=2):
    out = [world.reset(seed)]
    for _ in range(ticks):
        out.append(world.step(np.zeros(2))[0])
    return np.stack([o.images["top"] for o in out])


def test_rendering_is_deterministic_per_seed(task):
    a = images(CameraWorld(ShiftedWorld(task, 2, 3), 2, 3, SMALL), 5)
    b = images(CameraWorld(ShiftedWorld(task, 2, 3), 2, 3, SMALL), 5)
    other = images(CameraWorld(ShiftedWorld(task, 2, 4), 2, 4, SMALL), 5)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, other)


def test_appearance_shift_changes_images_not_physics(task):
    plain, shifted = CameraWorld(ShiftedWorld(task, 2, 3), 0, 3, SMALL), CameraWorld(ShiftedWorld(task, 2, 3), 3, 3, SMALL)
    for w in (plain, shifted):
        w.reset(7)
    for k in range(3):
        a = np.array([0.05 * k, -0.02 * k])
        (oa, ia), (ob, ib) = plain.step(a), shifted.step(a)
        assert np.array_equal(ia["qpos"], ib["qpos"]) and np.array_equal(ia["qvel"], ib["qvel"])
        assert np.array_equal(np.asarray(oa), np.asarray(ob), equal_nan=True)
    assert np.abs(oa.images["top"].astype(int) - ob.images["top"].astype(int)).mean() > 2.0


def test_camera_world_hides_the_seen_entries_and_keeps_the_robots(task):
    world = CameraWorld(ShiftedWorld(task, 0, 0), 0, 0, SMALL)
    obs = world.reset(1)
    truth = task.obs_from_data(world.world.model, world.world.data)
    names = list(task.obs_names)
    hidden = [names.index(n) for n in ("block_x", "block_y", "block_yaw", "block_vx", "block_vy", "block_wz")]
    robot = [i for i in range(len(names)) if i not in hidden]
    assert isinstance(obs, CameraObs) and obs.images["top"].shape == (32, 32, 3)
    assert np.isnan(obs[hidden]).all()
    assert np.allclose(obs[robot], truth[robot])


def test_a_task_no_camera_sees_is_refused():
    with pytest.raises(TwinloopError, match="nothing a camera sees"):
        CameraWorld(ShiftedWorld(make_task("pivot"), 0, 0), 0, 0)


def test_rgb_reads_the_tasks_shipped_model_unless_given_one_and_a_task_without_one_is_told_how():
    from twinloop.run.build import camera_estimator

    cfg = RunConfig(task="push-t", observe="rgb")  # the shipped push-t model by default
    assert camera_estimator(cfg, make_task("push-t")).perception.meta.task == "push-t"
    with pytest.raises(TwinloopError, match="ships no perception model.*perception train --task block-push"):
        camera_estimator(RunConfig(task="block-push", observe="rgb"), make_task("block-push"))
    with pytest.raises(TwinloopError, match="observe"):
        RunConfig(task="push-t", perception="x.pt")
    with pytest.raises(TwinloopError, match="observe"):
        RunConfig(task="push-t", observe="depth", perception="x.pt")


def test_a_camera_run_builds_with_the_shipped_model_when_none_is_named():
    from twinloop.run.build import build

    task, world, _, _ = build(RunConfig(task="push-t", observe="rgb", episodes=1, record=False, video=False))
    try:
        assert isinstance(world, CameraWorld) and task.name == "push-t"
    finally:
        world.close()
    with pytest.raises(TwinloopError, match="nothing a camera sees|ships no perception model"):
        build(RunConfig(task="block-push", observe="rgb", episodes=1, record=False, video=False))


def test_camera_video_frames_show_camera_twin_and_world_side_by_side(task):
    from twinloop.viz.video import camera_beside

    world = CameraWorld(ShiftedWorld(task, 0, 0), 0, 0, SMALL)
    obs = world.reset(2)
    q = world.world.data.qpos.copy()
    views = [np.zeros((64, 64, 3), np.uint8)] * 2
    frames = list(camera_beside(iter(views), [obs.images["top"]], [q], task, size=64))
    assert len(frames) == 2 and frames[0].shape == (64, 192, 3)
    assert np.array_equal(frames[0][:, :64], np.kron(obs.images["top"], np.ones((2, 2, 1), np.uint8)))
    assert frames[0][:, 64:128].std() > 0  # the twin's reconstruction, rendered


def test_a_camera_run_planning_a_coarser_rope_records_its_episodes(tmp_path):
    """rope-shape plans in a 4-link twin by default; from images its refined episodes are recorded
    with the world rope's state (the completed observation mapped by the world's task)."""
    from typer.testing import CliRunner

    from twinloop.cli import app
    from twinloop.data.dataset import Dataset

    res = CliRunner().invoke(app, ["run", "--task", "rope-shape", "--observe", "rgb", "--episodes", "1",
                                   "--max-ticks", "3", "--no-video", "--record", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    ds = Dataset(tmp_path / "out" / "episodes" / "refined")
    nq = make_task("rope-shape").model.nq
    ep = ds.read(ds.indices[0])
    assert ep.qpos.shape == (3, nq) and np.isfinite(ep.qpos).all()
