"""LeRobot interop: datasets exported for LeRobotDataset, and LeRobot-interface policies as proposers.

The test against lerobot itself runs only where a throwaway environment with lerobot 0.4 exists
at ``.lerobot-venv`` (or ``TWINLOOP_LEROBOT_PYTHON``); README "LeRobot" says how to make one.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.data import Dataset, EpisodeRecorder, export_lerobot, load_lerobot
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.run.experiment import run_episodes
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import SimWorld

ROOT = Path(__file__).resolve().parents[1]
LEROBOT_PYTHON = os.environ.get("TWINLOOP_LEROBOT_PYTHON", str(ROOT / ".lerobot-venv" / "bin" / "python"))


@pytest.fixture(scope="module")
def task():
    return make_task("block-push")


def write_dataset(task, root, n=3, T=4, H=3):
    ds = Dataset.create(root, {"fps": 10.0, "task": task.name, "obs_names": list(task.obs_names)})
    rng = np.random.default_rng(0)
    for i in range(n):
        rec = EpisodeRecorder.for_task(task, i)
        for t in range(T):
            rec.add(0.1 * t, rng.normal(size=len(task.obs_names)), rng.normal(size=task.nu),
                    twin_state=np.zeros(task.nstate), cost=float(t), plan=rng.normal(size=(H, task.nu)))
        rec.finish(i % 2 == 0)
        ds.write(rec)
    return ds


def test_refined_plans_round_trip_through_a_dataset(task, tmp_path):
    ds = write_dataset(task, tmp_path / "ds")
    again = Dataset(tmp_path / "ds")
    ep = again.read(1)
    assert ep.plans.shape == (4, 3, task.nu)
    np.testing.assert_array_equal(ep.plans.reshape(4, -1), pq.read_table(ds.path(1)).column("refine.plan").to_pylist())


def test_a_plan_given_at_some_frames_only_is_refused(task):
    rec = EpisodeRecorder.for_task(task, 0)
    rec.add(0.0, np.zeros(len(task.obs_names)), np.zeros(task.nu), plan=np.zeros((2, task.nu)))
    with pytest.raises(TwinloopError, match="plan is missing at frame 1"):
        rec.add(0.1, np.zeros(len(task.obs_names)), np.zeros(task.nu))


def test_exported_lerobot_dataset_round_trips(task, tmp_path):
    ds = write_dataset(task, tmp_path / "ds")
    root = export_lerobot(ds, tmp_path / "lerobot", episodes_per_file=2)
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 3 and info["total_frames"] == 12
    assert info["features"]["refine.plan"]["shape"] == [3 * task.nu]
    assert sorted(p.name for p in (root / "data" / "chunk-000").iterdir()) == ["file-000.parquet", "file-001.parquet"]
    episodes = pq.read_table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    assert [(e["dataset_from_index"], e["dataset_to_index"], e["data/file_index"]) for e in episodes] == [
        (0, 4, 0), (4, 8, 0), (8, 12, 1)]
    stats = json.loads((root / "meta" / "stats.json").read_text())
    assert stats["action"]["count"] == [12] and set(stats["action"]) >= {"min", "max", "mean", "std", "q01", "q99"}
    back = load_lerobot(root, {"plan": "refine.plan"})
    for orig, ep in zip(ds.episodes(), back, strict=True):
        np.testing.assert_array_equal(orig.obs, ep.obs)
        np.testing.assert_array_equal(orig.actions, ep.actions)
        np.testing.assert_array_equal(orig.plans, ep.plans)
        assert orig.success == ep.success


def test_export_refuses_a_folder_that_is_not_empty(task, tmp_path):
    ds = write_dataset(task, tmp_path / "ds", n=1)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(TwinloopError, match="not an empty folder"):
        export_lerobot(ds, tmp_path / "busy", overwrite=True)
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


@pytest.mark.skipif(not Path(LEROBOT_PYTHON).exists(), reason="no lerobot environment (.lerobot-venv); see README")
def test_lerobots_own_dataset_class_loads_an_export(task, tmp_path):
    ds = write_dataset(task, tmp_path / "ds")
    root = export_lerobot(ds, tmp_path / "lerobot")
    script = textwrap.dedent("""
        import sys, json, types, importlib.machinery as m
        # PyPI's torchvision wheels are CUDA builds that cannot load beside a CPU torch; datasets
        # without images never use it, so a stand-in module is enough to import lerobot
        for name in ("torchvision", "torchvision.transforms", "torchvision.io"):
            mod = types.ModuleType(name); mod.__spec__ = m.ModuleSpec(name, None); sys.modules[name] = mod
        sys.modules["torchvision"].transforms = sys.modules["torchvision.transforms"]
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        ds = LeRobotDataset("twinloop/test", root=sys.argv[1], delta_timestamps={"action": [0.0, 0.1]})
        item = ds[5]
        print(json.dumps({"episodes": ds.num_episodes, "frames": ds.num_frames, "fps": ds.fps,
                          "episode": int(item["episode_index"]), "action": item["action"].tolist(),
                          "pad": item["action_is_pad"].tolist(), "plan": list(item["refine.plan"].shape),
                          "task": item["task"]}))
    """)
    res = subprocess.run([LEROBOT_PYTHON, "-c", script, str(root)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert (got["episodes"], got["frames"], got["fps"], got["episode"]) == (3, 12, 10, 1)
    ep = ds.read(1)
    np.testing.assert_allclose(got["action"], ep.actions[1:3], rtol=1e-6)
    assert got["pad"] == [False, False] and got["plan"] == [3 * task.nu] and got["task"] == "block-push"


# -- LeRobot-interface policies as proposers ---------------------------------------------------


class ChunkPolicy:
    """A stand-in with LeRobot's policy interface: moves toward a target, with torch noise."""

    def __init__(self, torch, target, H=4):
        self.torch, self.target, self.H = torch, torch.as_tensor(target, dtype=torch.float32), H
        self.resets = 0
        self.calls = 0

    def reset(self):
        self.resets += 1

    def predict_action_chunk(self, batch):
        self.calls += 1
        pusher = batch["observation.state"][:, 0:2]
        steps = self.torch.linspace(0.25, 1.0, self.H)[None, :, None]
        noise = 0.001 * self.torch.randn(1, self.H, 2)  # LeRobot policies draw from torch's generator
        return pusher[:, None, :] + steps * (self.target - pusher)[:, None, :] + noise

    def select_action(self, batch):
        return self.predict_action_chunk(batch)[:, 0]


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_adapter_drives_a_controller_with_a_lerobot_interface_policy(torch, task):
    from twinloop.policies.lerobot import LeRobotProposer

    policy = ChunkPolicy(torch, [0.05, 0.0])
    proposer = LeRobotProposer(task, policy)
    twin = make_twin("mujoco", task.model, task.param_space())
    refiner = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=8, horizon=0.3))
    world = SimWorld(task)
    base = run_episodes(world, Controller(refiner, proposer, refine=False), [3], max_ticks=6, record=True)[0]
    refined = run_episodes(world, Controller(refiner, proposer), [3], max_ticks=6, record=True)[0]
    assert policy.resets == 2 and policy.calls == 12
    sent = base.recorder.to_table().column("action").to_pylist()
    obs = base.recorder.to_table().column("observation.state").to_pylist()
    # the base controller sends the chunk's first action: a quarter of the way to the target
    np.testing.assert_allclose(sent[0], np.asarray(obs[0][0:2]) + 0.25 * (np.array([0.05, 0.0]) - obs[0][0:2]), atol=0.005)
    assert refined.ticks == 6 and refined.fallbacks == 0


