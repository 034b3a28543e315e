"""A dataset folder's metadata in the LeRobot v2.1 layout: its constants, the feature specs and
per-episode stats written for each episode, and the checks applied when it is read (see
:mod:`twinloop.data.dataset`)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from twinloop.data.episodes import (
    ACTION,
    OBS,
    TWIN_QPOS,
    TWIN_QVEL,
    WORLD_QPOS,
    WORLD_QVEL,
    _matrix,
)
from twinloop.errors import TwinloopError

CODEBASE_VERSION = "v2.1"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
LEROBOT_KEYS = ("fps", "robot_type", "chunks_size")
#: info.json key of the commit: its version and the SHA-256 of the other metadata files
INTEGRITY = "twinloop_integrity"
META_FILES = ("episodes.jsonl", "episodes_stats.jsonl", "tasks.jsonl")
STORE = ".twinloop"  # metadata versions and the lock
VERSION_DIR = re.compile(r"meta-(\d{6})$")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_jsonl(data: bytes, path: Path) -> list[dict]:
    out = []
    for k, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TwinloopError(f"{path}, line {k}: not valid JSON ({exc})") from exc
        if not isinstance(obj, dict):
            raise TwinloopError(f"{path}, line {k}: expected a JSON object, got {type(obj).__name__}")
        out.append(obj)
    return out


# -- LeRobot feature specs and stats ----------------------------------------------------------


def feature_spec(typ: pa.DataType, n: int, names) -> dict:
    if pa.types.is_string(typ):  # LeRobot's text feature (no stats)
        return {"dtype": "string", "shape": [1], "names": None}
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        typ = typ.value_type
    else:
        n = 1
    dtype = "bool" if pa.types.is_boolean(typ) else str(typ.to_pandas_dtype().__name__)
    names = list(names) if names is not None and len(names) == n else None
    return {"dtype": dtype, "shape": [n], "names": names}


def features_of(table: pa.Table, block: dict) -> dict:
    """LeRobot feature specs of an episode table (names from the ``twinloop`` block)."""
    names = {OBS: block.get("obs_names"), ACTION: block.get("action_names"),
             TWIN_QPOS: block.get("qpos_names"), TWIN_QVEL: block.get("qvel_names"),
             WORLD_QPOS: block.get("qpos_names"), WORLD_QVEL: block.get("qvel_names")}
    out = {}
    for f in table.schema:
        col = table.column(f.name)
        n = 1
        if pa.types.is_list(f.type) or pa.types.is_large_list(f.type) or pa.types.is_fixed_size_list(f.type):
            lengths = col.combine_chunks().value_lengths().to_numpy(zero_copy_only=False)
            n = int(lengths[0]) if len(lengths) else 0
        out[f.name] = feature_spec(f.type, n, names.get(f.name))
    return out


def episode_stats(table: pa.Table, features: dict) -> dict:
    """LeRobot v2.1 per-episode stats (``nan``-aware; ``None`` where a value is all ``nan``)."""
    stats = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-nan columns (e.g. refine.cost)
        for name in features:
            if features[name]["dtype"] == "string":
                continue
            m = _matrix(table, name, "stats")
            fns = {"min": np.nanmin, "max": np.nanmax, "mean": np.nanmean, "std": np.nanstd}
            s = {k: [None if not math.isfinite(v) else float(v) for v in fn(m, axis=0)] for k, fn in fns.items()}
            s["count"] = [int(m.shape[0])]
            stats[name] = s
    return stats


# -- metadata checks ----------------------------------------------------------------------------


def check_count(info: Mapping, key: str, path: Path, low: int = 0) -> int:
    v = info.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise TwinloopError(f"{path}: {key!r} must be an integer >= {low}, got {v!r}")
    return v


def check_info(info: dict, path: Path) -> None:
    """The fields of info.json that reading relies on, with their types."""
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (math.isfinite(fps) and fps > 0):
        raise TwinloopError(f"{path}: 'fps' must be a positive number, got {fps!r}")
    check_count(info, "chunks_size", path, low=1)
    check_count(info, "total_episodes", path)
    check_count(info, "total_frames", path)
    if not isinstance(info.get("data_path"), str) or "{episode_index" not in info["data_path"]:
        raise TwinloopError(f"{path}: 'data_path' must be a path pattern with {{episode_index}}, "
                            f"got {info.get('data_path')!r}")
    for key in ("features", "twinloop"):
        if not isinstance(info.get(key, {}), dict):
            raise TwinloopError(f"{path}: {key!r} must be an object, got {type(info[key]).__name__}")
    integrity = info.get(INTEGRITY)
    if integrity is not None and not (isinstance(integrity, dict) and isinstance(integrity.get("version"), int)
                                      and isinstance(integrity.get("sha256"), dict)):
        raise TwinloopError(f"{path}: {INTEGRITY!r} is malformed: {integrity!r}")


def check_entry(e: dict, where: str, verified: bool) -> None:
    i = e.get("episode_index")
    if isinstance(i, bool) or not isinstance(i, int) or i < 0:
        raise TwinloopError(f"{where}: episode_index must be an integer >= 0, got {i!r}")
    n = e.get("length")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TwinloopError(f"{where}: episode {i} has length {n!r}; expected an integer >= 1")
    if verified:
        t = e.get("twinloop")
        if not (isinstance(t, dict) and isinstance(t.get("sha256"), str) and t.get("rows") == n
                and isinstance(t.get("index_from"), int) and isinstance(t.get("file"), str)):
            raise TwinloopError(f"{where}: episode {i} lacks its file record (file, sha256, rows, index_from)")


