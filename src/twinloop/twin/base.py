"""The twin protocol and the batch of rollouts it returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass
class Rollouts:
    """A batch of simulated trajectories from one start state.

    P parameter particles x K candidates; time index 0 is the start state, so T control steps
    give T+1 states. Arrays of unstable rollouts hold whatever the engine left; use ``ok``.

    Attributes:
        qpos: (P, K, T+1, nq) joint positions.
        qvel: (P, K, T+1, nv) joint velocities.
        sensordata: (P, K, T+1, nsensordata) sensor readings.
        ctrl: (K, T, nu) controls applied at each physics step.
        ok: (P, K) True where the rollout stayed finite and stable.
        dt: physics timestep (s).
    """

    qpos: np.ndarray
    qvel: np.ndarray
    sensordata: np.ndarray
    ctrl: np.ndarray
    ok: np.ndarray
    dt: float

    @property
    def n_particles(self) -> int:
        return self.qpos.shape[0]

    @property
    def n_candidates(self) -> int:
        return self.qpos.shape[1]

    @property
    def horizon_steps(self) -> int:
        return self.ctrl.shape[1]

    @property
    def n_unstable(self) -> int:
        return int((~self.ok).sum())


class Twin(Protocol):
    """A simulator that rolls out a batch of control sequences from one state.

    ``state`` is ``[qpos, qvel, act]`` of the nominal model (shape ``(nstate,)``);
    ``ctrl`` is ``(K, T, nu)`` per physics step; ``params`` is ``None`` (nominal) or
    ``(P, n_params)`` values of the twin's :class:`~twinloop.params.ParamSpace`.
    """

    model: object
    dt: float
    nu: int
    nstate: int

    def rollout(self, state: np.ndarray, ctrl: np.ndarray, params: np.ndarray | None = None) -> Rollouts: ...
