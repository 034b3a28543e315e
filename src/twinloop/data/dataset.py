"""Dataset folders: recorded episodes in LeRobot v2.1 layout, crash-consistent and verifiable.

A dataset folder::

    meta -> .twinloop/meta-000007   the committed metadata (a symlink; see "commit" below)
        info.json                   features (dtype, shape, names), fps, totals, `twinloop` block,
                                    and the SHA-256 of the three files beside it
        episodes.jsonl              one line per episode: episode_index, tasks, length, success,
                                    and `twinloop`: file, sha256, rows, index_from
        episodes_stats.jsonl        per-episode min/max/mean/std/count of every numeric feature
        tasks.jsonl                 task_index -> task string
    data/chunk-000/episode_000000.parquet
    .twinloop/                      metadata versions and the writer's lock

**Commit.** An episode is added in three steps: its Parquet file is written under its final
name (atomically; nothing lists it yet), a complete new metadata folder
``.twinloop/meta-<v+1>`` is written and flushed beside the current one, and the symlink
``meta`` is replaced by one pointing at it (``os.replace``). That rename is the one commit
point: whatever instant a writer dies, ``meta`` points at a complete set of metadata that
lists exactly the episode files that were complete when it was written, with totals and a
global ``index`` that agree with them. What a dead writer leaves behind (an unlisted episode
file, an uncommitted metadata folder, temp files) is ignored by readers and reported as a
note by :func:`check`; the next write continues from the last commit, removes stale metadata
folders and overwrites an episode file when it writes that index again. LeRobot readers see an ordinary ``meta/`` folder through the symlink; copy a
dataset with symlinks kept (``cp -a``, ``rsync -a``) or resolved (``cp -rL``).

**Verification.** Opening a dataset checks the metadata against the checksums in info.json
and its totals against episodes.jsonl; :meth:`Dataset.read` checks the episode file's
SHA-256, row count and episode index, and names what is wrong (a changed byte, dropped rows,
files swapped between episodes, a missing file); :func:`check` (``twinloop dataset check``)
does all of it for every episode. A dataset written before commits existed (a plain ``meta/``
folder without checksums) is read with its row counts checked only, and is not appended to.
"""

from __future__ import annotations

import fcntl
import math
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twinloop.data.dataset_check import DatasetCheck, check
from twinloop.data.episodes import (
    EPISODE,
    INDEX,
    REQUIRED,
    SUCCESS,
    TWINLOOP_COLUMNS,
    Episode,
    EpisodeRecorder,
    _dumps,
    _episode_from_table,
    _index,
    _scalar,
)
from twinloop.data.metadata import (  # noqa: F401 - CHUNKS_SIZE, INTEGRITY: re-exported
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_PATH,
    INTEGRITY,
    LEROBOT_KEYS,
    META_FILES,
    STORE,
    VERSION_DIR,
    check_entry,
    check_info,
    episode_stats,
    features_of,
    parse_jsonl,
    sha256,
)
from twinloop.errors import TwinloopError, choose, number
from twinloop.io import OUT_MODES, atomic_write, fsync_path, read_json

# -- the dataset --------------------------------------------------------------------------------


def _creation_info(info: Mapping) -> tuple[float, dict, int]:
    """``(fps, twinloop block, chunks_size)`` of the ``info`` a new dataset is created with."""
    if not isinstance(info, Mapping):
        raise TwinloopError(f"info must be a dict, got {type(info).__name__}")
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (math.isfinite(fps) and fps > 0):
        raise TwinloopError(f"info['fps'] must be a positive number (control ticks per second), got {fps!r}")
    block = dict(info.get("twinloop") or {})
    block.update({k: v for k, v in info.items() if k not in (*LEROBOT_KEYS, "twinloop")})
    chunks = _index(info.get("chunks_size", CHUNKS_SIZE), "info['chunks_size']")
    if chunks < 1:
        raise TwinloopError("info['chunks_size'] must be >= 1")
    return fps, block, chunks


