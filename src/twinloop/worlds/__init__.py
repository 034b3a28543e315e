"""Worlds: what the robot really acts in (a driver, a gymnasium env, or a stand-in).

``make_world(task, name, **options)`` builds one by registry name; the CLI's ``--world``
choices come from :data:`WORLDS`. A name with an argument is registered as ``PREFIX:ARG``
(``gym:ENV_ID``, ``remote:ADDRESS``) and matches any ``PREFIX:...``; plain ``gym`` is the
task's own gymnasium env (``task.gym_id``); ``gym:MODULE:ENV_ID`` imports ``MODULE`` first, which
registers a third-party env (gymnasium's convention).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from twinloop.errors import TwinloopError
from twinloop.worlds.base import SimWorld, World
from twinloop.worlds.bullet import BulletWorld
from twinloop.worlds.changing import ChangingWorld
from twinloop.worlds.gym import GymWorld
from twinloop.worlds.per_episode import PerEpisodeWorld
from twinloop.worlds.realtime import RealtimeWorld, TickRecord
from twinloop.worlds.shifted import ShiftedWorld, shifted_params
from twinloop.worlds.twin import ModelWorld, TwinWorld


def _nominal(task, period: float | None = None, **_) -> World:
    return SimWorld(task, period=period)


def _shifted(task, severity: int = 2, seed: int = 0, period: float | None = None, **_) -> World:
    return ShiftedWorld(task, severity=severity, seed=seed, period=period)


def _gym(task, env_id: str = "", **_) -> World:
    env_id = env_id or task.gym_id
    if not env_id:
        raise TwinloopError(f"task {task.name!r} names no gymnasium env; give one as gym:ENV_ID")
    return GymWorld(env_id, task=task)


def _remote(task, address: str = "", token: str | None = None, timeout: float = 5.0, **_) -> World:
    from twinloop.worlds.remote import RemoteWorld  # needs the [remote] extra (pyzmq)

    if not address:
        raise TwinloopError("a remote world needs an address: remote:HOST:PORT")
    return RemoteWorld(address, task=task, token=token, timeout=timeout)


def _changing(task, change_at: int | None = 40, factors: dict | None = None, noise: int = 1, **_) -> World:
    return ChangingWorld(task, change_at=change_at, factors=factors, noise=noise)


def _bullet(task, noise: int = 1, **_) -> World:
    return BulletWorld(task, noise=noise)


def _pymunk(task, noise: int = 1, **_) -> World:
    from twinloop.worlds.pymunk2d import PymunkWorld  # needs the [pymunk] extra

    return PymunkWorld(task, noise=noise)


WORLDS: dict[str, Callable[..., World]] = {
    "shifted": _shifted,
    "nominal": _nominal,
    "changing": _changing,
    "bullet": _bullet,  # needs the [bullet] extra (PyBullet)
    "pymunk": _pymunk,  # needs the [pymunk] extra (Pymunk, a 2-D engine)
    "gym": _gym,
    "gym:ENV_ID": _gym,
    "remote:ADDRESS": _remote,
}

#: worlds whose hidden physics their ``seed`` option draws (what a world distribution,
#: :class:`PerEpisodeWorld`, draws from); the others take no seed
SEEDED_WORLDS: tuple[str, ...] = ("shifted",)


def resolve_world(name: str) -> tuple[Callable[..., World], str | None]:
    """``(factory, argument)`` for a world name; the argument is what follows ``PREFIX:``."""
    if not isinstance(name, str):
        raise TwinloopError(f"world must be a name, got {name!r}")
    if ":" not in name and name in WORLDS:
        return WORLDS[name], None
    for key, factory in WORLDS.items():
        prefix, sep, _ = key.partition(":")
        if sep and name.startswith(prefix + ":") and len(name) > len(prefix) + 1:
            return factory, name[len(prefix) + 1:]
    raise TwinloopError(f"unknown world {name!r}; choose one of: {', '.join(WORLDS)}")


#: the class each registered factory builds, for its declared capabilities (``World.simulated``
#: ...); a world that needs an extra is named by import path, loaded when asked
WORLD_TYPES: dict[Callable[..., World], type[World] | str] = {
    _shifted: ShiftedWorld, _nominal: SimWorld, _changing: ChangingWorld, _bullet: BulletWorld, _gym: GymWorld,
    _remote: "twinloop.worlds.remote:RemoteWorld",
}


def world_type(name: str) -> type[World]:
    """The kind of world a registry name builds (its class: what it declares it can do),
    without building one."""
    factory, _ = resolve_world(name)
    kind = WORLD_TYPES.get(factory, World)
    if isinstance(kind, str):
        module, _, cls = kind.partition(":")
        kind = getattr(importlib.import_module(module), cls)
    return kind


def make_world(task, name: str, **options) -> World:
    """A world for ``task`` by registry name; ``options`` (``severity``, ``seed``, ``period``,
    ``token`` ...) go to its factory, which ignores those it does not use."""
    factory, arg = resolve_world(name)
    world = factory(task, **options) if arg is None else factory(task, arg, **options)
    if not isinstance(world, World):
        raise TwinloopError(f"world {name!r}: its factory returned {type(world).__name__}, not a World")
    return world


__all__ = ["SEEDED_WORLDS", "WORLDS", "BulletWorld", "ChangingWorld", "GymWorld", "ModelWorld", "PerEpisodeWorld",
           "RealtimeWorld", "ShiftedWorld", "SimWorld", "TickRecord", "TwinWorld", "World", "make_world", "resolve_world", "shifted_params",
           "world_type"]
