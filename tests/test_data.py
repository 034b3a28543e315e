"""Specification of twinloop.data: recording episodes, LeRobot-layout datasets, foreign import."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twinloop.control import TickInfo
from twinloop.data import Dataset, EpisodeRecorder, load_lerobot
from twinloop.data import dataset as dataset_module
from twinloop.errors import TwinloopError

NQ, NV, NOBS, NU = 3, 3, 4, 2
INFO = {"fps": 10, "task": "block-push", "world": "shifted(friction=0.3)", "seed": 7,
        "controller": "mppi", "obs_names": [f"o{i}" for i in range(NOBS)],
        "param_names": ["block_friction", "block_mass"]}


def record(ep=0, T=6, seed=0, world=True, success=True) -> tuple[EpisodeRecorder, dict]:
    """A recorder with random frames (NaNs in costs and refine fields) and the raw inputs."""
    rng = np.random.default_rng(seed)
    raw = {"t": np.arange(T) * 0.1, "obs": rng.normal(size=(T, NOBS)), "act": rng.normal(size=(T, NU)),
           "state": rng.normal(size=(T, NQ + NV)), "wq": rng.normal(size=(T, NQ)),
           "wv": rng.normal(size=(T, NV)), "cost": rng.uniform(size=T)}
    raw["cost"][0] = np.nan
    rec = EpisodeRecorder(ep, nq=NQ, nv=NV)
    for k in range(T):
        tick = None if k == 0 else TickInfo(action=raw["act"][k], fallback=k == 2, cost=float(k),
                                            prior_cost=np.nan if k == 3 else 2.0 * k, iterations=k,
                                            n_unstable=k % 2, seconds=0.01 * k)
        rec.add(raw["t"][k], raw["obs"][k], raw["act"][k], twin_state=raw["state"][k],
                world_qpos=raw["wq"][k] if world else None, world_qvel=raw["wv"][k] if world else None,
                cost=raw["cost"][k], tick=tick)
    rec.finish(success)
    return rec, raw


@pytest.fixture
def ds(tmp_path):
    return Dataset.create(tmp_path / "ds", INFO)


# -- recording and reading back ------------------------------------------------------------------


def test_recorded_episode_reads_back_identical(ds):
    rec, raw = record(T=6)
    ds.write(rec)
    ep = Dataset(ds.root).read(0)
    np.testing.assert_array_equal(ep.obs, raw["obs"])
    np.testing.assert_array_equal(ep.actions, raw["act"])
    np.testing.assert_array_equal(ep.timestamps, raw["t"])
    np.testing.assert_array_equal(ep.qpos, raw["state"][:, :NQ])
    np.testing.assert_array_equal(ep.qvel, raw["state"][:, NQ:])
    np.testing.assert_array_equal(ep.world_qpos, raw["wq"])
    np.testing.assert_array_equal(ep.world_qvel, raw["wv"])
    np.testing.assert_array_equal(ep.costs, raw["cost"])  # NaN compares equal here
    assert ep.success is True and len(ep) == 6 and ep.episode_index == 0


def test_refine_statistics_read_back_with_types_and_nans(ds):
    rec, _ = record(T=5)
    ds.write(rec)
    r = ds.read(0).refine
    np.testing.assert_array_equal(r["cost"], [np.nan, 1, 2, 3, 4])
    np.testing.assert_array_equal(r["prior_cost"], [np.nan, 2, 4, np.nan, 8])
    np.testing.assert_array_equal(r["iterations"], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(r["n_unstable"], [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(r["fallback"], [False, False, True, False, False])
    np.testing.assert_array_equal(r["seconds"], [np.nan, 0.01, 0.02, 0.03, 0.04])
    assert r["iterations"].dtype == np.int64 and r["fallback"].dtype == bool


def test_episode_without_world_state_reads_back_none_and_has_no_world_columns(ds):
    rec, _ = record(world=False)
    path = ds.write(rec)
    ep = ds.read(0)
    assert ep.world_qpos is None and ep.world_qvel is None
    assert "world.qpos" not in pq.read_schema(path).names


def test_done_and_success_are_marked_on_the_last_frame_only():
    rec, _ = record(T=4, success=False)
    t = rec.to_table()
    assert t.column("next.done").to_pylist() == [False, False, False, True]
    assert t.column("next.success").to_pylist() == [False] * 4
    rec, _ = record(T=4, success=True)
    assert rec.to_table().column("next.success").to_pylist() == [False, False, False, True]


def test_reward_is_negative_cost():
    rec, raw = record(T=5)
    np.testing.assert_array_equal(rec.to_table().column("next.reward").to_numpy(), -raw["cost"])


def test_twin_state_as_qpos_qvel_pair_needs_no_sizes():
    rec = EpisodeRecorder(0)
    rec.add(0.0, [1.0], [0.0], twin_state=(np.array([1.0, 2.0]), np.array([3.0])))
    t = rec.to_table()
    assert t.column("twin.qpos").to_pylist() == [[1.0, 2.0]]
    assert t.column("twin.qvel").to_pylist() == [[3.0]]


def test_flat_twin_state_without_sizes_is_rejected():
    with pytest.raises(TwinloopError, match="nq and nv"):
        EpisodeRecorder(0).add(0.0, [1.0], [0.0], twin_state=np.zeros(4))


def test_optional_field_given_at_some_frames_only_is_rejected():
    rec = EpisodeRecorder(0)
    rec.add(0.0, [1.0], [0.0], world_qpos=[0.0])
    with pytest.raises(TwinloopError, match="world_qpos is missing at frame 1"):
        rec.add(0.1, [1.0], [0.0])
    assert len(rec) == 1  # the rejected frame left nothing behind


def test_observation_length_change_is_rejected():
    rec = EpisodeRecorder(0)
    rec.add(0.0, [1.0, 2.0], [0.0])
    with pytest.raises(TwinloopError, match="obs has length 3 at frame 1 but 2"):
        rec.add(0.1, [1.0, 2.0, 3.0], [0.0])


def test_adding_after_finish_and_finishing_empty_are_rejected():
    rec, _ = record(T=2)
    with pytest.raises(TwinloopError, match="finished"):
        rec.add(1.0, np.zeros(NOBS), np.zeros(NU))
    with pytest.raises(TwinloopError, match="no frames"):
        EpisodeRecorder(1).finish(True)


# -- dataset layout ----------------------------------------------------------------------------


def test_dataset_folder_follows_lerobot_v21_layout(ds):
    ds.write(record(ep=0, T=6)[0])
    ds.write(record(ep=1, T=4, seed=1, success=False)[0])
    root = ds.root
    assert (root / "data/chunk-000/episode_000000.parquet").is_file()
    assert (root / "data/chunk-000/episode_000001.parquet").is_file()
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["fps"] == 10
    assert (info["total_episodes"], info["total_frames"], info["total_chunks"]) == (2, 10, 1)
    assert info["features"]["observation.state"] == {"dtype": "float64", "shape": [NOBS], "names": INFO["obs_names"]}
    assert info["features"]["action"]["shape"] == [NU]
    assert info["features"]["next.done"]["dtype"] == "bool"
    assert info["twinloop"]["world"] == INFO["world"] and info["twinloop"]["param_names"] == INFO["param_names"]
    lines = [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().splitlines()]
    assert [(e["episode_index"], e["length"], e["success"]) for e in lines] == [(0, 6, True), (1, 4, False)]
    assert json.loads((root / "meta/tasks.jsonl").read_text()) == {"task_index": 0, "task": "block-push"}
    stats = [json.loads(x) for x in (root / "meta/episodes_stats.jsonl").read_text().splitlines()]
    assert stats[1]["stats"]["action"]["count"] == [4]


def test_global_index_continues_across_episodes(ds):
    ds.write(record(ep=0, T=6)[0])
    path = ds.write(record(ep=1, T=4, seed=1)[0])
    assert pq.read_table(path).column("index").to_pylist() == [6, 7, 8, 9]


def test_dataset_reopens_with_its_episodes(ds):
    ds.write(record(ep=0)[0])
    again = Dataset(ds.root)
    assert len(again) == 1 and again.info["twinloop"]["seed"] == 7
    assert [e.episode_index for e in again.episodes()] == [0]


def test_crash_after_temp_file_is_written_leaves_no_partial_file_and_keeps_earlier_episodes(ds, monkeypatch):
    ds.write(record(ep=0)[0])
    real = pq.write_table

    def write_then_crash(table, where, *a, **kw):
        real(table, where, *a, **kw)
        raise OSError("disk yanked")

    monkeypatch.setattr(dataset_module.pq, "write_table", write_then_crash)
    with pytest.raises(OSError, match="disk yanked"):
        ds.write(record(ep=1, seed=1)[0])
    monkeypatch.undo()
    chunk = ds.root / "data/chunk-000"
    assert sorted(p.name for p in chunk.iterdir()) == ["episode_000000.parquet"]  # no temp file either
    reopened = Dataset(ds.root)
    assert reopened.indices == [0] and reopened.info["total_frames"] == 6
    np.testing.assert_array_equal(reopened.read(0).obs, record(ep=0)[1]["obs"])
    reopened.write(record(ep=1, seed=1)[0])  # and the dataset still takes new episodes
    assert reopened.indices == [0, 1]


def test_writing_an_existing_episode_index_is_rejected(ds):
    ds.write(record(ep=0)[0])
    with pytest.raises(TwinloopError, match="episode 0 is already"):
        ds.write(record(ep=0, seed=1)[0])


def test_episode_with_different_columns_is_rejected(ds):
    ds.write(record(ep=0)[0])
    with pytest.raises(TwinloopError, match="world.qpos"):
        ds.write(record(ep=1, world=False)[0])


def test_create_needs_fps_and_refuses_an_existing_dataset(tmp_path):
    with pytest.raises(TwinloopError, match="fps"):
        Dataset.create(tmp_path / "a", {"task": "x"})
    Dataset.create(tmp_path / "b", INFO)
    with pytest.raises(TwinloopError, match="already exists"):
        Dataset.create(tmp_path / "b", INFO)
    assert len(Dataset.create(tmp_path / "b", INFO, mode="resume")) == 0


def test_opening_a_folder_without_a_dataset_fails_clearly(tmp_path):
    with pytest.raises(TwinloopError, match="not a dataset"):
        Dataset(tmp_path)


# -- split ---------------------------------------------------------------------------------------


def test_split_is_by_episode_seeded_and_disjoint(ds):
    for i in range(10):
        ds.write(record(ep=i, T=2, seed=i)[0])
    train, hold = ds.split(0.3, seed=1)
    assert len(hold) == 3 and sorted(train + hold) == list(range(10))
    assert (train, hold) == ds.split(0.3, seed=1)
    assert any(ds.split(0.3, seed=s)[1] != hold for s in range(2, 6))


def test_split_rejects_fractions_that_leave_no_training_episodes(ds):
    ds.write(record(ep=0, T=2)[0])
    with pytest.raises(TwinloopError, match="no training"):
        ds.split(0.5)
    with pytest.raises(TwinloopError, match="holdout_fraction"):
        ds.split(1.0)


# -- foreign LeRobot data ----------------------------------------------------------------------


def lerobot_file(path, episodes=(3, 4), T=5):
    """A LeRobot v3-style file: several episodes, float32 vectors, extra columns."""
    rows = {"observation.state": [], "observation.environment_state": [], "action": [],
            "timestamp": [], "episode_index": [], "frame_index": []}
    for ep in episodes:
        for k in range(T):
            rows["observation.state"].append([ep + 0.5, k + 0.25])
            rows["observation.environment_state"].append([ep, k, 0.0])
            rows["action"].append([k * 0.5])
            rows["timestamp"].append(k / 10)
            rows["episode_index"].append(ep)
            rows["frame_index"].append(k)
    f32 = pa.list_(pa.float32())
    table = pa.table({"observation.state": pa.array(rows["observation.state"], f32),
                      "observation.environment_state": pa.array(rows["observation.environment_state"], f32),
                      "action": pa.array(rows["action"], f32),
                      "timestamp": pa.array(rows["timestamp"], pa.float32()),
                      "episode_index": rows["episode_index"], "frame_index": rows["frame_index"]})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def test_load_lerobot_with_a_column_map_splits_episodes_and_maps_fields(tmp_path):
    f = lerobot_file(tmp_path / "ext/data/chunk-000/file-000.parquet")
    eps = load_lerobot(tmp_path / "ext", {"qpos": "observation.environment_state"})
    assert [e.episode_index for e in eps] == [3, 4]
    e = eps[1]
    np.testing.assert_array_equal(e.obs, [[4.5, k + 0.25] for k in range(5)])
    np.testing.assert_array_equal(e.qpos, [[4, k, 0] for k in range(5)])
    np.testing.assert_allclose(e.timestamps, np.arange(5) / 10, rtol=1e-6)
    assert e.actions.shape == (5, 1) and e.success is None and np.isnan(e.costs).all()
    assert [x.episode_index for x in load_lerobot(f, {"qpos": "observation.environment_state"})] == [3, 4]


def test_load_lerobot_wrong_column_map_names_the_missing_column(tmp_path):
    f = lerobot_file(tmp_path / "x.parquet")
    with pytest.raises(TwinloopError, match="'observation.qpos' \\(mapped from 'qpos'\\) not found"):
        load_lerobot(f, {"qpos": "observation.qpos"})
    with pytest.raises(TwinloopError, match="unknown field"):
        load_lerobot(f, {"state": "observation.state"})


def test_load_lerobot_without_timestamps_uses_fps_or_fails_clearly(tmp_path):
    f = lerobot_file(tmp_path / "x.parquet")
    eps = load_lerobot(f, {"timestamp": None}, fps=20)
    np.testing.assert_allclose(eps[0].timestamps, np.arange(5) / 20)
    with pytest.raises(TwinloopError, match="fps"):
        load_lerobot(f, {"timestamp": None})


def test_load_lerobot_reads_a_twinloop_dataset_with_default_columns(ds):
    rec, raw = record(ep=0)
    ds.write(rec)
    (ep,) = load_lerobot(ds.root)
    np.testing.assert_array_equal(ep.obs, raw["obs"])
    np.testing.assert_array_equal(ep.costs, raw["cost"])  # from next.reward
    assert ep.success is True