def test_adapter_episodes_repeat_for_a_seed(torch, task):
    from twinloop.policies.lerobot import LeRobotProposer

    proposer = LeRobotProposer(task, ChunkPolicy(torch, [0.05, 0.0]))
    obs = np.full(len(task.obs_names), 0.01)
    proposer.reset(7)
    a = proposer.propose(obs)
    proposer.reset(7)
    np.testing.assert_array_equal(a, proposer.propose(obs))
    assert a.shape == (4, task.nu)


def test_adapter_select_mode_uses_select_action(torch, task):
    from twinloop.policies.lerobot import LeRobotProposer

    proposer = LeRobotProposer(task, ChunkPolicy(torch, [0.05, 0.0]), mode="select",
                               postprocess=lambda a: a + 0.01)
    assert proposer.propose(np.zeros(len(task.obs_names))).shape == (1, task.nu)


def test_adapter_refuses_an_object_without_the_interface(torch, task):
    from twinloop.policies.lerobot import LeRobotProposer

    with pytest.raises(TwinloopError, match="LeRobot's policy interface"):
        LeRobotProposer(task, object())
    with pytest.raises(TwinloopError, match="mode"):
        LeRobotProposer(task, ChunkPolicy(torch, [0, 0]), mode="both")


def test_adapter_refuses_actions_of_the_wrong_shape(torch, task):
    from twinloop.policies.lerobot import LeRobotProposer

    class Wrong(ChunkPolicy):
        def predict_action_chunk(self, batch):
            return self.torch.zeros(1, 4, 3)

    with pytest.raises(TwinloopError, match="expected"):
        LeRobotProposer(task, Wrong(torch, [0, 0])).propose(np.zeros(len(task.obs_names)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
