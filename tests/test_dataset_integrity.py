"""Datasets survive a kill and say what is wrong with them: one commit point per episode, per-file
checksums and row counts verified on read, `twinloop dataset check`, and SIGKILL at random points."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.data import Dataset, check
from twinloop.errors import TwinloopError

# The writer a child process runs, and the episodes it writes (a function of the index alone).
# KILL_AT=k makes it SIGKILL itself just before its k-th commit-step syscall (fsync, rename,
# symlink); COUNT=1 prints how many there were.
WRITER = """
import os, signal, sys
import numpy as np
from twinloop.data import Dataset, EpisodeRecorder


def episode(i):
    rng = np.random.default_rng(i)
    rec = EpisodeRecorder(i)
    for k in range(3 + i % 5):
        rec.add(0.1 * k, rng.normal(size=4), rng.normal(size=2),
                twin_state=(rng.normal(size=3), rng.normal(size=3)), cost=float(rng.uniform()))
    rec.finish(bool(i % 2))
    return rec


def write_all(root, n):
    ds = Dataset.create(root, {"fps": 10, "task": "kill-test"}, mode="resume")
    for i in range(len(ds), n):
        ds.write(episode(i))


if __name__ == "__main__":
    count, kill_at = [0], int(os.environ.get("KILL_AT", "0"))

    def hook(fn):
        def wrapped(*a, **k):
            count[0] += 1
            if count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*a, **k)
        return wrapped

    os.replace, os.symlink, os.fsync = hook(os.replace), hook(os.symlink), hook(os.fsync)
    print("ready", flush=True)
    write_all(sys.argv[1], int(sys.argv[2]))
    if os.environ.get("COUNT"):
        print(count[0], flush=True)
