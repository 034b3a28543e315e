"""Twins: batched simulators behind one API. ``make_twin`` picks a backend by name."""

from __future__ import annotations

import mujoco

from twinloop.errors import TwinloopError, choose
from twinloop.params import ParamSpace
from twinloop.twin.base import Rollouts, Twin
from twinloop.twin.mujoco import MujocoTwin, state_size

BACKENDS = ("mujoco", "mjx", "warp")


def make_twin(backend: str, model: mujoco.MjModel, param_space: ParamSpace | None = None, **kw) -> Twin:
    """Build a twin of ``model`` on ``backend`` (``mujoco`` | ``mjx`` | ``warp``)."""
    choose("backend", backend, BACKENDS)
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
