"""Checking a dataset folder: its metadata, every episode file, and what an interrupted writer
left behind (``twinloop dataset check``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from twinloop.data.metadata import STORE
from twinloop.errors import TwinloopError


@dataclass
class DatasetCheck:
    """What :func:`check` found.

    Attributes:
        root: the dataset folder.
        episodes: episodes listed in the committed metadata.
        frames: frames they hold.
        verified: episodes whose file matched its checksum, row count and index.
        problems: what makes (part of) the dataset unreadable or untrustworthy.
        notes: harmless leftovers (e.g. an interrupted writer's uncommitted episode file).
    """

    root: Path
    episodes: int = 0
    frames: int = 0
    verified: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check(root: str | os.PathLike) -> DatasetCheck:
    """Verify the dataset at ``root``: its metadata, every episode file, and leftovers; a LeRobot
    v3.0 folder (twinloop's export) against its own metadata
    (:func:`~twinloop.data.lerobot_check.check_lerobot`)."""
    from twinloop.data.dataset import Dataset  # imports this module
    from twinloop.data.lerobot_check import check_lerobot, is_lerobot_v3

    if is_lerobot_v3(root):
        return check_lerobot(root)
    out = DatasetCheck(Path(root))
    try:
        ds = Dataset(root)
    except TwinloopError as exc:
        out.problems.append(str(exc))
        return out
    out.episodes, out.frames = len(ds), int(ds.info["total_frames"])
    if not ds.verified:
        out.notes.append("no checksums (written by an older twinloop or another tool): "
                         "row counts and episode indices checked only")
    listed = set()
    for i in ds.indices:
        listed.add(ds.path(i).resolve())
        try:
            ds._table(i)
            out.verified += 1
        except TwinloopError as exc:
            out.problems.append(str(exc))
    data = ds.root / "data"
    for f in sorted(data.rglob("*")) if data.is_dir() else []:
        if not f.is_file():
            continue
        rel = f.relative_to(ds.root).as_posix()
        if f.name.startswith("."):
            out.notes.append(f"{rel}: a temp file of an interrupted write (ignored)")
        elif f.suffix == ".parquet" and f.resolve() not in listed:
            out.notes.append(f"{rel}: not listed in the metadata, e.g. an episode whose writer was "
                             "interrupted before its commit (ignored; the next write replaces it)")
    current = os.path.basename(os.readlink(ds.root / "meta")) if (ds.root / "meta").is_symlink() else None
    for old in sorted((ds.root / STORE).glob("meta-*")):
        if old.name != current:
            out.notes.append(f"{STORE}/{old.name}: uncommitted or superseded metadata (ignored)")
    return out


__all__ = ["DatasetCheck", "check"]
