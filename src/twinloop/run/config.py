"""Configurations that compose, and the layers their values come from.

A loop's config (``RunConfig``, ``RSRConfig`` ...) is a frozen dataclass that holds
*sections* (:class:`~twinloop.run.sections.PlannerConfig`,
:class:`~twinloop.run.sections.ExperimentConfig` ...) beside its own fields; every field is
defined once, with its docstring in the ``Attributes:`` section of its class. A field is named
by its *path*, the attribute names from the loop's config down to it
(``planner.refiner.horizon``).

Values flow one way: library default < task default (:attr:`Task.defaults
<twinloop.tasks.Task.defaults>`) < recipe < command line; :func:`configure` applies the
layers and says which one set each value (``summary.json``'s ``config_sources``).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import operator
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass, replace

from twinloop.errors import TwinloopError

#: where a value came from, lowest first
SOURCES = ("library", "task", "recipe", "cli")


def composed(aliases: Mapping[str, str] | None = None):
    """Class decorator (after ``@dataclass``) for a config holding sections.

    Construction stays flat where that is cheap: ``RunConfig(task="pivot", episodes=2)`` puts
    each keyword that is no field of the config into the section that has a field of that name
    (or where ``aliases`` maps it: ``{"repair_push": "grasp.push"}``), and reading
    ``cfg.task`` reads ``cfg.experiment.task``. The sections' fields stay defined once."""

    def wrap(cls):
        own = {f.name for f in fields(cls)}
        init = cls.__init__
        routes = dict(aliases or {})
        for f in fields(cls):
            kind = section_type(cls, f.name)
            if kind is not None:
                routes.update({g.name: f"{f.name}.{g.name}" for g in fields(kind) if g.name not in own
                               and g.name not in routes})

        @functools.wraps(init)
        def __init__(self, *args, **kw):
            flat = {k: kw.pop(k) for k in list(kw) if k not in own}
            unknown = sorted(k for k in flat if k not in routes)
            if unknown:
                raise TwinloopError(f"{cls.__name__} has no field {', '.join(map(repr, unknown))}: its fields are "
                                    f"{', '.join(sorted(own | set(routes)))}")
            groups: dict[str, dict] = {}
            for name, value in flat.items():
                head, _, rest = routes[name].partition(".")
                if rest:
                    groups.setdefault(head, {})[rest] = value
                else:
                    kw[head] = value
            for head, values in groups.items():  # each section made once: its checks see all its values
                start = kw.get(head) or _default(cls, head)
                kw[head] = with_values(type(start), values, start)
            init(self, *args, **kw)

        def __getattr__(self, name):
            path = routes.get(name)
            if path is None or name.startswith("__"):
                raise AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")
            return get_path(self, path)

        cls.__init__ = __init__
        cls.__getattr__ = __getattr__
        cls.flat_names = types.MappingProxyType(routes)
        return cls

    return wrap


