"""Worlds: what the robot really acts in (a driver, a gymnasium env, or a stand-in).

``make_world(task, name, **options)`` builds one by registry name; the CLI's ``--world``
choices come from :data:`WORLDS`.
"""

from __future__ import annotations

from collections.abc import Callable

from twinloop.errors import TwinloopError, choose
from twinloop.worlds.base import SimWorld, World
from twinloop.worlds.bullet import BulletWorld
from twinloop.worlds.changing import ChangingWorld
from twinloop.worlds.gym import GymWorld
from twinloop.worlds.shifted import ShiftedWorld, shifted_params


def _nominal(task, **_) -> World:
    return SimWorld(task)


def _shifted(task, severity: int = 2, seed: int = 0, **_) -> World:
    return ShiftedWorld(task, severity=severity, seed=seed)


def _changing(task, change_at: int | None = 40, factors: dict | None = None, noise: int = 1, **_) -> World:
    return ChangingWorld(task, change_at=change_at, factors=factors, noise=noise)


def _bullet(task, noise: int = 1, **_) -> World:
    return BulletWorld(task, noise=noise)


WORLDS: dict[str, Callable[..., World]] = {
    "shifted": _shifted,
    "nominal": _nominal,
    "changing": _changing,
    "bullet": _bullet,  # needs the [bullet] extra (PyBullet)
}


def make_world(task, name: str, **options) -> World:
    """A world for ``task`` by registry name; ``options`` (``severity``, ``seed`` ...) go to its
    factory, which ignores those it does not use."""
    choose("world", name, tuple(WORLDS))
    world = WORLDS[name](task, **options)
    if not isinstance(world, World):
        raise TwinloopError(f"world {name!r}: its factory returned {type(world).__name__}, not a World")
    return world


__all__ = ["WORLDS", "BulletWorld", "ChangingWorld", "GymWorld", "ShiftedWorld", "SimWorld", "World", "make_world", "shifted_params"]
