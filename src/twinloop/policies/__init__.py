"""Base proposers: scripted heuristics and policies distilled from refined actions.

A task's own scripted proposer comes from ``task.default_proposer()``; the point-pushing
machinery the planar tasks share is :class:`PointPusher`. ``make_proposer(task, name)``
builds a proposer by registry name (the CLI's ``--proposer`` choices come from
:data:`PROPOSERS`).
"""

from __future__ import annotations

from collections.abc import Callable

from twinloop.errors import TwinloopError, choose
from twinloop.policies.scripted import PointPusher, ScriptedConfig, pusher_excitation


def _scripted(task):
    proposer = task.default_proposer()
    if proposer is None:
        raise TwinloopError(f"task {task.name!r} has no scripted proposer; use proposer 'none'")
    return proposer


PROPOSERS: dict[str, Callable] = {
    "scripted": _scripted,
    "none": lambda task: None,
}


def make_proposer(task, name: str):
    """The base proposer ``name`` for ``task`` (``None`` for ``none``)."""
    choose("proposer", name, tuple(PROPOSERS))
    return PROPOSERS[name](task)


__all__ = ["PROPOSERS", "PointPusher", "ScriptedConfig", "make_proposer", "pusher_excitation"]
