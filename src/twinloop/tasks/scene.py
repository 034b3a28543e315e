"""A task from a user's own MJCF scene and a few lines of cost: :class:`SceneTask`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import MappingProxyType

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.tasks.base import Residual, Task
from twinloop.tasks.checks import check_keyframe


class SceneTask(Task):
    """A task from your own MJCF scene and a cost written in a few lines, no subclass needed.

    Example::

        task = SceneTask("reach.xml", name="reach",
                         residuals=[Residual("tip", 1.0, lambda t: t.sensordata[..., 1:, 0:3] - goal)],
                         error=lambda q: np.linalg.norm(q[..., :2] - goal[:2], axis=-1),
                         tolerance=0.01)

    The observation is the full twin state; the start state is the scene's first keyframe (or
    its default pose), with ``start_noise`` (rad or m, uniform) added to ``qpos``; actions are
    bounded by the actuators' ``ctrlrange``. Success is ``error(qpos) <= tolerance`` unless a
    ``success`` function is given.

    Args:
        xml: path to the scene (MJCF).
        residuals: the cost terms (:class:`Residual`).
        error: ``f((..., nq) qpos) -> (...)`` distance to the goal.
        tolerance: success threshold on ``error``.
        success: optional ``f((nq,) qpos) -> bool`` replacing the threshold test.
        name, control_period, max_ticks, cost_stride, success_dwell, error_unit: as the class
            attributes (``error_unit`` unknown by default).
        horizon: the task's default planning horizon (s): its ``planner.refiner.horizon``
            default (:attr:`Task.defaults`).
        start_noise: half-width of the uniform noise added to the start ``qpos``.
    """

    def __init__(self, xml, residuals: Sequence[Residual], error: Callable[[np.ndarray], np.ndarray],
                 tolerance: float = 0.0, success: Callable[[np.ndarray], bool] | None = None, *,
                 name: str = "scene", control_period: float = 0.05, horizon: float = 1.0,
                 max_ticks: int = 100, cost_stride: int = 1, start_noise: float = 0.0,
                 success_dwell: float = Task.success_dwell, error_unit: str = ""):
        self.xml = str(Path(xml).resolve())
        self.name = str(name)
        self.error_unit = str(error_unit)  # unknown unless given: tables then say "task units"
        self._residuals = tuple(residuals)
        if not self._residuals or not all(isinstance(r, Residual) for r in self._residuals):
            raise TwinloopError("residuals must be a non-empty sequence of Residual")
        for label, fn in (("error", error), ("success", success)):
            if fn is not None and not callable(fn):
                raise TwinloopError(f"{label} must be callable, got {type(fn).__name__}")
        self._error, self._success = error, success
        for label, v, ok in (("tolerance", tolerance, tolerance >= 0), ("control_period", control_period, control_period > 0),
                             ("horizon", horizon, horizon > 0), ("start_noise", start_noise, start_noise >= 0)):
            if not (np.isfinite(v) and ok):
                raise TwinloopError(f"{label} must be a finite number in range, got {v}")
        self.tolerance = float(tolerance)
        self.control_period = float(control_period)
        self.defaults = MappingProxyType({**Task.defaults, "planner.refiner.horizon": float(horizon)})
        self.max_ticks, self.cost_stride = int(max_ticks), int(cost_stride)
        self.start_noise = float(start_noise)
        self.success_dwell = number(success_dwell, "success_dwell (s)", low=0)
        self.substeps  # noqa: B018 - the period must be a multiple of the timestep: fail now
        check_keyframe(self.model, self.name)

    def residuals(self) -> tuple[Residual, ...]:
        return self._residuals

    def initial_state(self, rng: np.random.Generator) -> np.ndarray:
        m = self.model
        d = mujoco.MjData(m)
        if m.nkey:
            mujoco.mj_resetDataKeyframe(m, d, 0)
        qpos = d.qpos + rng.uniform(-self.start_noise, self.start_noise, m.nq) if self.start_noise else d.qpos.copy()
        return np.concatenate([qpos, d.qvel, d.act])

    def hold_action(self, state: np.ndarray) -> np.ndarray:
        m = self.model
        if m.nkey:  # a keyframe's ctrl is where its author meant the actuators to rest
            return np.clip(m.key_ctrl[0], self.action_low, self.action_high)
        return super().hold_action(state)

    def error(self, qpos: np.ndarray) -> np.ndarray:
        return np.asarray(self._error(np.asarray(qpos, dtype=float)), dtype=float)

    def success(self, qpos: np.ndarray) -> bool:
        q = as_array(qpos, "qpos", (self.model.nq,))
        if self._success is not None:
            return bool(self._success(q))
        return bool(self.error(q) <= self.tolerance)
