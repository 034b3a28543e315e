"""Twins: batched simulators behind one API. ``make_twin`` picks a backend by registry name.

The registry maps a name to ``"module:Class"`` and the extra its module needs; a backend's
module is imported only when that backend is made, so an optional dependency costs nothing
until used. A new backend is one file (a :class:`~twinloop.twin.base.BatchTwin` subclass) and
one line here (or :func:`register_backend` from your own code).
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, choose
from twinloop.params import ParamSpace
from twinloop.twin.base import Rollouts, Twin
from twinloop.twin.mujoco import MujocoTwin, state_size

#: name -> (``"module:Class"`` or a factory, the pip extra its module needs or ``None``)
BACKENDS: dict[str, tuple[str | Callable[..., Twin], str | None]] = {
    "mujoco": ("twinloop.twin.mujoco:MujocoTwin", None),
    "mjx": ("twinloop.twin.mjx:MjxTwin", "gpu"),
    "warp": ("twinloop.twin.warp:WarpTwin", "warp"),
    "learned": ("twinloop.twin.learned:LearnedTwin", "learn"),
    "hybrid": ("twinloop.twin.learned:HybridTwin", "learn"),
}


def register_backend(name: str, factory: str | Callable[..., Twin], extra: str | None = None) -> None:
    """Register a backend: ``factory(model, param_space, **kw) -> Twin`` or ``"module:Class"``
    imported on first use; ``extra`` names the pip extra to suggest when that import fails."""
    if not isinstance(name, str) or not name or name.strip() != name:
        raise TwinloopError(f"backend name must be a non-empty string without surrounding spaces, got {name!r}")
    if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
        raise TwinloopError(f"backend {name!r}: factory must be callable or 'module:Class', got {factory!r}")
    BACKENDS[name] = (factory, extra)


def backend_factory(name: str) -> Callable[..., Twin]:
    """The class (or function) that makes backend ``name``."""
    choose("backend", name, tuple(BACKENDS))
    factory, extra = BACKENDS[name]
    if not isinstance(factory, str):
        return factory
    module, attr = factory.split(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        hint = f": pip install 'twinloop[{extra}]'" if extra else ""
        raise TwinloopError(f"backend {name!r} needs the [{extra}] extra{hint} ({exc})" if extra
                            else f"backend {name!r} could not be imported ({exc})") from exc


def make_twin(backend: str, model: mujoco.MjModel, param_space: ParamSpace | None = None,
              timestep: float | None = None, **kw) -> Twin:
    """Build a twin of ``model`` on ``backend`` (see :data:`BACKENDS`); ``kw`` go to the backend.

    ``timestep`` (s) simulates the twin at another physics timestep than the model's (a
    coarser one simulates fewer steps per control tick; check it with
    :func:`twinloop.control.check_timestep` before trusting it).
    """
    factory = backend_factory(backend)
    if timestep is not None:
        if not (isinstance(timestep, (int, float)) and np.isfinite(timestep) and timestep > 0):
            raise TwinloopError(f"timestep must be > 0 s, got {timestep!r}")
        model = copy.copy(model)  # MjModel's copy is deep: the task's model is untouched
        model.opt.timestep = float(timestep)
    return factory(model, param_space, **kw)


__all__ = ["BACKENDS", "MujocoTwin", "Rollouts", "Twin", "backend_factory", "make_twin", "register_backend",
           "state_size"]
