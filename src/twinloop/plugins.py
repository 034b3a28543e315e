"""A user's own objects by name: a file, a module, or an installed package's entry point.

A task, proposer or world that a user writes should never need an edit of twinloop. Three
ways to name one, the Python ecosystem's own conventions:

- ``path/to/file.py:Name`` -- a Python file anywhere (imported once per resolved path);
- ``my_pkg.module:Name`` -- an importable module (on ``sys.path`` or installed);
- an entry point: an installed distribution declares, in its ``pyproject.toml``::

      [project.entry-points."twinloop.tasks"]
      arm-push = "my_pkg.tasks:ArmPush"

  and ``--task arm-push`` finds it (groups: :data:`GROUPS`).

:func:`load_object` resolves the first two; :func:`entry_point` the third.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from twinloop.errors import TwinloopError

#: entry-point groups twinloop reads: kind -> group
#: the prefix of the module names given to files loaded as plugins
USER_MODULE = "twinloop_user_"

GROUPS = {"task": "twinloop.tasks", "proposer": "twinloop.proposers", "world": "twinloop.worlds"}


def is_spec(name: str) -> bool:
    """Whether ``name`` names an object by location (``file.py:Name`` or ``module:Name``)
    rather than by a registry name."""
    if not isinstance(name, str) or name.count(":") != 1:
        return False
    where, attr = name.split(":")
    return bool(where) and attr.isidentifier()


def module_from_file(path: Path, kind: str):
    """The Python file ``path`` as a module (a ``kind`` plugin's), loaded once per resolved path
    under a name derived from it, so another process loading the same file gets the same name."""
    if not path.is_file():
        raise TwinloopError(f"{kind} file {str(path)!r} not found")
    resolved = path.resolve()
    # one module per resolved path, so a class loaded twice is the same class
    modname = f"{USER_MODULE}{resolved.stem}_{hashlib.sha1(str(resolved).encode()).hexdigest()[:10]}"
    if modname in sys.modules:
        return sys.modules[modname]
    spec = importlib.util.spec_from_file_location(modname, resolved)
    if spec is None or spec.loader is None:
        raise TwinloopError(f"{kind} file {str(path)!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[modname]
        raise TwinloopError(f"{kind} file {str(path)!r} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def _module(where: str, kind: str):
    if where.endswith(".py") or "/" in where or "\\" in where:
        return module_from_file(Path(where), kind)
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        raise TwinloopError(f"{kind} module {where!r} not found ({exc}); name a file as path/to/file.py:Name "
                            "or an importable module as package.module:Name") from exc
    except Exception as exc:
        raise TwinloopError(f"{kind} module {where!r} failed to import: {type(exc).__name__}: {exc}") from exc


def load_object(spec: str, kind: str = "object"):
    """The object ``spec`` names: ``path/to/file.py:Name`` or ``package.module:Name``.

    Raises :class:`TwinloopError` naming the file, module or attribute that is missing."""
    if not is_spec(spec):
        raise TwinloopError(f"{kind} {spec!r}: expected path/to/file.py:Name or package.module:Name")
    where, attr = spec.split(":")
    module = _module(where, kind)
    try:
        return getattr(module, attr)
    except AttributeError:
        own = sorted(n for n, v in vars(module).items() if not n.startswith("_") and callable(v)
                     and getattr(v, "__module__", None) == module.__name__)
        raise TwinloopError(f"{kind} {spec!r}: {where!r} has no {attr!r}"
                            + (f"; it defines: {', '.join(own)}" if own else "")) from None


def entry_points(kind: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The installed entry points of ``kind`` (``task``, ``proposer``, ``world``) by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=GROUPS[kind])}


def entry_point(kind: str, name: str):
    """The object an installed package registers as ``name`` in ``kind``'s group, or ``None``."""
    ep = entry_points(kind).get(name)
    if ep is None:
        return None
    try:
        return ep.load()
    except Exception as exc:
        raise TwinloopError(f"{kind} {name!r} (entry point {ep.value!r} of group {GROUPS[kind]!r}) failed to "
                            f"load: {type(exc).__name__}: {exc}") from exc


def resolve(kind: str, name, registered, what: str):
    """The object ``name`` names for ``kind``: ``registered[name]``, else an installed entry
    point, else ``path/to/file.py:Name`` / ``package.module:Name``; a clear error when it names
    nothing or nothing callable (``what`` says what it should be)."""
    if not isinstance(name, str):
        raise TwinloopError(f"{kind} must be a name (str), got {type(name).__name__}")
    if name in registered:
        return registered[name]
    f = entry_point(kind, name)
    if f is None and is_spec(name):
        f = load_object(name, kind)
    if f is None:
        raise unknown(kind, name, registered)
    if not callable(f):
        raise TwinloopError(f"{kind} {name!r} is a {type(f).__name__}, not {what}")
    return f


def unknown(kind: str, name: str, registered) -> TwinloopError:
    """The error for a name that is neither registered, installed nor a location: it lists the
    registered names and says how to name one's own."""
    names = sorted(set(registered) | set(entry_points(kind)))
    return TwinloopError(f"unknown {kind} {name!r}; choose one of: {', '.join(names)}; or name your own as "
                         f"path/to/file.py:Name, package.module:Name, or an entry point of group "
                         f"{GROUPS[kind]!r}")
