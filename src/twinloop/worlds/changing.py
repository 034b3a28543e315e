"""A world whose physics changes mid-episode: what a live gap monitor must notice.

``ChangingWorld(task, change_at, factors, noise)`` is the task's nominal scene until control
tick ``change_at`` of every episode; from then on the parameters named in ``factors`` (of
``task.param_space()``) are multiplied by their factor (clipped to their bounds): a floor
that turns sticky, a block that picks up a load. Observations carry the noise of ShiftedWorld
severity ``noise`` (0: none).
"""

from __future__ import annotations

import numpy as np

from twinloop.errors import TwinloopError, number
from twinloop.tasks.base import Task
from twinloop.worlds.base import SimWorld
from twinloop.worlds.shifted import noise_scales


class ChangingWorld(SimWorld):
    """The nominal scene, whose parameters change at a given tick of every episode.

    Args:
        task: the task.
        change_at: control tick at which the change happens (``None``: never, a nominal world
            with the same noise).
        factors: ``{parameter name: factor}`` over ``task.param_space()``.
        noise: observation noise level, as ShiftedWorld's severity (0-3).
    """

    name = "changing"
    has_hidden_params = True
    adjustable_period = False  # the change comes at a control tick: it steps at the control period
    counterpart = None  # its noise is no shifted world's: no threshold calibrated for it

    def __init__(self, task: Task, change_at: int | None = 40, factors: dict | None = None, noise: int = 1):
        super().__init__(task)
        self.change_at = None if change_at is None else number(change_at, "change_at", low=0, integer=True)
        space = task.param_space()
        factors = {"block_friction": 2.0} if factors is None else dict(factors)
        unknown = sorted(set(factors) - set(space.names))
        if unknown:
            raise TwinloopError(f"factors name unknown parameter(s) {unknown}; {task.name} has {space.names}")
        x = space.nominal.copy()
        for k, f in factors.items():
            j = space.names.index(k)
            x[j] = x[j] * number(f, f"factor of {k}", low=0, low_open=True)
        self.factors = factors
        self.changed_params = np.clip(x, space.low, space.high)
        self._nominal, self._changed = task.model, space.apply(task.model, self.changed_params)
        self.obs_noise = noise_scales(task, number(noise, "noise", low=0, high=3, integer=True))

    def reset(self, seed: int) -> np.ndarray:
        self.model = self._nominal
        return super().reset(seed)

    def step(self, action) -> tuple[np.ndarray, dict]:
        if self.change_at is not None and self.t == self.change_at:
            self.model = self._changed  # same sizes: the MjData carries over
        return super().step(action)

    def _observe(self) -> np.ndarray:
        obs = self.task.obs_from_data(self.model, self.data)
        return obs + self.rng.normal(0.0, 1.0, obs.shape) * self.obs_noise

    def describe(self) -> dict:
        return {"world": self.name, "task": self.task.name, "change_at": self.change_at,
                "factors": {k: float(v) for k, v in self.factors.items()},
                "obs_noise": {n: float(s) for n, s in zip(self.task.obs_names, self.obs_noise, strict=True)}}
