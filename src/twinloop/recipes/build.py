"""Recipes that need something built first: a distilled checkpoint, a calibration.

A recipe names what it needs (``needs = ["rope-ns30-base"]``: other recipes, by name or as
a ``.toml`` path relative to it) and refers to their outputs as ``{recipe:NAME}`` in its
settings (``checkpoint = "{recipe:rope-ns30-base}/policy_round1.pt"``). Each needed recipe
runs once, deterministically (its own seeds), into a cache folder, and is reused while its
recipe file is unchanged::

    $TWINLOOP_CACHE/recipes/NAME/      (default ~/.cache/twinloop)
        .recipe.sha256                 the recipe text it was built from
        ...                            the command's outputs (policy_round1.pt, posterior.json)

``twinloop recipe build NAME`` builds what ``NAME`` needs (and ``NAME`` itself with
``--self``); ``twinloop run --recipe NAME`` builds what is missing first, saying so.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from twinloop.errors import TwinloopError
from twinloop.recipes import Recipe, load_recipe

PLACEHOLDER = re.compile(r"\{recipe:([A-Za-z0-9_.\-/]+)\}")


def cache_root() -> Path:
    """Where built recipes are kept: ``$TWINLOOP_CACHE`` or ``~/.cache/twinloop``."""
    return Path(os.environ.get("TWINLOOP_CACHE") or Path.home() / ".cache" / "twinloop")


def _digest(rec: Recipe) -> str:
    return hashlib.sha256(Path(rec.path).read_bytes()).hexdigest()


def built_path(rec: Recipe) -> Path:
    """The cache folder of recipe ``rec``'s outputs."""
    return cache_root() / "recipes" / rec.name


def is_built(rec: Recipe) -> bool:
    """Whether ``rec`` was built from its current text."""
    marker = built_path(rec) / ".recipe.sha256"
    return marker.is_file() and marker.read_text().strip() == _digest(rec)


def needed(rec: Recipe) -> list[Recipe]:
    """The recipes ``rec`` needs, loaded (names, or ``.toml`` paths relative to ``rec``'s file)."""
    out = []
    for n in rec.needs:
        if n.endswith(".toml") and not Path(n).is_absolute():
            n = str(Path(rec.path).parent / n)
        out.append(load_recipe(n))
    return out


def build(rec: Recipe, log: Callable[[str], None] = print, *, _seen: tuple[str, ...] = ()) -> Path:
    """Build ``rec`` (what it needs first) into its cache folder unless already built; returns
    the folder. A failed build leaves no marker, so the next call runs it again."""
    if rec.name in _seen:
        raise TwinloopError(f"recipe {rec.name!r} needs itself (through {' -> '.join(_seen)})")
    for dep in needed(rec):
        build(dep, log, _seen=(*_seen, rec.name))
    path = built_path(rec)
    if is_built(rec):
        return path
    log(f"building recipe {rec.name!r} into {path} (once; reused while the recipe is unchanged)")
    path.mkdir(parents=True, exist_ok=True)
    (path / ".recipe.sha256").unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "twinloop", rec.command, "--recipe", rec.path, "--out", str(path), "--overwrite"]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL)
    if proc.returncode:
        raise TwinloopError(f"building recipe {rec.name!r} failed (exit {proc.returncode}): {' '.join(cmd)}")
    (path / ".recipe.sha256").write_text(_digest(rec) + "\n")
    return path


def with_built(rec: Recipe, log: Callable[[str], None] = print) -> dict:
    """``rec``'s settings with every ``{recipe:NAME}`` replaced by NAME's built folder, building
    what ``rec`` needs first. A placeholder of a recipe not in ``needs`` is refused."""
    folders = {dep.name: build(dep, log) for dep in needed(rec)}

    def sub(value):
        if not isinstance(value, str):
            return value

        def one(m):
            name = Path(m.group(1)).stem
            if name not in folders:
                raise TwinloopError(f"recipe {rec.name!r}: {m.group(0)} names a recipe it does not list in needs "
                                    f"({', '.join(folders) or 'none'})")
            return str(folders[name])

        return PLACEHOLDER.sub(one, value)

    return {k: sub(v) for k, v in rec.settings.items()}
