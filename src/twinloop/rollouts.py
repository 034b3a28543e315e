"""The batch of simulated trajectories a twin returns and a task scores (here, so that both
:mod:`twinloop.twin` and :mod:`twinloop.tasks` may import it)."""

from __future__ import annotations

from dataclasses import dataclass

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
        uncertainty: (K, T+1, nq) how unsure a learned twin is of each position (its ensemble's
            spread, same units as qpos); ``None`` for a physics twin.
    """

    qpos: np.ndarray
    qvel: np.ndarray
    sensordata: np.ndarray
    ctrl: np.ndarray
    ok: np.ndarray
    dt: float
    uncertainty: np.ndarray | None = None

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
