"""MuJoCo-Warp twin: P x K batched worlds stepped by ``mujoco_warp`` kernels.

World ``w`` simulates candidate ``w // P`` under particle ``w % P``. That order lets a
per-particle model field be a ``(P, ...)`` array: MuJoCo-Warp reads batched model fields at
row ``world % rows``. As in the MJX twin, each particle's model is compiled on the CPU with
:meth:`ParamSpace.models` (so mass changes carry the derived constants ``mj_setConst``
refreshes), and only the device fields a parameter can change, found once by probing the
space, are batched.

One rollout is one launch sequence: reset, write the start state, ``forward`` (sensors at
time 0), then ``T`` x (write ctrl[t], ``step``, record). On CUDA the whole sequence is
captured into a CUDA graph once per ``(P, K, T)`` and replayed; new parameter values,
states and controls are copied into the captured buffers in place. Controls go to the
device once per call and the ``(P, K, T+1, ...)`` trajectories come back once.

Buffer knobs (MuJoCo-Warp allocates contacts and constraints up front):
    nconmax: contacts per world, pooled over all worlds (``naconmax = nconmax * P * K``);
        default: MuJoCo-Warp's estimate for the model.
    njmax: constraint rows per world, a hard per-world cap; default: MuJoCo-Warp's estimate.
A world that overflows either buffer is flagged not ``ok``; raise the knob if that happens.

Outputs are float32 and agree with CPU MuJoCo to ~1e-6 on the project's scenes. As in the
CPU twin, ``sensordata[:, :, t]`` are the sensors of state ``t``.
"""

from __future__ import annotations

import dataclasses

import mujoco
import mujoco_warp as mjw
import numpy as np
import warp as wp

from twinloop.errors import TwinloopError, number
from twinloop.params import ParamSpace
from twinloop.twin.base import BatchTwin, Rollouts


@wp.kernel
def _set_state(state: wp.array2d(dtype=float), P: int, nq: int, nv: int, na: int,
               qpos: wp.array2d(dtype=float), qvel: wp.array2d(dtype=float), act: wp.array2d(dtype=float)):
    w = wp.tid()
    k = w // P
    for i in range(nq):
        qpos[w, i] = state[k, i]
    for i in range(nv):
        qvel[w, i] = state[k, nq + i]
    for i in range(na):
        act[w, i] = state[k, nq + nv + i]


