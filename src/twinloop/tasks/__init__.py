"""Tasks: scene + cost + success + action bounds + obs->state map + default ParamSpace."""

from __future__ import annotations

from twinloop.errors import choose
from twinloop.tasks.base import Residual, Task, Traj
from twinloop.tasks.block_push import BlockPush

TASKS: dict[str, type[Task]] = {"block-push": BlockPush}

try:  # push-t is registered by its module when present
    from twinloop.tasks.push_t import PushT

    TASKS["push-t"] = PushT
except ImportError:  # pragma: no cover - only while push_t is being written
    pass


def make_task(name: str, **kw) -> Task:
    """A task by name (``push-t`` | ``block-push``)."""
    choose("task", name, tuple(TASKS))
    return TASKS[name](**kw)


__all__ = ["TASKS", "BlockPush", "Residual", "Task", "Traj", "make_task"]
