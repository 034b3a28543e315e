"""The twin protocol; the batch of rollouts it returns is :class:`twinloop.rollouts.Rollouts`."""

from __future__ import annotations

import hashlib
from typing import Protocol

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.params import ParamSpace
from twinloop.rollouts import Rollouts  # also exported from here, where backends import it


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
    param_space: ParamSpace  # the parameters ``params`` rows are values of

    def rollout(self, state: np.ndarray, ctrl: np.ndarray, params: np.ndarray | None = None) -> Rollouts:
        """``(P, K, T+1, ...)`` rollouts of ``ctrl (K, T, nu)`` (or ``(T, nu)``) from ``state``."""
        ...

    def rollout_many(self, states: np.ndarray, ctrl: np.ndarray, params: np.ndarray | None = None,
                     sensors: bool = True) -> Rollouts:
        """``(P, B, T+1, ...)`` rollouts of ``ctrl (B, T, nu)``, row ``b`` from ``states[b]``
        (``(B, nstate)``)."""
        ...


def _size_names() -> tuple[str, ...]:
    m = mujoco.MjModel.from_xml_string("<mujoco/>")
    return tuple(sorted(a for a in dir(m) if a.startswith("n") and type(getattr(m, a)) is int))


#: every size field of an ``MjModel`` (nq, nv, ngeom, nbody, nconmax, narena, nbuffer ...):
#: the engine's buffers (``MjData``, rollout outputs) are laid out by them
MODEL_SIZES = _size_names()


def model_signature(model: mujoco.MjModel) -> tuple:
    """What two models must share to be stepped with the same ``MjData`` and read alike: every
    size field and the timestep."""
    return (*(getattr(model, a) for a in MODEL_SIZES), float(model.opt.timestep))


#: the sizes a scene fingerprint hashes: what lays out a task's arrays, stable across MuJoCo
#: versions (unlike buffer sizes such as narena)
SCENE_SIZES = ("nq", "nv", "nu", "na", "nbody", "njnt", "ngeom", "nsite", "nsensor", "nsensordata",
               "ntendon", "neq", "npair", "nexclude", "nmocap", "nkey")


def scene_fingerprint(model: mujoco.MjModel) -> str:
    """A short hash of a compiled scene's sizes and names (16 hex digits): equal for two models
    of the same scene whatever their physical parameters, different for another scene. Episodes
    carry it, so a consumer can refuse episodes recorded on another scene."""
    if not isinstance(model, mujoco.MjModel):
        raise TwinloopError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
    sizes = ",".join(f"{a}={getattr(model, a)}" for a in SCENE_SIZES)
    return hashlib.sha256(sizes.encode() + b"|" + bytes(model.names)).hexdigest()[:16]


def scene_mismatch(model: mujoco.MjModel, nominal: mujoco.MjModel, timestep: bool = True) -> str:
    """``""`` when ``model`` fits ``nominal``'s signature (with or without the timestep), else
    what differs (e.g. ``"ngeom 304 vs 4"``)."""
    k = len(MODEL_SIZES) + int(timestep)
    a, b = model_signature(model)[:k], model_signature(nominal)[:k]
    if a == b:
        return ""
    names = (*MODEL_SIZES, "timestep")
    diff = [f"{name} {x:g} vs {y:g}" for name, x, y in zip(names, a, b) if x != y]
    return ", ".join(diff[:6]) + (f" (+{len(diff) - 6} more)" if len(diff) > 6 else "")


def check_twin_scene(twin, model: mujoco.MjModel, task_name: str) -> None:
    """Raise unless ``twin`` simulates the scene of ``model`` (a task's): a task reads the
    twin's arrays by its own layout, so equal actuator counts alone are not enough. Every size
    field is compared (the timestep may differ); a twin without a MuJoCo model (e.g. a learned
    one) is compared by ``nu`` and ``nstate``."""
    m = getattr(twin, "model", None)
    if isinstance(m, mujoco.MjModel):
        diff = scene_mismatch(m, model, timestep=False)
    else:
        want = {"nu": model.nu, "nstate": model.nq + model.nv + model.na}
        diff = ", ".join(f"{k} {getattr(twin, k, None)} vs {v}" for k, v in want.items() if getattr(twin, k, None) != v)
    if diff:
        raise TwinloopError(f"the twin does not simulate task {task_name!r}'s scene: {diff} (twin vs task)")


def check_models(models, nominal: mujoco.MjModel) -> list[mujoco.MjModel]:
    """``models`` as a list, each checked to be a model of the same scene as ``nominal``.

    The batched engine runs without its own checks, on ``MjData`` made for ``nominal``: a model
    with, say, more geoms but the same nq/nv would write past those buffers (a segfault), so
    every size field is compared, not only the state sizes.
    """
    out = list(models)
    for i, m in enumerate(out):
        if not isinstance(m, mujoco.MjModel):
            raise TwinloopError(f"params[{i}] must be a mujoco.MjModel, got {type(m).__name__}")
        diff = scene_mismatch(m, nominal)
        if diff:
            raise TwinloopError(f"params[{i}] is not a model of the twin's scene: {diff} (this model vs the twin's)")
    return out


class BatchTwin:
    """The public rollout calls, with their input checks, shared by every backend.

    A backend sets ``nstate`` and ``nu`` and implements ``_run(states (B, nstate), ctrl (B, T, nu),
    params, sensors) -> Rollouts``; ``states`` from :meth:`rollout` is a stride-0 broadcast of
    one state, which a backend may exploit.
    """

    nstate: int
    nu: int
    model: mujoco.MjModel
    param_space: ParamSpace

    def _setup(self, model: mujoco.MjModel, param_space, max_speed: float) -> None:
        """Check and keep what every backend shares: ``model``, ``param_space`` (its addresses
        must exist in ``model``), ``max_speed``, ``dt``, ``nu``, ``nstate``."""
        if not isinstance(model, mujoco.MjModel):
            raise TwinloopError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        if param_space is not None and not isinstance(param_space, ParamSpace):
            raise TwinloopError(f"param_space must be a ParamSpace or None, got {type(param_space).__name__}")
        self.model = model
        self.param_space = param_space if param_space is not None else ParamSpace(())
        self.param_space.check_model(model)
        # NaN would flag every rollout unstable (inf: no speed limit)
        self.max_speed = number(max_speed, "max_speed", low=0, low_open=True, finite=False)
        self.dt = float(model.opt.timestep)
        self.nu = model.nu
        self.nstate = model.nq + model.nv + model.na

    def models_for(self, params) -> list[mujoco.MjModel]:
        """One CPU model per parameter particle; the same list object while ``params`` is unchanged.

        ``params`` is ``None`` (nominal), ``(P, n)`` values of the param space, or a list of
        ``MjModel`` of the same scene (e.g. built by hand for domain randomization).
        """
        is_list = isinstance(params, (list, tuple)) and any(isinstance(m, mujoco.MjModel) for m in params)
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