def _default(cls, name: str):
    f = next(f for f in fields(cls) if f.name == name)
    if f.default_factory is not MISSING:
        return f.default_factory()
    if f.default is None:  # an optional section given a field: the section's own defaults
        return section_type(cls, name)()
    return f.default


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def unwrap_optional(tp):
    """``(inner type, optional)`` of an annotation ``X | None``."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else functools.reduce(operator.or_, rest)), True
    return tp, False


def section_type(cls, name: str):
    """The dataclass type of field ``name`` of ``cls`` (``X`` or ``X | None``), or ``None``."""
    tp, _ = unwrap_optional(_hints(cls)[name])
    return tp if isinstance(tp, type) and is_dataclass(tp) else None


def canonical(cls, path: str) -> str:
    """``path`` with a config's flat name (``perception``, ``task``: see :func:`composed`)
    replaced by the path of its field (``camera.perception``, ``experiment.task``)."""
    return getattr(cls, "flat_names", {}).get(path, path)


def field_type(cls, path: str):
    """The annotation of the field at ``path`` below the config class ``cls``; an unknown path
    is a :class:`TwinloopError` naming it and the closest known ones."""
    tp = _field_type(cls, path)
    if tp is None:
        known = leaf_paths(cls)
        close = difflib.get_close_matches(path, known, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else f"known are {', '.join(known)}"
        raise TwinloopError(f"unknown setting {path!r} of {cls.__name__}: {hint} (twinloop fields COMMAND lists "
                            "them)")
    return tp


def _field_type(cls, path: str):
    head, _, rest = path.partition(".")
    hints = _hints(cls)
    if head not in hints or head.startswith("_") or head not in {f.name for f in fields(cls)}:
        return None
    if not rest:
        return hints[head]
    sub = section_type(cls, head)
    return None if sub is None else _field_type(sub, rest)


def leaf_paths(cls, prefix: str = "") -> list[str]:
    """Every settable path below ``cls`` (sections expanded), in declaration order."""
    out = []
    for f in fields(cls):
        if not f.init:
            continue
        sub = section_type(cls, f.name)
        out += leaf_paths(sub, f"{prefix}{f.name}.") if sub is not None else [prefix + f.name]
    return out


def get_path(cfg, path: str):
    """The value at ``path`` (``None`` below an absent optional section)."""
    for name in path.split("."):
        if cfg is None:
            return None
        cfg = getattr(cfg, name)
    return cfg


def set_path(cfg, path: str, value):
    """A copy of ``cfg`` with the field at ``path`` set (an absent optional section is made)."""
    head, _, rest = path.partition(".")
    if not rest:
        return replace(cfg, **{head: value})
    sub = getattr(cfg, head)
    if sub is None:
        sub = section_type(type(cfg), head)()
    return replace(cfg, **{head: set_path(sub, rest, value)})


def field_docs(cls) -> dict[str, str]:
    """``{field: description}`` from the ``Attributes:`` section of a class's docstring (one
    description per field: the help text of its option)."""
    doc = inspect.getdoc(cls) or ""
    m = re.search(r"^Attributes:\n(.*?)(?:\n\S|\Z)", doc, re.S | re.M)
    out, name = {}, None
    for line in (m.group(1) if m else "").splitlines():
        head = re.match(r"^ {4}(\w+(?:, \w+)*): ?(.*)$", line)
        if head:
            names, text = head.group(1).split(", "), head.group(2)
            for name in names:
                out[name] = text
        elif name is not None and line.strip():
            for n in names:
                out[n] += " " + line.strip()
    return {k: _plain(v) for k, v in out.items()}


def _plain(text: str) -> str:
    """reST roles and literals as plain text (``:attr:`x <a.b>``` -> ``x``)."""
    text = re.sub(r":\w+:`~?([^`<]*?)\s*<[^>]*>`", r"\1", text)
    text = re.sub(r":\w+:`~?(?:[\w.]*\.)?([^`]*)`", r"\1", text)
    return text.replace("``", "")


def path_doc(cls, path: str) -> str:
    """The description of the field at ``path``."""
    head, _, rest = path.partition(".")
    if rest:
        return path_doc(section_type(cls, head), rest)
    return field_docs(cls).get(head, "")


def parse_value(text: str, tp, path: str):
    """``text`` (a command-line or recipe value) as the annotation ``tp`` of ``path`` says:
    ``none`` for an optional field's ``None``, ``a,b`` for a tuple."""
    if not isinstance(text, str):
        return _check_value(text, tp, path)
    inner, optional = unwrap_optional(tp)
    if optional and text.strip().lower() in ("none", "null", ""):
        return None
    origin = typing.get_origin(inner)
    try:
        if origin is tuple:
            item = typing.get_args(inner)[0]
            return tuple(parse_value(t.strip(), item, path) for t in text.split(",") if t.strip())
        if inner is bool:
            low = text.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                raise ValueError(text)
            return low in ("true", "1", "yes", "on")
        if inner in (int, float, str):
            return inner(text)
    except ValueError:
        raise TwinloopError(f"setting {path}={text!r}: expected {type_name(tp)}") from None
    raise TwinloopError(f"setting {path!r} ({type_name(tp)}) cannot be set from text")


def _check_value(value, tp, path: str):
    """A recipe's TOML value (or a task default's) checked against the annotation (an int where
    a float goes is a float; a list or tuple where a tuple goes is a tuple)."""
    inner, optional = unwrap_optional(tp)
    if value is None and optional:
        return None
    if typing.get_origin(inner) is tuple and isinstance(value, (list, tuple)):
        item = typing.get_args(inner)[0]
        return tuple(_check_value(v, item, path) for v in value)
    if inner is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(inner, type) and isinstance(value, inner) and not (inner is int and isinstance(value, bool)):
        return value
    raise TwinloopError(f"setting {path}={value!r}: expected {type_name(tp)}")