def _clear_for_new(root: Path, is_dataset: bool) -> None:
    """Make room for a new dataset at ``root``: delete the dataset there (``overwrite``), or
    check that the folder is empty but for an uncommitted create's store."""
    if is_dataset:  # overwrite
        shutil.rmtree(root)
    elif root.is_dir():
        # a create killed before its commit leaves only the store: ours, and nothing in it counts
        other = sorted(e.name for e in root.iterdir() if e.name not in (STORE, ".twinloop-output"))
        if other:
            shown = ", ".join(other[:4]) + (", ..." if len(other) > 4 else "")
            raise TwinloopError(f"{root} is not empty ({shown}); a new dataset needs an empty folder "
                                "(or mode='resume' / 'overwrite' for a dataset there)")
        shutil.rmtree(root / STORE, ignore_errors=True)
    elif root.exists():
        raise TwinloopError(f"{root} is a file, not a folder")


class Dataset:
    """A folder of recorded episodes (see the module docstring).

    Open an existing one with ``Dataset(root)`` (its metadata is verified); make a new one
    with :meth:`create`. One process writes a dataset at a time (a lock enforces it).

    Attributes:
        root: the folder.
        verified: whether the dataset carries checksums (False for an older, plain layout).
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._load()

    def _load(self) -> None:
        meta = self.root / "meta"
        info_path = meta / "info.json"
        if not info_path.exists():
            if meta.is_symlink():
                raise TwinloopError(f"{self.root} is a broken dataset: meta points to {os.readlink(meta)}, "
                                    "which does not exist")
            inside = datasets_under(self.root)
            if inside:  # a run's output folder: name the datasets it holds
                shown = ", ".join(str(p) for p in inside[:4]) + (", ..." if len(inside) > 4 else "")
                hint = (f"pass {inside[0]} (the refined controller's episodes in the world) or another of them"
                        if inside[0] == self.root / "episodes" / "refined" else "pass one of them")
                raise TwinloopError(f"{self.root} is not a dataset but a folder of {len(inside)}: {shown}; {hint}")
            raise TwinloopError(f"{self.root} is not a dataset (no meta/info.json); "
                                "make one with Dataset.create(root, info)")
        info = read_json(info_path, "dataset metadata")
        check_info(info, info_path)
        integrity = info.get(INTEGRITY)
        self.verified = integrity is not None
        data = {}
        for name in META_FILES:
            path = meta / name
            try:
                data[name] = path.read_bytes()
            except FileNotFoundError:
                data[name] = None
            except OSError as exc:
                raise TwinloopError(f"cannot read {path}: {exc}") from exc
            if self.verified:
                if data[name] is None:
                    raise TwinloopError(f"{path} is missing (meta/info.json lists {info['total_episodes']} "
                                        "episodes); the dataset's metadata is incomplete")
                if sha256(data[name]) != integrity["sha256"].get(name):
                    raise TwinloopError(f"{path} does not match its checksum in meta/info.json: "
                                        "it was changed after the dataset was written")
        if data["episodes.jsonl"] is None and info["total_episodes"]:
            raise TwinloopError(f"{meta / 'episodes.jsonl'} is missing but meta/info.json lists "
                                f"{info['total_episodes']} episodes")
        where = str(meta / "episodes.jsonl")
        episodes: dict[int, dict] = {}
        for e in parse_jsonl(data["episodes.jsonl"] or b"", meta / "episodes.jsonl"):
            check_entry(e, where, self.verified)
            if e["episode_index"] in episodes:
                raise TwinloopError(f"{where}: episode {e['episode_index']} is listed twice")
            episodes[e["episode_index"]] = e
        frames = sum(e["length"] for e in episodes.values())
        if (len(episodes), frames) != (info["total_episodes"], info["total_frames"]):
            raise TwinloopError(f"{info_path} says {info['total_episodes']} episodes and {info['total_frames']} "
                                f"frames but {where} lists {len(episodes)} episodes and {frames} frames")
        stats = parse_jsonl(data["episodes_stats.jsonl"] or b"", meta / "episodes_stats.jsonl")
        self._info = info
        self._episodes = episodes
        self._stats = {int(e["episode_index"]): e for e in stats if isinstance(e.get("episode_index"), int)}
        self._tasks = (data["tasks.jsonl"] or b"").decode("utf-8", errors="replace")
        self._version = integrity["version"] if self.verified else None

    @classmethod
    def create(cls, root: str | os.PathLike, info: Mapping, mode: str = "new") -> Dataset:
        """Make an empty dataset at ``root``, or continue / replace the one there.

        Args:
            info: must hold ``fps`` (control ticks per second); may hold ``robot_type``,
                ``chunks_size`` and a ``twinloop`` dict. Every other key goes into the
                ``twinloop`` block too, e.g. ``task``, ``world``, ``seed``, ``controller``,
                ``obs_names``, ``action_names``, ``param_names``.
            mode: ``new``: ``root`` must be absent or empty; ``resume``: open the dataset at
                ``root`` (its fps and task must match ``info``) and continue after its last
                committed episode; ``overwrite``: delete the dataset at ``root`` first.
        """
        choose("dataset mode", mode, OUT_MODES)
        root = Path(root)
        fps, block, chunks = _creation_info(info)
        meta = root / "meta"
        is_dataset = meta.exists() or meta.is_symlink()
        if is_dataset and mode == "resume":
            ds = cls(root)
            old = ds.info["twinloop"].get("task")
            if ds.info["fps"] != fps or old != block.get("task"):
                raise TwinloopError(f"cannot resume {root}: it holds task {old!r} at {ds.info['fps']:g} fps, "
                                    f"not task {block.get('task')!r} at {fps:g} fps")
            return ds
        if is_dataset and mode == "new":
            raise TwinloopError(f"a dataset already exists at {root}; open it with Dataset(root), or pass "
                                "mode='resume' to continue it or mode='overwrite' to replace it")
        _clear_for_new(root, is_dataset)
        ds = cls.__new__(cls)
        ds.root, ds.verified, ds._version = root, True, 0
        ds._episodes, ds._stats = {}, {}
        ds._tasks = _dumps({"task_index": 0, "task": str(block.get("task", ""))}, "task") + "\n"
        ds._info = {
            "codebase_version": CODEBASE_VERSION, "robot_type": info.get("robot_type", "twinloop"),
            "total_episodes": 0, "total_frames": 0, "total_tasks": 1, "total_videos": 0,
            "total_chunks": 0, "chunks_size": chunks, "fps": fps, "splits": {"train": "0:0"},
            "data_path": DATA_PATH, "video_path": None, "features": {}, "twinloop": block,
        }
        _dumps(ds._info, "info")  # fail on unstorable info before touching the disk
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TwinloopError(f"cannot create dataset folder {root}: {exc.strerror or exc}") from exc
        with ds._lock():
            ds._commit(ds._info, ds._episodes, ds._stats)
        return ds

    @property
    def info(self) -> dict:
        """The contents of ``meta/info.json`` (do not mutate)."""
        return self._info

    @property
    def indices(self) -> list[int]:
        """Episode indices in the dataset, ascending."""
        return sorted(self._episodes)

    def __len__(self) -> int:
        return len(self._episodes)

    def path(self, episode_index: int) -> Path:
        chunk = episode_index // self._info["chunks_size"]
        return self.root / self._info["data_path"].format(episode_chunk=chunk, episode_index=episode_index)

    # -- writing ----------------------------------------------------------------------------------

    @contextmanager
    def _lock(self) -> Iterator[None]:
        (self.root / STORE).mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / STORE / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise TwinloopError(f"another process is writing {self.root}; one writer at a time") from exc
            yield
        finally:
            os.close(fd)

    def _committed_version(self) -> int | None:
        try:
            m = VERSION_DIR.search(os.readlink(self.root / "meta"))
        except OSError:
            return None
        return int(m.group(1)) if m else None

    def _commit(self, info: dict, episodes: dict, stats: dict) -> None:
        """Write metadata version ``v+1`` beside the current one and switch ``meta`` to it."""
        v = self._version + 1
        name = f"meta-{v:06d}"
        folder = self.root / STORE / name
        if folder.exists():  # written by a writer that died before committing it
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        texts = {
            "episodes.jsonl": "".join(_dumps(episodes[i], "episode") + "\n" for i in sorted(episodes)),
            "episodes_stats.jsonl": "".join(_dumps(stats[i], "stats") + "\n" for i in sorted(stats)),
            "tasks.jsonl": self._tasks,
        }
        info = {**info, INTEGRITY: {"version": v, "sha256": {k: sha256(t.encode()) for k, t in texts.items()}}}
        texts["info.json"] = _dumps(info, "info", indent=2)
        for k, t in texts.items():
            (folder / k).write_text(t)
            fsync_path(folder / k)
        fsync_path(folder)
        # the new link is made in the store (so a writer that dies here leaves nothing outside
        # it); its relative target resolves from where it is renamed to
        link = self.root / STORE / "meta.link"
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(os.path.join(STORE, name), link)
        os.replace(link, self.root / "meta")  # the commit point
        fsync_path(self.root)
        self._info, self._episodes, self._stats, self._version = info, episodes, stats, v
        for old in (self.root / STORE).glob("meta-*"):  # earlier versions and dead writers' leftovers
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)

    def write(self, episode: EpisodeRecorder | pa.Table) -> Path:
        """Add one episode (a recorder or its table) and commit it; returns its file's path.

        The episode's columns must match the dataset's (set by its first episode).
        """
        if isinstance(episode, EpisodeRecorder):
            block = self._info.get("twinloop") or {}
            for key in ("task", "scene"):  # a recorder of another task's episodes is refused here
                have, want = getattr(episode, key, None), block.get(key)
                if have and want and have != want:
                    raise TwinloopError(f"episode {episode.episode_index} was recorded on {key} {have!r}, but "
                                        f"{self.root} holds {key} {want!r}; write it to a dataset of its own")
        table = episode.to_table() if isinstance(episode, EpisodeRecorder) else episode
        if not isinstance(table, pa.Table):
            raise TwinloopError(f"write takes an EpisodeRecorder or a pyarrow.Table, got {type(episode).__name__}")
        missing = [c for c in REQUIRED if c not in table.column_names]
        if missing:
            raise TwinloopError(f"episode table lacks column(s) {missing}")
        if table.num_rows == 0:
            raise TwinloopError("episode table has no rows")
        eps = np.unique(_scalar(table, EPISODE, "episode table", np.int64))
        if eps.size != 1 or eps[0] < 0:
            raise TwinloopError(f"an episode table must hold one episode_index >= 0, got {eps.tolist()}")
        ep = int(eps[0])
        if not self.verified:
            raise TwinloopError(f"{self.root} was written by an older twinloop without commit points or "
                                "checksums; it can be read but not appended to (write a new dataset)")
        if ep in self._episodes:
            raise TwinloopError(f"episode {ep} is already in {self.root}; episode indices must be unique")
        features = features_of(table, self._info["twinloop"])
        old = self._info["features"]
        if old and old != features:
            diff = sorted(k for k in set(old) | set(features) if old.get(k) != features.get(k))
            raise TwinloopError(f"episode {ep} does not match the dataset's features; differing columns: {diff}")
        with self._lock():
            if self._committed_version() != self._version:
                raise TwinloopError(f"{self.root} changed on disk since it was opened (another writer?); "
                                    "open it again")
            T = table.num_rows
            start = int(self._info["total_frames"])
            table = table.set_column(table.column_names.index(INDEX), INDEX,
                                     pa.array(np.arange(start, start + T, dtype=np.int64)))
            path = self.path(ep)
            with atomic_write(path) as tmp:
                pq.write_table(table, tmp)
                digest = sha256(tmp.read_bytes())
                fsync_path(tmp)
            rel = path.relative_to(self.root).as_posix()
            entry = {"episode_index": ep, "tasks": [str(self._info["twinloop"].get("task", ""))], "length": T,
                     "success": bool(_scalar(table, SUCCESS, "episode table", np.bool_).any()),
                     "twinloop": {"file": rel, "sha256": digest, "rows": T, "index_from": start}}
            episodes = {**self._episodes, ep: entry}
            stats = {**self._stats, ep: {"episode_index": ep, "stats": episode_stats(table, features)}}
            info = {**self._info, "features": features, "total_episodes": len(episodes),
                    "total_frames": start + T, "splits": {"train": f"0:{len(episodes)}"},
                    "total_chunks": len({i // self._info["chunks_size"] for i in episodes})}
            self._commit(info, episodes, stats)
        return path

    # -- reading ----------------------------------------------------------------------------------

    def _table(self, episode_index: int, verify: bool = True) -> pa.Table:
        """The episode's table, checked against its metadata record."""
        entry = self._episodes[episode_index]
        path = self.path(episode_index)
        rel = path.relative_to(self.root).as_posix()
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise TwinloopError(f"{self.root}: episode {episode_index}'s file {rel} is missing") from exc
        except OSError as exc:
            raise TwinloopError(f"cannot read {path}: {exc}") from exc
        record = entry.get("twinloop") if self.verified else None
        digest = sha256(data) if verify and record else None
        if digest is not None and digest != record["sha256"]:
            other = [i for i, e in self._episodes.items() if i != episode_index and e["twinloop"]["sha256"] == digest]
            if other:
                raise TwinloopError(f"{self.root}: {rel} holds episode {other[0]}'s file, not episode "
                                    f"{episode_index}'s (episode files swapped or copied over)")
        try:
            table = pq.read_table(pa.BufferReader(data))
            table.column_names  # noqa: B018 - decodes the schema: a flipped byte in a name fails here
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            raise TwinloopError(f"{self.root}: {rel} is not a readable Parquet file ({exc}); "
                                "it is corrupted") from exc
        if table.num_rows != entry["length"]:
            raise TwinloopError(f"{self.root}: {rel} has {table.num_rows} rows but meta/episodes.jsonl "
                                f"says {entry['length']} (rows dropped or added)")
        if EPISODE in table.column_names:
            got = np.unique(_scalar(table, EPISODE, str(path), np.int64))
            if got.tolist() != [episode_index]:
                raise TwinloopError(f"{self.root}: {rel} holds episode_index {got.tolist()}, expected {episode_index}")
        if digest is not None and digest != record["sha256"]:
            raise TwinloopError(f"{self.root}: {rel} does not match its checksum in meta/episodes.jsonl "
                                "(a byte changed after it was written: corrupted or edited)")
        return table

    def table(self, episode_index: int, verify: bool = True) -> pa.Table:
        """The episode's Parquet table as stored, checked as :meth:`read` checks it."""
        if isinstance(episode_index, bool) or not isinstance(episode_index, (int, np.integer)):
            raise TwinloopError(f"episode_index must be an integer, got {episode_index!r}")
        episode_index = int(episode_index)
        if episode_index not in self._episodes:
            raise TwinloopError(f"no episode {episode_index} in {self.root} (has {len(self)}: {self.indices[:10]}...)")
        return self._table(episode_index, verify)

    def read(self, episode_index: int, verify: bool = True) -> Episode:
        """The episode with this index, verified against its checksum and row count unless
        ``verify`` is False (the row count and episode index are always checked)."""
        table = self.table(episode_index, verify)
        ep = _episode_from_table(table, TWINLOOP_COLUMNS, str(self.path(int(episode_index))),
                                 episode_index=int(episode_index), refine=True)
        block = self._info.get("twinloop") or {}
        ep.task, ep.scene = (v if isinstance(v, str) and v else None for v in (block.get("task"), block.get("scene")))
        return ep

    def episodes(self) -> list[Episode]:
        """All episodes, by ascending index."""
        return [self.read(i) for i in self.indices]

    def split(self, holdout_fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
        """Split episode indices into ``(train, holdout)`` (never splits an episode).

        ``round(holdout_fraction * len)`` episodes are held out (at least one if the fraction
        is positive), chosen by a seeded permutation; both lists are sorted.
        """
        holdout_fraction = number(holdout_fraction, "holdout_fraction", low=0, high=1, high_open=True)
        seed = number(seed, "seed", low=0, integer=True)
        idx = np.array(self.indices, dtype=np.int64)
        n_hold = int(round(holdout_fraction * idx.size))
        if holdout_fraction > 0:
            n_hold = max(n_hold, 1)
        if n_hold >= idx.size and idx.size:
            raise TwinloopError(f"holdout_fraction {holdout_fraction} leaves no training episodes of {idx.size}")
        perm = np.random.default_rng(seed).permutation(idx)
        return sorted(int(i) for i in perm[n_hold:]), sorted(int(i) for i in perm[:n_hold])


def datasets_under(root: str | os.PathLike, depth: int = 3) -> list[Path]:
    """Dataset folders (with ``meta/info.json``) below ``root``, at most ``depth`` levels down,
    sorted (``episodes/refined`` of a run's output folder first)."""
    root = Path(root)
    found: list[Path] = []
    if root.is_dir():
        for level in range(1, depth + 1):
            found += [p.parent.parent for p in root.glob("/".join(["*"] * level) + "/meta/info.json")]
    refined = root / "episodes" / "refined"
    return sorted(set(found), key=lambda p: (p != refined, str(p)))


__all__ = ["DATA_PATH", "Dataset", "DatasetCheck", "check", "datasets_under"]
