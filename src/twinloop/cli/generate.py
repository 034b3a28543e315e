"""Commands generated from the config dataclasses: one description per field.

A command names the fields it shows as options (``{path: flags}``); each option's help is its
field's description (the ``Attributes:`` section of the field's class), its type the field's
annotation. Every other field is reachable through a repeated ``--set PATH=VALUE``, and
``--recipe NAME|file.toml`` loads a recipe. An option left out sets nothing, so the layers below
it (library < task < recipe) keep their value; :func:`resolve` says which layer set each one.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping

import typer

from twinloop.calib.monitor import ACTIONS
from twinloop.cli.common import console, guard
from twinloop.errors import TwinloopError
from twinloop.plan import OPTIMIZER_NAMES
from twinloop.policies import PROPOSERS
from twinloop.recipes import Recipe, load_recipe
from twinloop.recipes.build import with_built
from twinloop.run.config import (
    configure,
    field_type,
    get_path,
    parse_sets,
    path_doc,
    unwrap_optional,
)
from twinloop.tasks import TASKS, task_defaults
from twinloop.twin import BACKENDS
from twinloop.worlds import WORLDS

SET_HELP = ("Set any field by its path, typed by its annotation (repeatable): --set planner.refiner.n_knots=3, "
            "--set experiment.world_seed=none. `twinloop fields COMMAND` lists the paths.")
RECIPE_HELP = "A recipe (`twinloop recipes` lists them) or a recipe file (.toml): its settings, then the options."


def resolve(cls, command: str, recipe: str | None, cli: Mapping[str, object], task_path: str = "experiment.task",
            fallback_task: Callable[[], str | None] | None = None):
    """``(config, sources, recipe)`` of a command: library defaults < the task's defaults <
    the recipe's settings < the command line's, each path set by the last that names it. The
    task whose defaults apply: the command line's, else the recipe's, else ``fallback_task()``
    (the task a dataset was recorded on), else the field's default."""
    rec: Recipe | None = load_recipe(recipe) if recipe else None
    if rec is not None and rec.command != command:
        raise TwinloopError(f"recipe {rec.name!r} is for `twinloop {rec.command}`, not `twinloop {command}`")
    settings = with_built(rec, console.print) if rec is not None else {}
    task = cli.get(task_path, settings.get(task_path))
    if task is None and fallback_task is not None:
        task = fallback_task()
    if task is None:
        task = field_default(cls, task_path)
    cfg, sources = configure(cls, task_defaults(str(task)) if task is not None else {}, settings, cli)
    return cfg, sources, rec


def field_default(cls, path: str):
    """The library default of the field at ``path``."""
    return get_path(cls(), path)


def _choices(path: str) -> str:
    """The registered names a field takes (its registry's, read when the command is made)."""
    registries = {"task": TASKS, "world": WORLDS, "optimizer": OPTIMIZER_NAMES, "backend": BACKENDS,
                  "proposer": PROPOSERS, "monitor": ACTIONS}
    names = registries.get(path.rsplit(".", 1)[-1])
    return f" Choices: {' | '.join(names)}." if names else ""


def _option(cls, path: str, flags: tuple[str, ...]) -> tuple[str, inspect.Parameter]:
    tp = field_type(cls, path)
    inner, _ = unwrap_optional(tp)
    if typing.get_origin(inner) is tuple:
        inner = str  # a comma-separated list, parsed by the field's annotation
    long, *short = flags
    decls = [f"--{long}/--no-{long}"] if inner is bool else [f"--{long}", *short]
    var = long.replace("-", "_")
    doc = path_doc(cls, path)
    opt = typer.Option(None, *decls, help=f"{doc}{_choices(path)} [{path}]", show_default=False)
    return var, inspect.Parameter(var, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=inner | None)


def config_command(cls, command: str, options: Mapping[str, tuple[str, ...]], body: Callable,
                   extra: Mapping[str, tuple[type, object]] | None = None, doc: str = "",
                   task_path: str = "experiment.task",
                   task_of: Callable[[dict], str | None] | None = None) -> Callable:
    """A typer command for config class ``cls``: an option per ``options`` path, plus
    ``--recipe`` and ``--set``, plus ``extra`` command-only options ``{name: (type,
    typer.Option)}``. It resolves the config and calls ``body(cfg, sources, recipe, **extra)``.
    ``task_of(extra)``: the task whose defaults apply when neither the command line nor the
    recipe names one (``None``: none known)."""
    params, names = [], {}
    for path, flags in options.items():
        var, p = _option(cls, path, flags)
        names[var] = path
        params.append(p)
    params.append(inspect.Parameter("recipe", inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                                    default=typer.Option(None, help=RECIPE_HELP)))
    params.append(inspect.Parameter("set_", inspect.Parameter.KEYWORD_ONLY, annotation=list[str] | None,
                                    default=typer.Option(None, "--set", help=SET_HELP, metavar="PATH=VALUE")))
    for name, (tp, opt) in (extra or {}).items():
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=tp, default=opt))

    def fn(**kw):
        cli = {}
        for var, path in names.items():
            v = kw.pop(var)
            if v is not None:
                cli[path] = v
        sets = parse_sets(cls, kw.pop("set_"))
        clash = sorted(set(sets) & set(cli))
        if clash:
            raise TwinloopError(f"{', '.join(clash)} given both as an option and with --set: give it once")
        fallback = None if task_of is None else (lambda extra=dict(kw): task_of(extra))
        cfg, sources, rec = resolve(cls, command, kw.pop("recipe"), {**cli, **sets}, task_path, fallback)
        return body(cfg, sources, rec, **kw)

    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {p.name: p.annotation for p in params}
    fn.__name__ = command.replace("-", "_")
    fn.__doc__ = doc
    return guard(fn)