def type_name(tp) -> str:
    """A field's annotation in words (``an integer or none``)."""
    inner, optional = unwrap_optional(tp)
    if typing.get_origin(inner) is tuple:
        item = typing.get_args(inner)[0]
        plural = {int: "integers", float: "numbers", str: "strings", bool: "true/false values"}.get(item, str(item))
        name = f"a comma-separated list of {plural}"
    else:
        name = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(inner, str(inner))
    return name + (" or none" if optional else "")


def parse_sets(cls, items) -> dict[str, object]:
    """``--set path=value`` items -> ``{path: value}``, typed by each field's annotation."""
    out = {}
    for item in items or ():
        path, eq, text = item.partition("=")
        if not eq or not path.strip():
            raise TwinloopError(f"--set {item!r}: expected PATH=VALUE, e.g. planner.refiner.horizon=1.0")
        path = canonical(cls, path.strip())
        out[path] = parse_value(text.strip(), field_type(cls, path), path)
    return out


def configure(cls, task_defaults: Mapping[str, object] = types.MappingProxyType({}),
              recipe: Mapping[str, object] = types.MappingProxyType({}),
              cli: Mapping[str, object] = types.MappingProxyType({}), base=None):
    """``(config, sources)``: ``cls``'s library defaults (or ``base``), then the task's defaults,
    the recipe's values and the command line's, each path set by the last layer that names it.
    ``sources`` maps every path to the layer that set it (:data:`SOURCES`). A task default for a
    path ``cls`` does not have is skipped (the run loop's settings mean nothing to another)."""
    layers = tuple((name, {canonical(cls, p): v for p, v in values.items()})
                   for name, values in (("task", task_defaults), ("recipe", recipe), ("cli", cli)))
    for _name, values in layers[1:]:
        for path in values:
            field_type(cls, path)  # an unknown path in a recipe or on the command line is an error
    known = set(leaf_paths(cls))
    sources = dict.fromkeys(known, "library")
    values = {}
    for name, layer in layers:
        for path, value in layer.items():
            if path in known or any(p.startswith(path + ".") for p in known):
                values[path] = parse_value(value, field_type(cls, path), path)
                sources[path] = name
    try:
        cfg = with_values(cls, values, base)
    except TypeError as exc:  # a section's own check, named
        raise TwinloopError(f"{cls.__name__}: {exc}") from exc
    return cfg, dict(sorted(sources.items()))


def with_values(cls, values: Mapping[str, object], base=None):
    """A ``cls`` built once from its library defaults (or ``base``'s fields) with ``{path:
    value}`` set: each section is made once, so its checks see the final values together."""
    groups: dict[str, dict] = {}
    kw = {}
    for path, value in values.items():
        head, _, rest = path.partition(".")
        if rest:
            groups.setdefault(head, {})[rest] = value
        else:
            kw[head] = value
    for head, sub_values in groups.items():
        start = kw.get(head, getattr(base, head) if base is not None else _default(cls, head))
        kind = section_type(cls, head)
        if start is None:
            start = kind()
        kw[head] = with_values(kind, sub_values, start)
    if base is not None:
        return replace(base, **kw)
    return cls(**kw)


def config_dict(cfg) -> dict:
    """A config as JSON-ready nested dicts, without secrets (fields declared ``repr=False``)."""
    out = {}
    for f in fields(cfg):
        if not f.repr:
            continue
        v = getattr(cfg, f.name)
        out[f.name] = config_dict(v) if is_dataclass(v) else list(v) if isinstance(v, tuple) else v
    return out


def sources_of(cfg, task_defaults: Mapping[str, object] = types.MappingProxyType({})) -> dict[str, str]:
    """Where each setting of a config made in code came from, judged by its value: ``task``
    where it is the task's default, ``library`` where it is the library's, else ``caller``."""
    library = type(cfg)()
    out = {}
    for path in leaf_paths(type(cfg)):
        v = get_path(cfg, path)
        if path in task_defaults and v == task_defaults[path]:
            out[path] = "task"
        else:
            out[path] = "library" if v == get_path(library, path) else "caller"
    return out
