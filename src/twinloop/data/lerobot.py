"""LeRobot interop: foreign LeRobot Parquet read as episodes, and datasets exported for LeRobot.

:func:`load_lerobot` reads Parquet that twinloop did not write through a column map (a twinloop
dataset folder is read through its committed metadata, so a file that an interrupted writer
left unlisted is never taken for an episode).

:func:`export_lerobot` writes a copy of a twinloop dataset in the layout that LeRobot's own
``LeRobotDataset`` loads in lerobot 0.4 (``codebase_version`` ``v3.0``; twinloop's own
folders are v2.1, one file per episode, because a commit adds one file)::

    meta/info.json                              codebase_version, fps, features, totals, paths
    meta/stats.json                             min/max/mean/std/count/q01..q99 per numeric feature
    meta/tasks.parquet                          task (the pandas index) -> task_index
    meta/episodes/chunk-000/file-000.parquet    per episode: tasks, length, where its frames are
                                                (data/chunk_index, data/file_index,
                                                dataset_from_index, dataset_to_index), stats/*
    data/chunk-000/file-000.parquet             the frames of up to ``episodes_per_file`` episodes

Episodes are renumbered 0..N-1 in ascending order of their twinloop index (LeRobot expects
contiguous indices) and ``index`` runs over all frames.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twinloop.data.dataset import CHUNKS_SIZE, INTEGRITY, Dataset
from twinloop.data.episodes import (
    ACTION,
    EPISODE,
    INDEX,
    OBS,
    REWARD,
    SUCCESS,
    TASK,
    TIMESTAMP,
    Episode,
    _episode_from_table,
    _matrix,
    _scalar,
)
from twinloop.errors import TwinloopError, number
from twinloop.io import fsync_path, read_json

#: the LeRobot dataset format :func:`export_lerobot` writes (lerobot 0.4.x reads it)
LEROBOT_CODEBASE_VERSION = "v3.0"
LEROBOT_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
LEROBOT_EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}

#: default column names assumed by :func:`load_lerobot` (each used only if present, except obs/action)
LEROBOT_COLUMNS = {"obs": OBS, "action": ACTION, "timestamp": TIMESTAMP, "episode_index": EPISODE,
                   "task_index": TASK, "reward": REWARD, "success": SUCCESS}
FIELDS = ("obs", "action", "timestamp", "episode_index", "task_index", "qpos", "qvel",
          "world_qpos", "world_qvel", "cost", "reward", "success", "plan")


def _parquet_files(source) -> list[Path]:
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        info = p / "meta" / "info.json"
        if p.is_dir() and info.exists() and INTEGRITY in read_json(info, "dataset metadata"):
            ds = Dataset(p)  # a twinloop dataset: its committed episode files only
            return [ds.path(i) for i in ds.indices]
        if p.is_dir():
            files = sorted((p / "data").rglob("*.parquet")) if (p / "data").is_dir() else sorted(p.rglob("*.parquet"))
            files = [f for f in files if not f.name.startswith(".")]  # temp files of atomic writes
            if not files:
                raise TwinloopError(f"no .parquet files under {p}")
            return files
        paths = [p]
    elif isinstance(source, Sequence):
        paths = [Path(s) for s in source]
        if not paths:
            raise TwinloopError("no parquet files given")
    else:
        raise TwinloopError(f"source must be a folder, a parquet file or a list of them, got {type(source).__name__}")
    for f in paths:
        if not f.is_file():
            raise TwinloopError(f"no such parquet file: {f}")
    return paths


def load_lerobot(source, column_map: Mapping[str, str | None] | None = None, *,
                 fps: float | None = None) -> list[Episode]:
    """Episodes from LeRobot-format Parquet that twinloop did not write.

    Args:
        source: a dataset folder (reads ``data/**/*.parquet``), a Parquet file, or a list.
        column_map: our field -> their column name, over :data:`LEROBOT_COLUMNS`'s defaults
            (``None`` removes a default). Fields: ``obs``, ``action`` (required), ``timestamp``,
            ``episode_index``, ``task_index``, ``qpos``, ``qvel``, ``world_qpos``,
            ``world_qvel``, ``cost``, ``reward`` (cost = -reward), ``success``, ``plan`` (per-tick
            action chunks, flattened: twinloop's ``refine.plan``). A column you
            map must exist; a default one is used only if present.
        fps: frames per second, used for timestamps when there is no timestamp column.

    Returns:
        Episodes by ascending ``episode_index`` (files without one are an episode each, in
        file order). Frames keep their stored order.
    """
    fps = None if fps is None else number(fps, "fps", low=0, low_open=True)
    if column_map is not None and not isinstance(column_map, Mapping):
        raise TwinloopError(f"column_map must be a dict of field -> column, got {type(column_map).__name__}")
    user = dict(column_map or {})
    unknown = sorted(set(user) - set(FIELDS))
    if unknown:
        raise TwinloopError(f"unknown field(s) {unknown} in column_map; fields are: {', '.join(FIELDS)}")
    for k, v in user.items():
        if v is not None and not isinstance(v, str):
            raise TwinloopError(f"column_map[{k!r}] must be a column name (str), got {v!r}")
    cols = {**LEROBOT_COLUMNS, **user}
    cols = {k: v for k, v in cols.items() if v is not None}
    for f in ("obs", "action"):
        if f not in cols:
            raise TwinloopError(f"column_map must name the {f!r} column")
    groups: dict[int, list[pa.Table]] = {}
    where: dict[int, str] = {}
    for path in _parquet_files(source):
        try:
            have = set(pq.read_schema(path).names)
        except (pa.ArrowException, OSError) as exc:
            raise TwinloopError(f"{path} is not a readable Parquet file ({exc})") from exc
        for f, c in cols.items():
            if (f in user or f in ("obs", "action")) and c not in have:
                raise TwinloopError(f"{path}: column {c!r} (mapped from {f!r}) not found; "
                                    f"columns are: {', '.join(sorted(have))}")
        table = pq.read_table(path, columns=sorted({c for c in cols.values() if c in have}))
        if cols.get("episode_index") in have:
            ep_col = _scalar(table, cols["episode_index"], str(path), np.int64)
            for ep in dict.fromkeys(ep_col.tolist()):
                groups.setdefault(ep, []).append(table.filter(pa.array(ep_col == ep)))
                where.setdefault(ep, str(path))
        else:
            ep = max(groups, default=-1) + 1
            groups[ep] = [table]
            where[ep] = str(path)
    return [_episode_from_table(pa.concat_tables(groups[ep]), cols, where[ep], episode_index=ep, fps=fps)
            for ep in sorted(groups)]


def _stats(m: np.ndarray) -> dict:
    """LeRobot stats of a ``(T, n)`` feature (nan-aware; ``None`` where all values are nan)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-nan columns (refine.cost of a base policy)
        fns = {"min": np.nanmin, "max": np.nanmax, "mean": np.nanmean, "std": np.nanstd,
               **{k: (lambda x, axis, q=q: np.nanquantile(x, q, axis=axis)) for k, q in QUANTILES.items()}}
        out = {k: [None if not np.isfinite(v) else float(v) for v in fn(m, axis=0)] for k, fn in fns.items()}
    out["count"] = [int(m.shape[0])]
    return out


def _pandas_index_metadata() -> bytes:
    """The schema metadata that makes pandas read column ``task`` back as the frame's index
    (LeRobot looks tasks up by ``tasks.loc[task]``), written without pandas."""
    return json.dumps({
        "index_columns": ["task"], "column_indexes": [],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                     "numpy_type": "int64", "metadata": None},
                    {"name": None, "field_name": "task", "pandas_type": "unicode", "numpy_type": "object",
                     "metadata": None}],
        "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.0.0",
    }).encode()


