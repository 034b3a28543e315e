"""Files written atomically: a temp file beside the target, renamed onto it on success.

A run that fails mid-write leaves the previous file (or none) in place, never a partial one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np


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


def _plain(x):
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON serializable")


def write_json(path: str | os.PathLike, obj, *, allow_nan: bool = True) -> Path:
    """Write ``obj`` as indented JSON (NumPy scalars and arrays allowed), atomically."""
    text = json.dumps(obj, indent=2, allow_nan=allow_nan, default=_plain)
    with atomic_write(path) as tmp:
        tmp.write_text(text)
    return Path(path)
