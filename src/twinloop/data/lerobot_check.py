"""Verify a LeRobot v3.0 dataset folder (what :func:`~twinloop.data.export_lerobot` writes).

Checked: ``meta/info.json`` (version, totals, features), ``meta/tasks.parquet``, the episode
records under ``meta/episodes`` (indices 0..N-1, lengths, where their frames are), and every
data file they name: its columns are the declared features (no more, no fewer: an export that
drops ``refine.plan`` is caught), vectors have the declared length, and each episode's frames
are where its record says (``episode_index``, a contiguous global ``index``, ``frame_index``
0..T-1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twinloop.data.dataset import DatasetCheck
from twinloop.data.episodes import EPISODE, FRAME, INDEX, _matrix, _scalar
from twinloop.errors import TwinloopError
from twinloop.io import read_json

LEROBOT_V3 = "v3.0"
_RECORD = ("episode_index", "length", "data/chunk_index", "data/file_index", "dataset_from_index", "dataset_to_index")


def is_lerobot_v3(root) -> bool:
    """Whether ``root`` holds a LeRobot v3.0 dataset (by its ``meta/info.json``)."""
    info = Path(root) / "meta" / "info.json"
    try:
        return info.is_file() and read_json(info, "dataset metadata").get("codebase_version") == LEROBOT_V3
    except TwinloopError:
        return False


def check_lerobot(root) -> DatasetCheck:
    """Verify the LeRobot v3.0 dataset at ``root`` (see the module docstring)."""
    out = DatasetCheck(Path(root))
    try:
        info, records = _metadata(out.root)
        out.episodes, out.frames = len(records), int(info["total_frames"])
        files: dict[tuple[int, int], list[dict]] = {}
        for r in records:
            files.setdefault((int(r["data/chunk_index"]), int(r["data/file_index"])), []).append(r)
        for (chunk, file), recs in sorted(files.items()):
            path = out.root / info["data_path"].format(chunk_index=chunk, file_index=file)
            out.verified += _check_file(path, recs, info["features"], out.problems)
    except TwinloopError as exc:
        out.problems.append(str(exc))
    out.notes.append("LeRobot v3.0 layout (an export): checked against its own metadata, no checksums")
    return out


def _metadata(root: Path) -> tuple[dict, list[dict]]:
    info = read_json(root / "meta" / "info.json", "dataset metadata")
    for key in ("total_episodes", "total_frames", "features", "data_path", "fps"):
        if key not in info:
            raise TwinloopError(f"{root / 'meta' / 'info.json'} has no {key!r}")
    if not (root / "meta" / "tasks.parquet").is_file():
        raise TwinloopError(f"{root / 'meta' / 'tasks.parquet'} is missing")
    parts = sorted((root / "meta" / "episodes").rglob("*.parquet"))
    if not parts:
        raise TwinloopError(f"{root / 'meta' / 'episodes'} holds no episode records")
    try:
        records = pa.concat_tables([pq.read_table(p) for p in parts]).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise TwinloopError(f"cannot read the episode records under {root / 'meta' / 'episodes'}: {exc}") from exc
    missing = [k for k in _RECORD if records and k not in records[0]]
    if missing:
        raise TwinloopError(f"episode records under {root / 'meta' / 'episodes'} lack {missing}")
    records.sort(key=lambda r: r["episode_index"])
    if [r["episode_index"] for r in records] != list(range(len(records))):
        raise TwinloopError(f"episode records are not numbered 0..{len(records) - 1}")
    frames, start = 0, 0
    for r in records:
        if r["dataset_from_index"] != start or r["dataset_to_index"] - r["dataset_from_index"] != r["length"]:
            raise TwinloopError(f"episode {r['episode_index']}: its frames {r['dataset_from_index']}.."
                                f"{r['dataset_to_index']} do not follow on from {start} with length {r['length']}")
        start = r["dataset_to_index"]
        frames += r["length"]
    if (len(records), frames) != (info["total_episodes"], info["total_frames"]):
        raise TwinloopError(f"meta/info.json says {info['total_episodes']} episodes and {info['total_frames']} frames "
                            f"but the episode records hold {len(records)} and {frames}")
    return info, records


def _check_file(path: Path, records: list[dict], features: dict, problems: list[str]) -> int:
    """Check one data file against its episodes' records; returns how many episodes passed."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        problems.append(f"{path}: cannot read ({exc})")
        return 0
    cols = set(table.column_names)
    if cols != set(features):
        problems.append(f"{path}: columns differ from the features in meta/info.json (missing "
                        f"{sorted(set(features) - cols)}, undeclared {sorted(cols - set(features))})")
        return 0
    try:
        for name, f in features.items():
            if f.get("dtype") != "string" and list(f.get("shape", [1])) != [1]:
                width = _matrix(table, name, str(path)).shape[1]
                if [width] != list(f["shape"]):
                    raise TwinloopError(f"{path}: column {name!r} holds vectors of {width}, declared {f['shape']}")
        ep, index, frame = (_scalar(table, c, str(path), np.int64) for c in (EPISODE, INDEX, FRAME))
    except TwinloopError as exc:
        problems.append(str(exc))
        return 0
    ok = 0
    for r in records:
        rows = np.flatnonzero(ep == r["episode_index"])
        want = np.arange(r["dataset_from_index"], r["dataset_to_index"])
        if len(rows) != r["length"] or not np.array_equal(index[rows], want) or \
                not np.array_equal(frame[rows], np.arange(r["length"])):
            problems.append(f"{path}: episode {r['episode_index']} has {len(rows)} frames, its record says "
                            f"{r['length']} at index {r['dataset_from_index']}..{r['dataset_to_index']}")
            continue
        ok += 1
    return ok
