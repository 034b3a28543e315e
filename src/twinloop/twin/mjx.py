"""MJX twin: the JAX port of MuJoCo, jit-compiled, vmapped over particles and candidates.

One call runs a single compiled program: ``vmap`` over P parameter particles, ``vmap`` over K
candidates, ``lax.scan`` over T physics steps. The program is compiled once per ``(P, K, T)``
and cached; later calls with the same shapes never retrace, whatever the state, controls or
parameter values. Inputs are moved to the device once per call and the outputs come back in
one transfer, so there is no host round trip inside the time loop.

Parameters per particle: rather than re-deriving in JAX what ``mj_setConst`` computes after a
mass change (``body_subtreemass``, ``dof_invweight0``, ``dof_M0`` ...), each particle's model
is compiled on the CPU with :meth:`ParamSpace.models` (exact derived constants, the same
models the CPU twin uses), and only the MJX model leaves that a parameter can change are
stacked into ``(P, ...)`` device arrays. Which leaves those are is found once, by probing
the space at its bounds and nominal values; the rest of the model is shared by every
particle. A parameter that would change a static (NumPy, shape-defining) MJX field is
rejected with an error, since it would force a recompile.

MJX simulates in float32 unless JAX's x64 mode is on, so the arrays returned are float32:
expect agreement with the CPU twin to about 1e-4 (see tests/test_gpu_backends.py), not to
the last bit. Buffer donation is not used: every output has a different shape from every
input, so there is nothing to donate.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from twinloop.errors import TwinloopError, as_array
from twinloop.params import ParamSpace
from twinloop.twin.base import Rollouts
from twinloop.twin.mujoco import state_size


class MjxTwin:
    """Rolls out batches of control sequences in MJX (JAX), on the default JAX device.

    Args:
        model: the nominal model (spheres, boxes, planes: MJX lacks some collision pairs).
        param_space: parameters that ``rollout(..., params=)`` may vary per particle.
        max_speed: a rollout with any ``|qvel|`` above this is flagged unstable.
        device: a ``jax.Device`` (default: JAX's default, the GPU when there is one).
    """

    name = "mjx"

    def __init__(
        self,
        model: mujoco.MjModel,
        param_space: ParamSpace | None = None,
        max_speed: float = 1e3,
        device=None,
    ):
        if not isinstance(model, mujoco.MjModel):
            raise TwinloopError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        self.model = model
        self.param_space = param_space or ParamSpace(())
        self.max_speed = float(max_speed)
        self.device = device or jax.devices()[0]
        self.dt = float(model.opt.timestep)
        self.nu = model.nu
        self.nstate = state_size(model)
        try:
            mx = mjx.put_model(model, device=self.device, impl="jax")
        except NotImplementedError as exc:
            raise TwinloopError(f"MJX cannot simulate this model: {exc}") from exc
        leaves, self._treedef = jax.tree_util.tree_flatten_with_path(mx)
        self._names = [_leaf_name(path) for path, _ in leaves]
        self._leaves = [leaf for _, leaf in leaves]
        self._batched = self._probe_batched_leaves()
        self._shared = tuple(x for i, x in enumerate(self._leaves) if i not in self._batched)
        self._data0 = mjx.make_data(mx, device=self.device)
        self._param_key: bytes | None = b""
        self._models: list[mujoco.MjModel] = [model]
        self._stacked = self._stack([model])
        self._compiled: dict[tuple[int, int, int], object] = {}
        self.n_compiles = 0  # programs traced and compiled so far (one per (P, K, T))

    # -- parameters --------------------------------------------------------------------------

    def _probe_batched_leaves(self) -> tuple[int, ...]:
        """Indices of the model leaves that some parameter value changes."""
        ps = self.param_space
        if len(ps) == 0:
            return ()
        probes = ps.models(self.model, np.stack([ps.low, ps.high, ps.nominal]))
        changed: set[int] = set()
        for m in probes:
            flat, treedef = jax.tree_util.tree_flatten(mjx.put_model(m, device=self.device, impl="jax"))
            if treedef != self._treedef:
                raise TwinloopError(
                    f"a parameter of {ps.names} changes a static MJX model field; the MJX twin "
                    "can only vary continuous fields per particle (friction, mass, damping, gains...)"
                )
            changed |= {i for i, (a, b) in enumerate(zip(self._leaves, flat)) if not np.array_equal(a, b)}
        return tuple(sorted(changed))

    def models_for(self, params: np.ndarray | None) -> list[mujoco.MjModel]:
        """One compiled CPU model per parameter particle (cached while ``params`` is unchanged)."""
        self._set_params(params)
        return self._models

    def _set_params(self, params: np.ndarray | None) -> None:
        if params is None:
            key = b""
        else:
            p = self.param_space.check(np.atleast_2d(params), "params")
            key = p.tobytes() + bytes(str(p.shape), "ascii")
        if key == self._param_key:
            return
        models = [self.model] if params is None else self.param_space.models(self.model, p)
        self._stacked = self._stack(models)
        self._models, self._param_key = models, key

    def _stack(self, models: list[mujoco.MjModel]) -> tuple[jax.Array, ...]:
        """The batched leaves as ``(P, ...)`` device arrays, one row per model."""
        rows: list[list[np.ndarray]] = [[] for _ in self._batched]
        for m in models:
            mx_flat = None
            for j, i in enumerate(self._batched):
                ref = self._leaves[i]
                v = getattr(m, self._names[i], None) if self._names[i] else None
                if v is None or np.size(v) != ref.size:
                    # a leaf MJX derives itself: take it from a full conversion of this model
                    if mx_flat is None:
                        mx_flat = jax.tree_util.tree_leaves(mjx.put_model(m, device=self.device, impl="jax"))
                    v = mx_flat[i]
                rows[j].append(np.asarray(v, dtype=ref.dtype).reshape(ref.shape))
        return tuple(jax.device_put(np.stack(r), self.device) for r in rows)

    # -- rollout ------------------------------------------------------------------------------

    def rollout(self, state, ctrl, params=None) -> Rollouts:
        """Simulate K control sequences from ``state`` under each parameter particle.

        Args:
            state: ``(nstate,)`` twin state ``[qpos, qvel, act]``.
            ctrl: ``(K, T, nu)`` controls per physics step (or ``(T, nu)`` for K=1).
            params: ``None`` for the nominal model, or ``(P, n_params)`` particle values.

        Returns:
            :class:`Rollouts` with float32 arrays ``(P, K, T+1, ...)``.
        """
        s = as_array(state, "state", (self.nstate,))
        u = _check_ctrl(ctrl, self.nu)
        self._set_params(params)
        K, T, _ = u.shape
        P = len(self._models)
        fn = self._program(P, K, T)
        dtype = self._data0.qpos.dtype
        out = fn(self._shared, self._stacked, self._data0, jax.device_put(s.astype(dtype), self.device),
                 jax.device_put(u.astype(dtype), self.device))
        qpos, qvel, sens, ok = jax.device_get(out)  # the one device -> host transfer
        return Rollouts(qpos=qpos, qvel=qvel, sensordata=sens, ctrl=u, ok=ok, dt=self.dt)

    def _program(self, P: int, K: int, T: int):
        key = (P, K, T)
        if key not in self._compiled:
            if len(self._compiled) >= 8:  # bound device memory held by stale programs
                self._compiled.pop(next(iter(self._compiled)))
            dtype = self._data0.qpos.dtype
            args = (
                self._shared,
                tuple(jax.ShapeDtypeStruct((P, *self._leaves[i].shape), self._leaves[i].dtype) for i in self._batched),
                self._data0,
                jax.ShapeDtypeStruct((self.nstate,), dtype),
                jax.ShapeDtypeStruct((K, T, self.nu), dtype),
            )
            self._compiled[key] = jax.jit(self._rollout_fn).lower(*args).compile()
            self.n_compiles += 1
        return self._compiled[key]

    def _model(self, shared, batched_row) -> mjx.Model:
        leaves, si, bi = [], iter(shared), iter(batched_row)
        for i in range(len(self._leaves)):
            leaves.append(next(bi) if i in self._batched else next(si))
        return jax.tree_util.tree_unflatten(self._treedef, leaves)

    def _rollout_fn(self, shared, batched, data0, state, ctrl):
        """Traced once per shape: ``(P,...)`` leaves, ``(nstate,)`` state, ``(K, T, nu)`` ctrl."""
        m0 = self.model
        nq, nv = m0.nq, m0.nv

        def particle(batched_row):
            m = self._model(shared, batched_row)
            d = data0.replace(qpos=state[:nq], qvel=state[nq : nq + nv])
            if m0.na:
                d = d.replace(act=state[nq + nv :])
            d = mjx.forward(m, d)  # sensors at the start state

            def candidate(u):
                def step(d, ut):
                    d = mjx.step(m, d.replace(ctrl=ut))
                    return d, (d.qpos, d.qvel, d.sensordata)

                return jax.lax.scan(step, d, u)[1]

            q, v, sd = jax.vmap(candidate)(ctrl)  # (K, T, ...)
            return _prepend(d.qpos, q), _prepend(d.qvel, v), _prepend(d.sensordata, sd)

        qpos, qvel, sens = jax.vmap(particle)(batched) if self._batched else _one(particle, batched)
        ok = jnp.isfinite(qpos).all(axis=(2, 3)) & jnp.isfinite(qvel).all(axis=(2, 3))
        ok &= (jnp.abs(qvel) <= self.max_speed).all(axis=(2, 3))
        return qpos, qvel, sens, ok


def _one(particle, batched):
    # no batched leaves: one shared model for every particle (P = 1)
    return tuple(x[None] for x in particle(()))


def _prepend(x0: jax.Array, x: jax.Array) -> jax.Array:
    """``(K, T, n)`` trajectory with the start value ``(n,)`` put in front: ``(K, T+1, n)``."""
    return jnp.concatenate([jnp.broadcast_to(x0, (x.shape[0], 1, x0.shape[-1])), x], axis=1)


def _leaf_name(path) -> str | None:
    """The MjModel attribute a top-level leaf mirrors (``.body_mass`` -> ``body_mass``)."""
    if len(path) == 1 and isinstance(path[0], jax.tree_util.GetAttrKey):
        return path[0].name
    return None


def _check_ctrl(ctrl, nu: int) -> np.ndarray:
    u = as_array(ctrl, "ctrl")
    if u.ndim == 2:
        u = u[None]
    if u.ndim != 3 or u.shape[2] != nu:
        raise TwinloopError(f"ctrl must have shape (K, T, {nu}), got {np.shape(ctrl)}")
    return u