def export_lerobot(source, root: str | os.PathLike, *, overwrite: bool = False,
                   episodes_per_file: int = 1000) -> Path:
    """Write the twinloop dataset ``source`` (a :class:`~twinloop.data.Dataset` or its folder)
    as a LeRobot v3.0 dataset at ``root`` (layout in the module docstring).

    The copy is written in a temp folder beside ``root`` and renamed into place, so ``root``
    holds a complete dataset or nothing. Load it with lerobot 0.4's
    ``LeRobotDataset(repo_id, root=root)`` (any ``repo_id``: nothing is downloaded when the
    files are there).

    Args:
        overwrite: replace an existing LeRobot dataset at ``root`` (a folder with
            ``meta/info.json``); otherwise ``root`` must be absent or empty.
        episodes_per_file: episodes per data file.
    """
    ds = source if isinstance(source, Dataset) else Dataset(source)
    per_file = number(episodes_per_file, "episodes_per_file", low=1, integer=True)
    root = Path(root)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        if not (overwrite and (root / "meta" / "info.json").is_file()):
            raise TwinloopError(f"{root} is not an empty folder; pass overwrite=True (--overwrite) to replace a "
                                "LeRobot dataset there")
    if not len(ds):
        raise TwinloopError(f"{ds.root} has no episodes to export")
    info = ds.info
    features = {k: dict(v) for k, v in info["features"].items()}
    task_text = str(info.get("twinloop", {}).get("task", "")) or "twinloop"
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        numeric = [k for k, f in features.items() if f["dtype"] != "string"]
        rows, frames, stats = _export_data(ds, tmp, numeric, task_text, per_file)
        _export_meta(tmp, info, features, task_text, rows, frames, stats)
        for p in tmp.rglob("*"):
            fsync_path(p)
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _export_data(ds: Dataset, tmp: Path, numeric: list[str], task_text: str,
                 per_file: int) -> tuple[list[dict], int, dict[str, list[np.ndarray]]]:
    """Write the frames of ``ds`` under ``tmp`` (``per_file`` episodes a data file), renumbered;
    returns the rows of the episodes table, the frames written and the ``(T, n)`` values of
    each ``numeric`` feature per episode."""
    frames, rows, pending, stats = 0, [], [], {}

    def flush(f: int) -> None:  # one data file: the frames of episodes_per_file episodes
        path = tmp / LEROBOT_DATA_PATH.format(chunk_index=f // CHUNKS_SIZE, file_index=f % CHUNKS_SIZE)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables(pending), path)
        pending.clear()

    for new, old in enumerate(ds.indices):
        table = ds.table(old)
        T, f = table.num_rows, new // per_file
        table = table.set_column(table.column_names.index(EPISODE), EPISODE, pa.array(np.full(T, new, np.int64)))
        table = table.set_column(table.column_names.index(INDEX), INDEX,
                                 pa.array(np.arange(frames, frames + T, dtype=np.int64)))
        m = {k: _matrix(table, k, str(ds.path(old))) for k in numeric}
        for k, v in m.items():
            stats.setdefault(k, []).append(v)
        rows.append({"episode_index": new, "tasks": [task_text], "length": T,
                     "data/chunk_index": f // CHUNKS_SIZE, "data/file_index": f % CHUNKS_SIZE,
                     "dataset_from_index": frames, "dataset_to_index": frames + T,
                     "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0,
                     "twinloop/episode_index": old,
                     **{f"stats/{k}/{s}": v for k in numeric for s, v in _stats(m[k]).items()}})
        pending.append(table)
        frames += T
        if new + 1 == len(ds) or (new + 1) // per_file != f:
            flush(f)
    return rows, frames, stats


def _export_meta(tmp: Path, info: dict, features: dict, task_text: str, rows: list[dict], frames: int,
                 stats: dict[str, list[np.ndarray]]) -> None:
    """Write ``meta/`` under ``tmp``: the episodes table of ``rows``, the one task, info.json
    (``info`` of the twinloop dataset, ``frames`` in all) and the stats over all episodes."""
    ep_path = tmp / LEROBOT_EPISODES_PATH.format(chunk_index=0, file_index=0)
    ep_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), ep_path)
    tasks = pa.table({"task_index": pa.array([0], pa.int64()), "task": pa.array([task_text], pa.string())})
    pq.write_table(tasks.replace_schema_metadata({b"pandas": _pandas_index_metadata()}), tmp / "meta" / "tasks.parquet")
    fps = info["fps"]
    lerobot_info = {
        "codebase_version": LEROBOT_CODEBASE_VERSION, "robot_type": info.get("robot_type", "twinloop"),
        "total_episodes": len(rows), "total_frames": frames, "total_tasks": 1,
        "chunks_size": CHUNKS_SIZE, "data_files_size_in_mb": 100, "video_files_size_in_mb": 500,
        "fps": int(fps) if float(fps).is_integer() else fps, "splits": {"train": f"0:{len(rows)}"},
        "data_path": LEROBOT_DATA_PATH, "video_path": None, "features": features,
        "twinloop": info.get("twinloop", {}),
    }
    (tmp / "meta" / "info.json").write_text(json.dumps(lerobot_info, indent=2, allow_nan=False))
    all_stats = {k: _stats(np.concatenate(v)) for k, v in stats.items()}
    (tmp / "meta" / "stats.json").write_text(json.dumps(all_stats, indent=2, allow_nan=False))
