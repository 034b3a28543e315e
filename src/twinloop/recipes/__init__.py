"""Recipes: each published result fully specified, as a TOML file shipped with the package.

A recipe names the command that runs it, describes it, sets config fields by path (a
``[config]`` table, nested as the config's sections are) and states the result it reproduces::

    command = "run"
    description = "Push-T in a shifted world: the scripted proposer alone vs with MPPI"

    [config.experiment]
    task = "push-t"
    episodes = 20

    [config.planner.refiner]
    num_samples = 32

    [result]
    controller = "refined"
    successes = 20
    episodes = 20
    source = "benchmarks/RESULTS.md"

``twinloop run --recipe NAME`` (or a file path) runs it; the command line still overrides it
(library default < task default < recipe < command line).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from twinloop.errors import TwinloopError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: the commands a recipe may name
COMMANDS = ("run", "evaluate", "distill", "rsr", "calibrate")


@dataclass(frozen=True)
class Recipe:
    """A loaded recipe.

    Attributes:
        name: the file's stem (``push-t-demo``).
        command: the ``twinloop`` command that runs it (:data:`COMMANDS`).
        description: what it runs, in a sentence.
        settings: ``{field path: value}`` of the command's config.
        result: the published result it reproduces (``successes``, ``episodes``, ``source`` ...).
        path: the file it was read from.
        needs: recipes whose outputs this one uses (a distilled checkpoint, a calibration),
            built once into a cache folder and named in settings as ``{recipe:NAME}`` (see
            :mod:`twinloop.recipes.build`).
    """

    name: str
    command: str
    description: str
    settings: dict = field(default_factory=dict)
    result: dict = field(default_factory=dict)
    path: str = ""
    needs: tuple[str, ...] = ()

    def command_line(self) -> str:
        """How to run it."""
        return f"twinloop {self.command} --recipe {self.name}"


def _flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def recipe_names() -> list[str]:
    """The recipes shipped with twinloop, by name."""
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir() if p.name.endswith(".toml"))


def load_recipe(name_or_path: str) -> Recipe:
    """A shipped recipe by name, or a recipe file (a path ending in ``.toml``)."""
    if str(name_or_path).endswith(".toml"):
        path = Path(name_or_path)
        if not path.is_file():
            raise TwinloopError(f"recipe file {str(path)!r} does not exist")
        text, where = path.read_text(), str(path)
    else:
        names = recipe_names()
        if name_or_path not in names:
            raise TwinloopError(f"unknown recipe {name_or_path!r}: shipped recipes are {', '.join(names)} "
                                "(or give a path to a .toml file)")
        res = resources.files(__name__) / f"{name_or_path}.toml"
        text, where = res.read_text(), str(res)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TwinloopError(f"recipe {where!r} is not valid TOML: {exc}") from exc
    return _recipe(Path(where).stem, data, where)


def _recipe(name: str, data: dict, where: str) -> Recipe:
    unknown = sorted(set(data) - {"command", "description", "config", "result", "needs"})
    if unknown:
        raise TwinloopError(f"recipe {where!r}: unknown keys {unknown} (expected command, description, config, "
                            "result, needs)")
    needs = data.get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) and n for n in needs):
        raise TwinloopError(f"recipe {where!r}: needs must be a list of recipe names, got {needs!r}")
    command = data.get("command")
    if command not in COMMANDS:
        raise TwinloopError(f"recipe {where!r}: command must be one of {', '.join(COMMANDS)}, got {command!r}")
    for key, kind in (("description", str), ("config", dict), ("result", dict)):
        if key in data and not isinstance(data[key], kind):
            raise TwinloopError(f"recipe {where!r}: {key} must be a {kind.__name__}")
    return Recipe(name=name, command=command, description=data.get("description", ""),
                  settings=_flatten(data.get("config", {})), result=dict(data.get("result", {})), path=where,
                  needs=tuple(needs))


__all__ = ["COMMANDS", "Recipe", "load_recipe", "recipe_names"]
