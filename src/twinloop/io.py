"""Files written atomically, JSON read and written with clear errors, and output folders.

A file is written to a temp file beside the target and renamed onto it on success, so a run
that fails mid-write leaves the previous file (or none) in place, never a partial one.

Output folders follow one rule, the same for every command that writes one
(:func:`output_folder`): a run writes into a folder that is **new** (absent or empty), or it
must say what to do with the earlier run there: **resume** it (only commands that can:
``rsr``, datasets) or **overwrite** it (the folder is emptied first, and only if twinloop
wrote it: it holds the marker file :data:`MARKER`, so a mistyped ``--out ~`` is never
deleted). The folder is created and written to before any long work starts, so an
unwritable ``--out`` fails at once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from twinloop.errors import TwinloopError, choose

#: what may happen to an earlier run in an output folder
OUT_MODES = ("new", "resume", "overwrite")
#: marks a folder as twinloop's output (so that ``overwrite`` may empty it)
MARKER = ".twinloop-output"


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file (or a folder's entries) to disk, so a rename after it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside ``path`` (same suffix); on success rename it onto ``path``.

    On any exception the temp file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give it a normal file's mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def json_default(x):
    """``json.dumps(default=)`` for NumPy scalars and arrays, paths and dataclasses (a
    config's nested config)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.asdict(x)
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"{type(x).__name__} is not JSON serializable")


def write_json(path: str | os.PathLike, obj, *, allow_nan: bool = True) -> Path:
    """Write ``obj`` as indented JSON (NumPy scalars and arrays allowed), atomically."""
    text = json.dumps(obj, indent=2, allow_nan=allow_nan, default=json_default)
    with atomic_write(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def save_checkpoint(path: str | os.PathLike, meta: dict, stats: dict, state_dict: dict) -> Path:
    """A torch network's weights, its normalization ``stats`` (arrays) and ``meta`` (JSON-like)
    in one file, written atomically (the learned twin's and the distilled policy's format)."""
    import torch  # the [learn] extra: only callers that have trained a network get here

    blob = {"meta": meta, "stats": {k: torch.as_tensor(v) for k, v in stats.items()}, "state_dict": state_dict}
    with atomic_write(path) as tmp:
        torch.save(blob, tmp)
    return Path(path)


def load_checkpoint(path: str | os.PathLike, what: str) -> dict:
    """A file written by :func:`save_checkpoint` (``{"meta", "stats", "state_dict"}``); a
    missing or unreadable file is a :class:`TwinloopError` that names ``what`` it should be."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise TwinloopError(f"no {what} at {path}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        blob["meta"]
    except Exception as exc:
        raise TwinloopError(f"{path} is not a readable {what}: {type(exc).__name__}: {exc}") from exc
    return blob


def read_json(path: str | os.PathLike, what: str = "file") -> dict:
    """A JSON object from ``path``; a missing, unreadable or malformed file is a
    :class:`TwinloopError` that names it."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise TwinloopError(f"{what} {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise TwinloopError(f"cannot read {what} {path}: {exc}") from exc
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TwinloopError(f"{what} {path} is not valid JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise TwinloopError(f"{what} {path} must hold a JSON object, got {type(obj).__name__}")
    return obj


def out_mode(resume: bool = False, overwrite: bool = False) -> str:
    """The output mode of the CLI flags ``--resume`` / ``--overwrite`` (at most one)."""
    if resume and overwrite:
        raise TwinloopError("--resume and --overwrite exclude each other; pass one")
    return "resume" if resume else "overwrite" if overwrite else "new"


def output_folder(path: str | os.PathLike, mode: str = "new", *, resumable: bool = False) -> Path:
    """Prepare the output folder ``path`` of a run under the rule in the module docstring.

    Args:
        mode: ``new`` (absent or empty), ``resume`` (continue the run there; only where
            ``resumable``) or ``overwrite`` (empty a folder twinloop wrote, then start anew).
        resumable: whether the caller can resume a run.

    Returns:
        The folder, created, marked, and known to be writable.
    """
    choose("output mode", mode, OUT_MODES)
    if mode == "resume" and not resumable:
        raise TwinloopError("this command cannot resume a run; use a new output folder or overwrite")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise TwinloopError(f"output folder {p} is a file")
    marked = (p / MARKER).exists()
    entries = sorted(e.name for e in p.iterdir() if e.name != MARKER) if p.is_dir() else []
    if entries and mode == "new":
        shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
        how = "--resume to continue it or --overwrite to replace it" if resumable else "--overwrite to replace it"
        raise TwinloopError(f"output folder {p} is not empty ({shown}); choose another folder or pass {how}")
    if entries and not marked:
        raise TwinloopError(f"output folder {p} is not empty and was not written by twinloop (no {MARKER}); "
                            f"refusing to {mode} it")
    if entries and mode == "overwrite":
        for e in p.iterdir():
            if e.is_dir() and not e.is_symlink():
                shutil.rmtree(e)
            else:
                e.unlink()
    try:
        p.mkdir(parents=True, exist_ok=True)
        (p / MARKER).write_text("a twinloop output folder: `--overwrite` may empty it\n")
    except OSError as exc:
        raise TwinloopError(f"cannot write to output folder {p}: {exc.strerror or exc}") from exc
    return p