"""
_ns: dict = {}
exec(WRITER.split('if __name__ == "__main__":')[0], _ns)
episode, write_all = _ns["episode"], _ns["write_all"]
N = 4  # episodes each writer writes


@pytest.fixture(scope="module")
def writer_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("writer") / "writer.py"
    path.write_text(WRITER)
    return path


def _child(script, root, env=None):
    return subprocess.Popen([sys.executable, str(script), str(root), str(N)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def _assert_exact_or_refused(root) -> int:
    """The dataset at ``root`` reads back exactly what was written (a prefix of the episodes,
    global index without gaps or duplicates), or it is refused because nothing was committed."""
    try:
        ds = Dataset(root)
    except TwinloopError as exc:
        assert "not a dataset" in str(exc)
        return -1
    k = len(ds)
    assert ds.indices == list(range(k))
    index = []
    for i in range(k):
        got, want = ds.read(i), episode(i)
        table = want.to_table()
        np.testing.assert_array_equal(got.obs, np.stack(table.column("observation.state").to_pylist()))
        np.testing.assert_array_equal(got.actions, np.stack(table.column("action").to_pylist()))
        np.testing.assert_array_equal(got.costs, table.column("cost").to_numpy())
        assert got.success == bool(i % 2)
        index += pq.read_table(ds.path(i)).column("index").to_pylist()
    assert index == list(range(len(index))) and ds.info["total_frames"] == len(index)
    assert check(root).ok
    return k


def _resume_and_assert_complete(root) -> None:
    write_all(root, N)
    assert _assert_exact_or_refused(root) == N


def test_a_writer_killed_at_every_commit_step_leaves_a_dataset_that_reads_back_exactly(writer_script, tmp_path):
    full = _child(writer_script, tmp_path / "full", {"COUNT": "1"})
    out, err = full.communicate(timeout=60)
    assert full.returncode == 0, err
    steps = int(out.split()[-1])
    # creating the dataset commits in 8 steps (4 files, their folder, the link, its rename, the
    # root), each episode in 10 (its file and rename, then the same 8): kill before the link and
    # the rename of the create, and before every step of the first episode (12 kills; the
    # fuzz campaign in benchmarks/ kills before every step of every episode)
    assert steps == 8 + 10 * N
    chosen = [6, 7, *range(9, 19)]
    outcomes = []
    for k in chosen:
        root = tmp_path / f"kill_{k}"
        p = _child(writer_script, root, {"KILL_AT": str(k)})
        p.communicate(timeout=60)
        assert p.returncode == -signal.SIGKILL
        outcomes.append(_assert_exact_or_refused(root))
        _resume_and_assert_complete(root)
    assert -1 in outcomes and max(outcomes) >= 1  # kills before the first commit and after later ones


def test_a_writer_killed_at_random_instants_leaves_a_dataset_that_reads_back_exactly(writer_script, tmp_path):
    t0 = time.perf_counter()
    p = _child(writer_script, tmp_path / "timing")
    p.stdout.readline()
    t_ready = time.perf_counter()
    p.communicate(timeout=60)
    t_write = time.perf_counter() - t_ready
    assert p.returncode == 0 and t_ready - t0 < 60
    rng = np.random.default_rng(1)
    for j in range(8):  # with the 12 above: 20 kills
        root = tmp_path / f"random_{j}"
        p = _child(writer_script, root)
        p.stdout.readline()  # imported: now writing
        time.sleep(rng.uniform(0, t_write))
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
        _assert_exact_or_refused(root)
        _resume_and_assert_complete(root)


# -- verification: what is wrong is named ---------------------------------------------------------


@pytest.fixture
def ds(tmp_path):
    root = tmp_path / "ds"
    write_all(root, 3)
    return Dataset(root)


def test_swapped_episode_files_are_named(ds):
    a, b = ds.path(0), ds.path(1)
    tmp = a.with_suffix(".x")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    with pytest.raises(TwinloopError, match="episode_000000.parquet holds episode 1's file, not episode 0's"):
        ds.read(0)


def test_dropped_rows_are_named(ds):
    table = pq.read_table(ds.path(1))
    pq.write_table(table.slice(0, table.num_rows - 1), ds.path(1))
    with pytest.raises(TwinloopError, match="episode_000001.parquet has 3 rows but meta/episodes.jsonl says 4"):
        ds.read(1)


def test_a_flipped_byte_is_named(ds):
    path = ds.path(2)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(TwinloopError, match=r"episode_000002.parquet (does not match its checksum|is not a readable)"):
        ds.read(2)


@pytest.mark.parametrize("verify", [True, False])
def test_a_column_name_broken_into_invalid_text_is_named_as_corruption(ds, verify):
    # found by Hypothesis: a flipped byte inside a column name in the file's footer made the
    # schema undecodable, and reading raised UnicodeDecodeError instead of naming the file
    path = ds.path(1)
    data = bytearray(path.read_bytes())
    at = data.index(b"episode_index")  # its first copy: the footer's schema (the ones after it are
    data[at + 1] = 0xEF  # column-chunk paths); a lone UTF-8 lead byte
    path.write_bytes(bytes(data))
    with pytest.raises(TwinloopError, match=r"episode_000001.parquet (does not match its checksum|is not a readable)"):
        ds.read(1, verify=verify)


def test_a_missing_episodes_jsonl_is_named_not_read_as_empty(ds):
    (ds.root / "meta" / "episodes.jsonl").unlink()
    with pytest.raises(TwinloopError, match="episodes.jsonl is missing .*lists 3 episodes"):
        Dataset(ds.root)


def test_edited_metadata_is_named(ds):
    path = ds.root / "meta" / "episodes.jsonl"
    path.write_text(path.read_text().replace('"success": false', '"success": true', 1))
    with pytest.raises(TwinloopError, match="episodes.jsonl does not match its checksum in meta/info.json"):
        Dataset(ds.root)


def test_totals_that_disagree_with_the_episode_list_are_named(ds):
    path = ds.root / "meta" / "info.json"
    info = json.loads(path.read_text())
    info["total_frames"] += 5
    path.write_text(json.dumps(info))
    with pytest.raises(TwinloopError, match="says 3 episodes and 17 frames but .* lists 3 episodes and 12 frames"):
        Dataset(ds.root)


def test_a_missing_episode_file_is_named(ds):
    ds.path(1).unlink()
    with pytest.raises(TwinloopError, match="episode 1's file data/chunk-000/episode_000001.parquet is missing"):
        ds.read(1)


def test_check_lists_every_problem_and_notes_a_dead_writers_leftovers(ds):
    assert check(ds.root).ok
    shutil.copy(ds.path(0), ds.path(0).with_name("episode_000007.parquet"))  # unlisted: an uncommitted write
    (ds.root / ".twinloop" / "meta-000099").mkdir()
    res = check(ds.root)
    assert res.ok and res.verified == 3 and len(res.notes) == 2
    ds.path(1).write_bytes(b"not parquet")
    ds.path(2).unlink()
    res = check(ds.root)
    assert not res.ok and res.verified == 1 and len(res.problems) == 2


def test_dataset_check_command_exits_0_when_verified_and_1_with_problems(ds):
    runner = CliRunner()
    res = runner.invoke(app, ["dataset", "check", str(ds.root)])
    assert res.exit_code == 0 and "3 episodes, 12 frames, all verified" in res.output
    ds.path(0).write_bytes(ds.path(0).read_bytes()[:-9])
    res = runner.invoke(app, ["dataset", "check", str(ds.root)])
    assert res.exit_code == 1 and "episode_000000.parquet" in res.output
    res = runner.invoke(app, ["dataset", "check", str(ds.root / "nothing")])
    assert res.exit_code == 2 and "no such folder" in res.output


def test_a_dataset_changed_by_another_writer_is_not_overwritten(ds):
    other = Dataset(ds.root)
    ds.write(episode(3))
    with pytest.raises(TwinloopError, match="changed on disk since it was opened"):
        other.write(episode(4))
    assert Dataset(ds.root).indices == [0, 1, 2, 3]


def test_a_second_writer_at_the_same_time_is_refused(ds):
    fd = os.open(ds.root / ".twinloop" / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(TwinloopError, match="another process is writing"):
            ds.write(episode(3))
    finally:
        os.close(fd)
    ds.write(episode(3))


def test_a_dataset_without_checksums_is_read_but_not_appended_to(ds):
    meta = ds.root / "meta"
    target = meta.resolve()
    meta.unlink()
    shutil.copytree(target, meta)  # the plain layout of an older twinloop or another tool
    info = json.loads((meta / "info.json").read_text())
    del info["twinloop_integrity"]
    (meta / "info.json").write_text(json.dumps(info))
    old = Dataset(ds.root)
    assert not old.verified and len(old.episodes()) == 3
    with pytest.raises(TwinloopError, match="can be read but not appended to"):
        old.write(episode(3))
    assert check(ds.root).ok and "no checksums" in check(ds.root).notes[0]


def test_create_refuses_a_non_empty_folder_and_resumes_only_the_same_task(tmp_path, ds):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(TwinloopError, match="is not empty"):
        Dataset.create(tmp_path, {"fps": 10, "task": "kill-test"})
    with pytest.raises(TwinloopError, match="cannot resume .* holds task 'kill-test'"):
        Dataset.create(ds.root, {"fps": 10, "task": "push-t"}, mode="resume")
    assert len(Dataset.create(ds.root, {"fps": 10, "task": "kill-test"}, mode="resume")) == 3
    assert len(Dataset.create(ds.root, {"fps": 10, "task": "push-t"}, mode="overwrite")) == 0


def test_load_lerobot_on_a_dataset_reads_its_committed_episodes_only(ds):
    from twinloop.data import load_lerobot

    shutil.copy(ds.path(0), ds.path(0).with_name("episode_000009.parquet"))  # an uncommitted write
    assert [e.episode_index for e in load_lerobot(ds.root)] == [0, 1, 2]