@wp.kernel
def _set_ctrl(ctrl: wp.array3d(dtype=float), t: int, P: int, out: wp.array2d(dtype=float)):
    w, j = wp.tid()
    out[w, j] = ctrl[w // P, t, j]


@wp.kernel
def _record(qpos: wp.array2d(dtype=float), qvel: wp.array2d(dtype=float), sens: wp.array2d(dtype=float),
            t: int, P: int, out_qpos: wp.array4d(dtype=float), out_qvel: wp.array4d(dtype=float),
            out_sens: wp.array4d(dtype=float)):
    # one launch per step for all three arrays; column j of each, where it has one
    w, j = wp.tid()
    p, k = w % P, w // P
    if j < qpos.shape[1]:
        out_qpos[p, k, t, j] = qpos[w, j]
    if j < qvel.shape[1]:
        out_qvel[p, k, t, j] = qvel[w, j]
    if j < sens.shape[1]:
        out_sens[p, k, t, j] = sens[w, j]


@dataclasses.dataclass
class _Program:
    """Device buffers (and the CUDA graph) of one ``(P, K, T)`` rollout shape."""

    data: object
    state: wp.array
    ctrl: wp.array
    qpos: wp.array
    qvel: wp.array
    sens: wp.array
    graph: object = None


class WarpTwin(BatchTwin):
    """Rolls out batches of control sequences in MuJoCo-Warp.

    Args:
        model: the nominal model.
        param_space: parameters that ``rollout(..., params=)`` may vary per particle.
        max_speed: a rollout with any ``|qvel|`` above this is flagged unstable.
        device: a Warp device name (default: Warp's preferred device, the GPU when there is one).
        nconmax: contacts per world (pooled across worlds); ``None``: MuJoCo-Warp's estimate.
        njmax: constraint rows per world (hard cap); ``None``: MuJoCo-Warp's estimate.
        graph: capture the rollout into a CUDA graph (ignored on the CPU).
    """

    name = "warp"

    def __init__(
        self,
        model: mujoco.MjModel,
        param_space: ParamSpace | None = None,
        max_speed: float = 1e3,
        device: str | None = None,
        nconmax: int | None = None,
        njmax: int | None = None,
        graph: bool = True,
    ):
        for knob, v in (("nconmax", nconmax), ("njmax", njmax)):
            if v is not None:
                number(v, knob, low=1, integer=True)
        self._setup(model, param_space, max_speed)
        self.nconmax, self.njmax = nconmax, njmax
        wp.init()
        self.device = wp.get_device(device) if device else wp.get_preferred_device()
        self.graph = bool(graph) and self.device.is_cuda
        self._nominal: dict[str, wp.array] = {}  # the shared arrays of fields ever batched
        self._row_shape: dict[str, tuple[int, ...]] = {}
        self._direct: dict[str, bool] = {}  # field copies the MjModel field of the same name
        with wp.ScopedDevice(self.device):
            try:
                self._mw = mjw.put_model(model)
            except NotImplementedError as exc:
                raise TwinloopError(f"MuJoCo-Warp cannot simulate this model: {exc}") from exc
            ps = self.param_space
            probes = ps.models(model, np.stack([ps.low, ps.high, ps.nominal])) if len(ps) else []
            self._space_batched = self._differing(probes)
        self._models: list[mujoco.MjModel] = [model]
        self._batched: tuple[str, ...] = ()
        self._values: dict[str, np.ndarray] | None = None
        self._fields: dict[tuple, dict[str, wp.array]] = {}  # per (P, batched): (P, ...) arrays
        self._programs: dict[tuple, _Program] = {}
        self.n_compiles = 0  # rollout programs built (and captured, on CUDA) so far
        self._set_params(None)

    def close(self) -> None:
        """Free the per-shape device buffers and graphs; the twin rebuilds them if used again."""
        self._programs.clear()
        self._fields.clear()
        for n, a in self._nominal.items():
            setattr(self._mw, n, a)

    # -- parameters --------------------------------------------------------------------------

    def _differing(self, models: list[mujoco.MjModel]) -> tuple[str, ...]:
        """Device fields in which any of ``models`` differs from the nominal model."""
        if not models:
            return ()
        converted = [mjw.put_model(m) for m in models]
        names = []
        for f in dataclasses.fields(self._mw):
            a = self._nominal.get(f.name, getattr(self._mw, f.name))
            if isinstance(a, wp.array) and any(not np.array_equal(a.numpy(), getattr(c, f.name).numpy()) for c in converted):
                names.append(f.name)
        try:
            mjw.put_model(self.model, batch_sizes={n: 2 for n in names})
        except ValueError as exc:
            raise TwinloopError(
                f"the particle models differ from the nominal model in a MuJoCo-Warp field that cannot vary per world ({exc})"
            ) from exc
        for n in names:
            self._nominal.setdefault(n, getattr(self._mw, n))
            shape = self._nominal[n].numpy().shape[1:]  # one row as NumPy sees it (vec3 -> 3)
            self._row_shape[n] = shape
            direct = all(
                hasattr(m, n) and np.size(getattr(m, n)) == int(np.prod(shape))
                and np.allclose(np.reshape(getattr(m, n), shape), getattr(c, n).numpy()[0], rtol=1e-6, atol=0)
                for m, c in zip(models, converted, strict=True)
            )
            self._direct[n] = self._direct.get(n, True) and direct
        return tuple(sorted(names))

    def _set_params(self, params) -> None:
        models = self.models_for(params)
        if models is self._models and self._values is not None:
            return
        is_list = isinstance(params, (list, tuple)) and params and isinstance(params[0], mujoco.MjModel)
        batched = self._space_batched
        if is_list:
            with wp.ScopedDevice(self.device):
                batched = tuple(sorted(set(self._space_batched) | set(self._differing(models))))
        values: dict[str, list[np.ndarray]] = {n: [] for n in batched}
        for m in models:
            converted = None
            for n in batched:
                if self._direct[n]:
                    values[n].append(np.reshape(getattr(m, n), self._row_shape[n]))
                    continue
                if converted is None:  # a field MuJoCo-Warp derives itself
                    with wp.ScopedDevice(self.device):
                        converted = mjw.put_model(m)
                values[n].append(getattr(converted, n).numpy()[0])
        self._values = {n: np.stack(v) for n, v in values.items()}
        self._models, self._batched = models, batched
        arrays = self._fields.get((len(models), batched))
        for n, a in (arrays or {}).items():
            a.assign(self._values[n])  # in place: captured graphs stay valid

    def _use_fields(self, P: int) -> None:
        """Point the device model at the ``(P, ...)`` arrays of the current parameters."""
        fkey = (P, self._batched)
        if fkey not in self._fields:
            if len(self._fields) >= 8:
                old = next(iter(self._fields))
                del self._fields[old]  # graphs over these arrays must go with them
                self._programs = {k: v for k, v in self._programs.items() if k[:2] != old}
            self._fields[fkey] = {
                n: wp.array(self._values[n], dtype=self._nominal[n].dtype, device=self.device)
                for n in self._batched
            }
        for n, a in self._nominal.items():
            setattr(self._mw, n, self._fields[fkey].get(n, a))

    # -- rollout ------------------------------------------------------------------------------

    def _run(self, states: np.ndarray, u: np.ndarray, params, sensors: bool = True) -> Rollouts:
        self._set_params(params)
        K, T, _ = u.shape
        P = len(self._models)
        with wp.ScopedDevice(self.device):
            self._use_fields(P)
            prog = self._program(P, K, T)
            prog.state.assign(states.astype(np.float32))
            prog.ctrl.assign(u.astype(np.float32))
            if prog.graph is not None:
                wp.capture_launch(prog.graph)
            else:
                self._launch(prog, P, T)
            qpos, qvel, sens = prog.qpos.numpy(), prog.qvel.numpy(), prog.sens.numpy()
            overflow = prog.data.overflow.numpy().reshape(K, P).T
            # sens[t + 1] holds what step t evaluated, the sensors of state t; the final state
            # needs one more forward (world w is candidate w // P, particle w % P)
            mjw.forward(self._mw, prog.data)
            final = prog.data.sensordata.numpy().reshape(K, P, -1).transpose(1, 0, 2)
            sens = np.concatenate([sens[:, :, 1:], final[:, :, None]], axis=2)
        # NaN fails the speed comparison, so qvel needs no separate finiteness pass
        ok = np.isfinite(qpos).all(axis=(2, 3)) & (np.abs(qvel) <= self.max_speed).all(axis=(2, 3))
        ok &= overflow == 0
        return Rollouts(qpos=qpos, qvel=qvel, sensordata=sens, ctrl=u, ok=ok, dt=self.dt)

    def _program(self, P: int, K: int, T: int) -> _Program:
        key = (P, self._batched, K, T)
        if key in self._programs:
            return self._programs[key]
        if len(self._programs) >= 8:  # bound device memory held by stale shapes
            self._programs.pop(next(iter(self._programs)))
        m = self.model
        n = P * K
        kw = {} if self.nconmax is None else {"nconmax": self.nconmax}
        if self.njmax is not None:
            kw["njmax"] = self.njmax
        prog = _Program(
            data=mjw.make_data(m, nworld=n, **kw),
            state=wp.zeros((K, self.nstate), dtype=float),
            ctrl=wp.zeros((K, T, self.nu), dtype=float),
            qpos=wp.zeros((P, K, T + 1, m.nq), dtype=float),
            qvel=wp.zeros((P, K, T + 1, m.nv), dtype=float),
            sens=wp.zeros((P, K, T + 1, m.nsensordata), dtype=float),
        )
        if self.graph:
            self._launch(prog, P, T)  # load every kernel module before capturing
            with wp.ScopedCapture() as cap:
                self._launch(prog, P, T)
            prog.graph = cap.graph
        self._programs[key] = prog
        self.n_compiles += 1
        return prog

    def _launch(self, prog: _Program, P: int, T: int) -> None:
        m, mw, d = self.model, self._mw, prog.data
        n = d.nworld
        mjw.reset_data(mw, d)
        wp.launch(_set_state, dim=n, inputs=[prog.state, P, m.nq, m.nv, m.na, d.qpos, d.qvel, d.act])
        mjw.forward(mw, d)  # sensors at the start state
        self._record(prog, 0, P)
        for t in range(T):
            if m.nu:
                wp.launch(_set_ctrl, dim=(n, m.nu), inputs=[prog.ctrl, t, P, d.ctrl])
            mjw.step(mw, d)
            self._record(prog, t + 1, P)

    def _record(self, prog: _Program, t: int, P: int) -> None:
        d, m = prog.data, self.model
        wp.launch(_record, dim=(d.nworld, max(m.nq, m.nv, m.nsensordata)),
                  inputs=[d.qpos, d.qvel, d.sensordata, t, P, prog.qpos, prog.qvel, prog.sens])
