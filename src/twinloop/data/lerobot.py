"""Foreign LeRobot Parquet (data twinloop did not write) read as episodes through a column map.

A twinloop dataset folder is read through its committed metadata, so a file that an
interrupted writer left unlisted is never taken for an episode.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twinloop.data.dataset import INTEGRITY, Dataset
from twinloop.data.episodes import (
    ACTION,
    EPISODE,
    OBS,
    REWARD,
    SUCCESS,
    TASK,
    TIMESTAMP,
    Episode,
    _episode_from_table,
    _scalar,
)
from twinloop.errors import TwinloopError, number
from twinloop.io import read_json

#: default column names assumed by :func:`load_lerobot` (each used only if present, except obs/action)
LEROBOT_COLUMNS = {"obs": OBS, "action": ACTION, "timestamp": TIMESTAMP, "episode_index": EPISODE,
                   "task_index": TASK, "reward": REWARD, "success": SUCCESS}
FIELDS = ("obs", "action", "timestamp", "episode_index", "task_index", "qpos", "qvel",
          "world_qpos", "world_qvel", "cost", "reward", "success")


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
            ``world_qvel``, ``cost``, ``reward`` (cost = -reward), ``success``. A column you
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
