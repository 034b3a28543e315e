"""MJX twin: the JAX port of MuJoCo, jit-compiled, vmapped over particles and candidates.

One call runs a single compiled program: ``vmap`` over P parameter particles, ``vmap`` over K
candidates, ``lax.scan`` over T physics steps. The program is compiled once per ``(P, K, T)``
and cached; later calls with the same shapes never retrace, whatever the states, controls or
parameter values. Inputs go to the device once per call and the outputs come back in one
transfer, so there is no host round trip inside the time loop. ``rollout`` (one start state)
and ``rollout_many`` (a start state per row) share the program: a single state is
broadcast on the host (K x nstate floats, negligible next to the controls).

Parameters per particle: rather than re-deriving in JAX what ``mj_setConst`` computes after a
mass change (``body_subtreemass``, ``dof_invweight0``, ``dof_M0`` ...), each particle's model
is compiled on the CPU with :meth:`ParamSpace.models` (exact derived constants, the same
models the CPU twin uses), and only the MJX model leaves that a parameter can change are
stacked into ``(P, ...)`` device arrays; the rest of the model is shared by every particle.
Which leaves those are is found once, by probing the space at its bounds and nominal values,
so new parameter values never recompile. A list of hand-built models (``params=[m1, m2]``)
batches whichever leaves differ from the nominal model (a new set compiles a new program).
A difference in a static (NumPy, shape-defining) MJX field is rejected with an error.

Precision and known differences from CPU MuJoCo:
- MJX computes in float32 unless JAX's x64 mode is on; the arrays returned are float32.
  Matrix products are traced at ``highest`` precision (no TF32 on GPUs).
- Under ``implicitfast``, MJX keeps the implicit velocity term of a position actuator (kv)
  even while its force is clipped by ``forcerange``; MuJoCo C drops it then. Pushers whose
  actuators saturate (a target far from the pusher) therefore move differently, and contact
  outcomes that depend on them diverge. With unsaturated actuators the two agree to ~1e-4.
- Buffer donation is not used: every output has a different shape from every input.

``sensordata[:, :, t]`` are the sensors of state ``t`` (as in the CPU twin): step ``t``
evaluates them before integrating, and the final state gets one more ``forward``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from twinloop.errors import TwinloopError
from twinloop.params import ParamSpace
from twinloop.twin.base import BatchTwin, Rollouts


class MjxTwin(BatchTwin):
    """Rolls out batches of control sequences in MJX (JAX), on one JAX device.

    Args:
        model: the nominal model (spheres, boxes, planes: MJX lacks some collision pairs).
        param_space: parameters that ``rollout(..., params=)`` may vary per particle.
        max_speed: a rollout with any ``|qvel|`` above this is flagged unstable.
        device: a ``jax.Device`` (default: JAX's default, the GPU when there is one).
    """

    name = "mjx"

    def __init__(self, model: mujoco.MjModel, param_space: ParamSpace | None = None,
                 max_speed: float = 1e3, device=None):
        self._setup(model, param_space, max_speed)
        self.device = device or jax.devices()[0]
        flat, self._treedef = jax.tree_util.tree_flatten_with_path(self._put(model))
        self._names = [_leaf_name(path) for path, _ in flat]
        self._leaves = [leaf for _, leaf in flat]
        ps = self.param_space
        probes = ps.models(model, np.stack([ps.low, ps.high, ps.nominal])) if len(ps) else []
        self._space_batched = self._differing(probes)
        self._data0 = mjx.make_data(self._put(model), device=self.device, impl="jax")
        self._dtype = np.dtype(self._data0.qpos.dtype)
        self._models: list[mujoco.MjModel] = [model]
        self._batched: tuple[int, ...] = ()
        self._stacked: tuple[jax.Array, ...] | None = None
        self._compiled: dict[tuple, object] = {}
        self.n_compiles = 0  # programs traced and compiled so far
        self._set_params(None)

    def close(self) -> None:
        """Drop the compiled programs (device memory); the twin recompiles if used again."""
        self._compiled.clear()

    def _put(self, m: mujoco.MjModel) -> mjx.Model:
        try:
            return mjx.put_model(m, device=self.device, impl="jax")
        except NotImplementedError as exc:
            raise TwinloopError(f"MJX cannot simulate this model: {exc}") from exc

    # -- parameters --------------------------------------------------------------------------

    def _differing(self, models: list[mujoco.MjModel]) -> tuple[int, ...]:
        """Indices of the leaves in which any of ``models`` differs from the nominal model."""
        changed: set[int] = set()
        for m in models:
            flat, treedef = jax.tree_util.tree_flatten(self._put(m))
            if treedef != self._treedef:
                raise TwinloopError(
                    "the particle models differ from the nominal model in a static MJX field; "
                    "the MJX twin can only vary continuous fields (friction, mass, damping, gains...)"
                )
            changed |= {i for i, (a, b) in enumerate(zip(self._leaves, flat, strict=True)) if not np.array_equal(a, b)}
        return tuple(sorted(changed))

    def _set_params(self, params) -> None:
        models = self.models_for(params)
        if models is self._models and self._stacked is not None:
            return
        is_list = isinstance(params, (list, tuple)) and params and isinstance(params[0], mujoco.MjModel)
        batched = self._space_batched
        if is_list:
            batched = tuple(sorted(set(self._space_batched) | set(self._differing(models))))
        rows: list[list[np.ndarray]] = [[] for _ in batched]
        for m in models:
            converted = None
            for j, i in enumerate(batched):
                ref = self._leaves[i]
                v = getattr(m, self._names[i], None) if self._names[i] else None
                if v is None or np.size(v) != ref.size:  # a leaf MJX derives itself
                    if converted is None:
                        converted = jax.tree_util.tree_leaves(self._put(m))
                    v = converted[i]
                rows[j].append(np.asarray(v, dtype=ref.dtype).reshape(ref.shape))
        self._stacked = tuple(jax.device_put(np.stack(r), self.device) for r in rows)
        self._models, self._batched = models, batched

    # -- rollout ------------------------------------------------------------------------------

    def _run(self, states: np.ndarray, u: np.ndarray, params, sensors: bool = True) -> Rollouts:
        self._set_params(params)
        K, T, _ = u.shape
        P = len(self._models)
        fn = self._program(P, K, T)
        out = fn(self._shared(), self._stacked, self._data0,
                 jax.device_put(states.astype(self._dtype), self.device),
                 jax.device_put(u.astype(self._dtype), self.device))
        qpos, qvel, sens, ok = jax.device_get(out)  # the one device -> host transfer
        return Rollouts(qpos=qpos, qvel=qvel, sensordata=sens, ctrl=u, ok=ok, dt=self.dt)

    def _shared(self) -> tuple[jax.Array, ...]:
        b = set(self._batched)
        return tuple(x for i, x in enumerate(self._leaves) if i not in b)

    def _program(self, P: int, K: int, T: int):
        key = (P, K, T, self._batched)
        if key not in self._compiled:
            if len(self._compiled) >= 8:  # bound device memory held by stale programs
                self._compiled.pop(next(iter(self._compiled)))
            dt = self._dtype
            args = (
                self._shared(),
                tuple(jax.ShapeDtypeStruct((P, *self._leaves[i].shape), self._leaves[i].dtype) for i in self._batched),
                self._data0,
                jax.ShapeDtypeStruct((K, self.nstate), dt),
                jax.ShapeDtypeStruct((K, T, self.nu), dt),
            )
            fn = functools.partial(self._rollout_fn, P, self._batched)
            # full float32 matmuls: on GPUs JAX may otherwise use TF32 (10-bit mantissa) in the
            # solver, and these matrices are far too small for tensor cores to pay off
            with jax.default_matmul_precision("highest"):
                self._compiled[key] = jax.jit(fn).lower(*args).compile()
            self.n_compiles += 1
        return self._compiled[key]

    def _rollout_fn(self, P, batched, shared, stacked, data0, states, ctrl):
        """Traced once per program: ``(P, ...)`` leaves, ``(K, nstate)`` states, ``(K, T, nu)`` ctrl."""
        m0 = self.model
        nq, nv = m0.nq, m0.nv
        b = set(batched)

        def particle(row):
            leaves, si, bi = [], iter(shared), iter(row)
            for i in range(len(self._leaves)):
                leaves.append(next(bi) if i in b else next(si))
            m = jax.tree_util.tree_unflatten(self._treedef, leaves)

            def candidate(s, u):
                d = data0.replace(qpos=s[:nq], qvel=s[nq : nq + nv])
                if m0.na:
                    d = d.replace(act=s[nq + nv :])
                d = mjx.forward(m, d)  # sensors at the start state

                def step(d, ut):
                    d = mjx.step(m, d.replace(ctrl=ut))
                    return d, (d.qpos, d.qvel, d.sensordata)

                d_end, (q, v, sd) = jax.lax.scan(step, d, u)
                # step t evaluates the sensors of state t before integrating: states 0..T-1
                # come from the scan, state T needs one more forward
                s_end = mjx.forward(m, d_end).sensordata
                return _prepend(d.qpos, q), _prepend(d.qvel, v), jnp.concatenate([sd, s_end[None]])

            return jax.vmap(candidate)(states, ctrl)  # (K, T+1, ...)

        if batched and P > 1:
            qpos, qvel, sens = jax.vmap(particle)(stacked)
        else:
            # one particle, or no leaf varies: an unbatched model (vmapping model leaves, even
            # over P = 1, made XLA's CPU program 2x slower) shared by every particle
            row = tuple(x[0] for x in stacked) if batched else ()
            qpos, qvel, sens = (jnp.broadcast_to(x, (P, *x.shape)) for x in particle(row))
        # NaN fails the speed comparison, so qvel needs no separate finiteness pass
        ok = jnp.isfinite(qpos).all(axis=(2, 3)) & (jnp.abs(qvel) <= self.max_speed).all(axis=(2, 3))
        return qpos, qvel, sens, ok


def _prepend(x0: jax.Array, x: jax.Array) -> jax.Array:
    """``(T, n)`` trajectory with its start value ``(n,)`` put in front: ``(T+1, n)``."""
    return jnp.concatenate([x0[None], x], axis=0)


def _leaf_name(path) -> str | None:
    """The MjModel attribute a top-level leaf mirrors (``.body_mass`` -> ``body_mass``)."""
    if len(path) == 1 and isinstance(path[0], jax.tree_util.GetAttrKey):
        return path[0].name
    return None
