"""Tasks: scene + cost + success + action bounds + obs->state map + default ParamSpace.

The registry maps a name to ``"module:Class"``; a task module is imported only when its task
is made, so a task with heavy or optional dependencies costs nothing until used. Adding a task
is its module, its scene XML and one line here (or :func:`register_task` from your own code).

A user's own task needs no edit of twinloop: wherever a task name is taken (``make_task``,
``--task``), ``path/to/file.py:ArmPush`` and ``my_pkg.tasks:ArmPush`` load it from a file or a
module, and an installed package can register it under a name with an entry point of group
``twinloop.tasks`` (:mod:`twinloop.plugins`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping

from twinloop import plugins
from twinloop.errors import TwinloopError
from twinloop.tasks.base import Residual, Task, Traj
from twinloop.tasks.scene import SceneTask

TASKS: dict[str, str | Callable[..., Task]] = {
    "push-t": "twinloop.tasks.push_t:PushT",
    "block-push": "twinloop.tasks.block_push:BlockPush",
    "push-upright": "twinloop.tasks.push_upright:PushUpright",
    "pivot": "twinloop.tasks.pivot:Pivot",
    "peg-insert": "twinloop.tasks.peg_insert:PegInsert",
    "pusher-v5": "twinloop.tasks.pusher_v5:PusherV5",
    "cloth-fold": "twinloop.tasks.cloth_fold:ClothFold",
    "quadruped-walk": "twinloop.tasks.quadruped:QuadrupedWalk",
    "cloth-fold-2": "twinloop.tasks.cloth_fold_2:ClothFold2",
    "bar-lift": "twinloop.tasks.bar_lift:BarLift",
    "rope-shape": "twinloop.tasks.rope_shape:RopeShape",
}


def register_task(name: str, factory: str | Callable[..., Task]) -> None:
    """Register a task: ``factory`` is a ``Task`` subclass, a function returning a task, or a
    ``"module:Class"`` path imported on first use. The CLI's choices and help come from here."""
    if not isinstance(name, str) or not name or name.strip() != name:
        raise TwinloopError(f"task name must be a non-empty string without surrounding spaces, got {name!r}")
    if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
        raise TwinloopError(f"task {name!r}: factory must be callable or 'module:Class', got {factory!r}")
    TASKS[name] = factory


def task_factory(name: str) -> Callable[..., Task]:
    """The class (or function) that makes task ``name``: a registered name, an installed entry
    point of group ``twinloop.tasks``, ``path/to/file.py:Class`` or ``package.module:Class``."""
    f = plugins.resolve("task", name, TASKS, "a Task class or a function returning one")
    if isinstance(f, str):  # a registered "module:Class", imported on first use
        module, attr = f.split(":")
        f = getattr(importlib.import_module(module), attr)
    return f


def check_task(name: str) -> str:
    """``name`` if it makes a task (see :func:`task_factory`; nothing is built), else a
    :class:`TwinloopError` that lists the registered tasks and how to name one's own."""
    task_factory(name)
    return name


def task_defaults(task: str | Task) -> Mapping[str, object]:
    """The planner and run settings task ``task`` declares (:attr:`Task.defaults`), ``{field
    path: value}``. ``task`` is a registry name (read from its class: no scene is compiled)
    or a task."""
    kind = task_factory(task) if isinstance(task, str) else task
    return getattr(kind, "defaults", Task.defaults)


def make_task(name: str, **kw) -> Task:
    """A task by registry name (see :data:`TASKS`)."""
    factory = task_factory(name)
    try:
        inspect.signature(factory).bind(**kw)
    except TypeError as exc:  # an unknown option, named, rather than a TypeError from deep inside
        raise TwinloopError(f"task {name!r} does not take {sorted(kw)}: {exc}") from exc
    task = factory(**kw)
    if not isinstance(task, Task):
        raise TwinloopError(f"task {name!r}: its factory returned {type(task).__name__}, not a Task")
    return task


__all__ = ["TASKS", "Residual", "SceneTask", "Task", "Traj", "check_task", "make_task", "register_task",
           "task_defaults", "task_factory"]
