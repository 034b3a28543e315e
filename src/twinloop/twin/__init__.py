"""Twins: batched simulators behind one API. ``make_twin`` picks a backend by name."""

from __future__ import annotations

import copy

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, choose
from twinloop.params import ParamSpace
from twinloop.twin.base import Rollouts, Twin
from twinloop.twin.mujoco import MujocoTwin, state_size

BACKENDS = ("mujoco", "mjx", "warp")


def make_twin(backend: str, model: mujoco.MjModel, param_space: ParamSpace | None = None,
              timestep: float | None = None, **kw) -> Twin:
    """Build a twin of ``model`` on ``backend`` (``mujoco`` | ``mjx`` | ``warp``).

    ``timestep`` (s) simulates the twin at another physics timestep than the model's (a
    coarser one simulates fewer steps per control tick; check it with
    :func:`twinloop.control.check_timestep` before trusting it).
    """
    choose("backend", backend, BACKENDS)
    if timestep is not None:
        if not (isinstance(timestep, (int, float)) and np.isfinite(timestep) and timestep > 0):
            raise TwinloopError(f"timestep must be > 0 s, got {timestep!r}")
        model = copy.copy(model)  # MjModel's copy is deep: the task's model is untouched
        model.opt.timestep = float(timestep)
    if backend == "mujoco":
        return MujocoTwin(model, param_space, **kw)
    if backend == "mjx":
        try:
            from twinloop.twin.mjx import MjxTwin
        except ImportError as exc:
            raise TwinloopError(
                f"backend 'mjx' needs the [gpu] extra (jax, mujoco-mjx): pip install 'twinloop[gpu]' ({exc})"
            ) from exc
        return MjxTwin(model, param_space, **kw)
    try:
        from twinloop.twin.warp import WarpTwin
    except ImportError as exc:
        raise TwinloopError(
            f"backend 'warp' needs the [warp] extra (mujoco-warp): pip install 'twinloop[warp]' ({exc})"
        ) from exc
    return WarpTwin(model, param_space, **kw)


__all__ = ["BACKENDS", "MujocoTwin", "Rollouts", "Twin", "make_twin", "state_size"]
