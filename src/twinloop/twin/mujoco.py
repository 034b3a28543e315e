"""The embedded default twin: CPU MuJoCo, batched through ``mujoco.rollout`` threads.

No per-step Python: one ``Rollout.rollout`` call simulates all P x K trajectories on a
persistent thread pool (one ``MjData`` per thread), writing into reused output buffers.
"""

from __future__ import annotations

import os

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

from twinloop.errors import number
from twinloop.params import ParamSpace
from twinloop.twin.base import BatchTwin, Rollouts

_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS.value
_CTRL = mujoco.mjtState.mjSTATE_CTRL.value
#: physics steps per call into the engine: a few tenths of a second, so Ctrl-C is seen soon
CHUNK_STEPS = 50_000


def state_size(model: mujoco.MjModel) -> int:
    """Length of a twin state ``[qpos, qvel, act]``."""
    return model.nq + model.nv + model.na


class MujocoTwin(BatchTwin):
    """Rolls out batches of control sequences in CPU MuJoCo.

    Args:
        model: the nominal model.
        param_space: parameters that ``rollout(..., params=)`` may vary per particle.
        nthread: rollout threads (default: the machine's cores).
        max_speed: a rollout with any ``|qvel|`` above this is flagged unstable.
    """

    name = "mujoco"

    def __init__(
        self,
        model: mujoco.MjModel,
        param_space: ParamSpace | None = None,
        nthread: int | None = None,
        max_speed: float = 1e3,
    ):
        self._setup(model, param_space, max_speed)
        self.nthread = (os.cpu_count() or 1) if nthread is None else number(nthread, "nthread", low=1, integer=True)
        self._pool = mj_rollout.Rollout(nthread=self.nthread)
        self._datas = [mujoco.MjData(model) for _ in range(self.nthread)]
        self._scratch = mujoco.MjData(model)
        self._nfull = mujoco.mj_stateSize(model, _FULL)
        # index of qpos / qvel / act inside the full physics state (time comes first)
        self._iq = 1
        self._iv = 1 + model.nq
        self._ia = 1 + model.nq + model.nv
        self._buffers: dict[tuple[int, int], np.ndarray] = {}

    def close(self) -> None:
        self._pool.close()

    def __del__(self):
        try:
            self._pool.close()
        except Exception:
            pass

    # -- parameters --------------------------------------------------------------------------

    # -- rollout ------------------------------------------------------------------------------

    def full_state(self, state: np.ndarray, model: mujoco.MjModel | None = None) -> np.ndarray:
        """The engine's full physics state (time = 0) for a twin state ``[qpos, qvel, act]``."""
        m = model or self.model
        d = self._scratch
        mujoco.mj_resetData(m, d)
        d.qpos[:] = state[: m.nq]
        d.qvel[:] = state[m.nq : m.nq + m.nv]
        if m.na:
            d.act[:] = state[m.nq + m.nv :]
        out = np.empty(self._nfull)
        mujoco.mj_getState(m, d, out, _FULL)
        return out

    def _run(self, states: np.ndarray, u: np.ndarray, params, sensors: bool = True) -> Rollouts:
        models = self.models_for(params)
        # the full physics state of a fresh MjData does not depend on parameter values; a
        # stride-0 batch is one start state broadcast (rollout), converted once
        rows = states[:1] if states.strides[0] == 0 else states
        full0 = np.stack([self.full_state(row) for row in rows])  # (B or 1, nfull)
        return self._simulate(np.broadcast_to(full0[None], (len(models), len(states), self._nfull)), u, models, sensors)

    def _simulate(self, full0: np.ndarray, u: np.ndarray, models, final_sensors: bool = True) -> Rollouts:
        """Roll out ``u (B, T, nu)`` from ``full0 (P, B, nfull)`` under ``models`` (P of them)."""
        P, B, _ = full0.shape
        T = u.shape[1]
        n = P * B
        init = np.ascontiguousarray(full0.reshape(n, self._nfull))
        # mj_step evaluates sensors before integrating, so the rollout's sensordata[t] belongs
        # to state t; one extra step (holding the last control) yields the final state's
        # sensors in the same call, for 1/T more work. Its state is not part of the result.
        u_ext = np.concatenate([u, u[:, -1:]], axis=1)
        u_batch = np.ascontiguousarray(np.broadcast_to(u_ext[None], (P, B, T + 1, self.nu)).reshape(n, T + 1, self.nu))
        st = self._buffer(n, T + 1)
        sd = np.empty((n, T + 1, self.model.nsensordata))  # returned as is: fresh every call
        batch = self._batch_models(models, B)
        # in chunks of rows (trajectories are independent: the same result), so that Python
        # sees a Ctrl-C between chunks instead of after one long call into C
        rows = max(1, int(CHUNK_STEPS // (T + 1)))
        for a in range(0, n, rows):
            b = min(n, a + rows)
            # shapes are validated by the callers, so skip the wrapper's per-model Python checks
            self._pool.rollout(batch if b - a == n else batch[a:b], self._datas, init[a:b], u_batch[a:b], control_spec=_CTRL,
                               skip_checks=True, nstep=T + 1, state=st[a:b], sensordata=sd[a:b])
        m = self.model
        # one contiguous copy with the start state prepended; qpos/qvel are views into it
        traj = np.empty((P, B, T + 1, self._nfull))
        traj[:, :, 0] = full0
        traj[:, :, 1:] = st.reshape(P, B, T + 1, self._nfull)[:, :, :T]
        qpos = traj[..., self._iq : self._iv]
        qvel = traj[..., self._iv : self._ia]
        # mujoco.rollout stops a diverged trajectory and repeats its last state, so time stops
        # advancing; that, non-finite values and runaway speed all mark a rollout unstable.
        # (NaN fails the speed comparison too, so qvel needs no separate finiteness pass.)
        ok = np.abs(traj[:, :, -1, 0] - self.dt * T) < 0.5 * self.dt
        ok &= np.isfinite(qpos).all(axis=(2, 3))
        ok &= (np.abs(qvel) <= self.max_speed).all(axis=(2, 3))
        sens = sd.reshape(P, B, T + 1, m.nsensordata)
        return Rollouts(qpos=qpos, qvel=qvel, sensordata=sens, ctrl=u, ok=ok, dt=self.dt)

    def _batch_models(self, models: list[mujoco.MjModel], K: int) -> list[mujoco.MjModel]:
        # compare by identity while holding a reference: an id() alone can be reused by a new
        # list once the old one is freed, which silently simulated stale parameters
        src = getattr(self, "_batch_src", None)
        if (src is None or len(src) != len(models) or len(self._batch_list) != len(models) * K
                or any(a is not b for a, b in zip(src, models))):
            self._batch_list = [m for m in models for _ in range(K)]
            self._batch_src = list(models)
        return self._batch_list

    def _buffer(self, n: int, T: int) -> np.ndarray:
        """The engine's state output ``(n, T, nfull)``, reused between calls (copied out)."""
        key = (n, T)
        if key not in self._buffers:
            if len(self._buffers) > 8:
                self._buffers.clear()
            self._buffers[key] = np.empty((n, T, self._nfull))
        return self._buffers[key]
