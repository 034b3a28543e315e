"""The twin protocol and the batch of rollouts it returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array


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


def check_models(models, nominal: mujoco.MjModel) -> list[mujoco.MjModel]:
    """``models`` as a list, each checked to be a model of the same scene as ``nominal``."""
    sizes = (nominal.nq, nominal.nv, nominal.nu, nominal.na, nominal.nsensordata)
    for i, m in enumerate(models):
        if not isinstance(m, mujoco.MjModel) or (m.nq, m.nv, m.nu, m.na, m.nsensordata) != sizes:
            raise TwinloopError(f"params[{i}] is not a model of the same scene (nq, nv, nu, na, nsensordata differ)")
    return list(models)


class BatchTwin:
    """The public rollout calls, with their input checks, shared by every backend.

    A backend sets ``nstate`` and ``nu`` and implements ``_run(states (B, nstate), ctrl (B, T, nu),
    params, sensors) -> Rollouts``; ``states`` from :meth:`rollout` is a stride-0 broadcast of
    one state, which a backend may exploit.
    """

    nstate: int
    nu: int
    model: mujoco.MjModel
    param_space: object

    def models_for(self, params) -> list[mujoco.MjModel]:
        """One CPU model per parameter particle; the same list object while ``params`` is unchanged.

        ``params`` is ``None`` (nominal), ``(P, n)`` values of the param space, or a list of
        ``MjModel`` of the same scene (e.g. built by hand for domain randomization).
        """
        is_list = isinstance(params, (list, tuple)) and params and isinstance(params[0], mujoco.MjModel)
        if params is None:
            key = None
        elif is_list:
            key = ("models", tuple(id(m) for m in params))
        else:
            p = self.param_space.check(np.atleast_2d(params), "params")
            key = (p.shape, p.tobytes())
        cached = getattr(self, "_particles", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        if params is None:
            models = [self.model]
        elif is_list:
            models = check_models(params, self.model)
        else:
            models = self.param_space.models(self.model, p)
        # the cache holds the models, so the ids in a list key stay unique while it does
        self._particles = (key, models)
        return models

    def rollout(self, state, ctrl, params=None) -> Rollouts:
        """Simulate K control sequences from ``state`` under each parameter particle.

        Args:
            state: ``(nstate,)`` twin state ``[qpos, qvel, act]``.
            ctrl: ``(K, T, nu)`` controls per physics step (or ``(T, nu)`` for K=1).
            params: ``None`` for the nominal model, ``(P, n_params)`` particle values, or a
                list of P models of the same scene.

        Returns:
            :class:`Rollouts` with arrays ``(P, K, T+1, ...)``.
        """
        s = as_array(state, "state", (self.nstate,))
        u = as_array(ctrl, "ctrl")
        if u.ndim == 2:
            u = u[None]
        if u.ndim != 3 or u.shape[2] != self.nu:
            raise TwinloopError(f"ctrl must have shape (K, T, {self.nu}), got {np.shape(ctrl)}")
        return self._run(np.broadcast_to(s, (u.shape[0], self.nstate)), u, params, True)

    def rollout_many(self, states, ctrl, params=None, sensors: bool = True) -> Rollouts:
        """Simulate B control sequences, each from its own start state, under each particle.

        The batch form used by calibration and gap metrics (one window or transition per row).

        Args:
            states: ``(B, nstate)`` twin states, one per row.
            ctrl: ``(B, T, nu)`` controls per physics step.
            params: as for :meth:`rollout`.
            sensors: also evaluate the sensors of the final state (backends may always do).

        Returns:
            :class:`Rollouts` with arrays ``(P, B, T+1, ...)`` (``ctrl`` is ``(B, T, nu)``).
        """
        s = as_array(states, "states", (None, self.nstate))
        u = as_array(ctrl, "ctrl", (s.shape[0], None, self.nu))
        return self._run(s, u, params, sensors)

    def _run(self, states: np.ndarray, ctrl: np.ndarray, params, sensors: bool) -> Rollouts:
        raise NotImplementedError
