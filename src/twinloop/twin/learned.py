"""Learned twins: an ensemble of dynamics networks, and MuJoCo plus a learned residual.

Both step once per **control tick**, not per physics step: the refiner's ``ctrl (K, T, nu)`` per
physics step (``T`` a multiple of the tick's ``substeps``) is read as one action per tick, the
mean of the tick's physics-step controls (what a zero-order-hold plan sends anyway). The
``Rollouts`` they return keep the physics-step layout every consumer expects:

- :class:`LearnedTwin` predicts the state at each tick boundary,
  ``s' = s + f_m(s, a)`` for each ensemble member ``m``; between boundaries ``qpos`` and
  ``qvel`` are linearly interpolated. Its particles are its members: ``P = members`` (each
  member rolls out its own trajectory, so a refiner's ``risk`` aggregates over them, as PETS
  does). ``sensordata`` is NaN (a network of the state predicts no sensors: a task whose cost
  reads sensors cannot plan in it). ``uncertainty (K, T+1, nq)``: the members' spread.
- :class:`HybridTwin` steps the MuJoCo twin through each tick (so physics-step states and
  sensors are MuJoCo's) and corrects the state at each tick's end by a learned residual
  ``s' = mujoco(s, a) + g(s, a)`` (the members' mean), trained on world transitions against
  the twin's own prediction. It keeps the MuJoCo twin's parameter particles (calibrate first,
  learn what calibration cannot express second). ``uncertainty``: the members' spread of the
  corrections, accumulated over ticks (variances add).

The state is the twin state ``[qpos, qvel]`` (no actuator activations); network inputs are the
state with hinge angles as (sin, cos), and the action, standardized. Training data are
trajectories (objects with ``states (T+1, nstate)`` at tick boundaries and ``actions (T, nu)``,
e.g. :class:`twinloop.calib.windows.Trajectory`); :meth:`LearnedTwin.fit` takes world episodes
and optionally twin rollouts to pretrain on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import mujoco
import numpy as np
import torch

from twinloop.errors import TwinloopError, as_array
from twinloop.io import load_checkpoint, save_checkpoint
from twinloop.params import ParamSpace
from twinloop.threads import torch_threads
from twinloop.twin.base import BatchTwin, Rollouts
from twinloop.twin.mujoco import MujocoTwin

FORMAT_VERSION = 1


@dataclass(frozen=True)
class EnsembleConfig:
    """Architecture and training of a dynamics ensemble.

    Attributes:
        members: networks in the ensemble (each trained on its own bootstrap of the data).
        hidden: hidden layer widths.
        epochs: passes over the data (each of pretraining and training).
        batch_size: transitions per gradient step and member.
        lr: AdamW learning rate (cosine-decayed to 5%).
        weight_decay: AdamW weight decay.
        seed: initialization and batch order.
    """

    members: int = 5
    hidden: tuple[int, ...] = (128, 128)
    epochs: int = 60
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 1e-5
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.members < 1 or self.epochs < 1 or self.batch_size < 1 or not self.hidden or min(self.hidden) < 1:
            raise TwinloopError(f"members, epochs, batch_size and hidden widths must be >= 1, got {self}")
        if not self.lr > 0 or self.weight_decay < 0:
            raise TwinloopError(f"need lr > 0 and weight_decay >= 0, got {self.lr}, {self.weight_decay}")


class _Ensemble(torch.nn.Module):
    """``E`` MLPs evaluated as one batched matmul chain: ``(E, B, n_in) -> (E, B, n_out)``."""

    def __init__(self, members: int, n_in: int, n_out: int, hidden: Sequence[int], gen: torch.Generator):
        super().__init__()
        dims = [n_in, *hidden, n_out]
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(members, a, b, generator=gen, dtype=torch.float64) * np.sqrt(1.0 / a))
            for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.biases = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(members, 1, b, dtype=torch.float64))
                                             for b in dims[1:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(b, x, w)
            if i < len(self.weights) - 1:
                x = torch.nn.functional.silu(x)
        return x


@dataclass
class Dynamics:
    """A trained ensemble: ``delta (E, B, nstate) = predict(states (B, nstate), actions (B, nu))``.

    Attributes:
        net: the ensemble.
        stats: input/output standardization (``x_mean``, ``x_std``, ``y_mean``, ``y_std``).
        hinge: ``(nq,)`` True where a position is a hinge angle.
        config: how it was built.
        losses: mean training loss per epoch (pretraining first, if any).
    """

    net: _Ensemble
    stats: dict
    hinge: np.ndarray
    config: EnsembleConfig
    losses: list[float] = field(default_factory=list)

    def features(self, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Positions, pairwise differences of the non-angle positions (contacts depend on where
        bodies are relative to each other, which a network finds hard to learn from absolute
        coordinates), angles as (sin, cos), velocities, and the action relative to each
        non-angle position (a position target is about where the actuator is)."""
        nq = len(self.hinge)
        q = states[..., :nq]
        lin, ang = q[..., ~self.hinge], q[..., self.hinge]
        i, j = np.triu_indices(lin.shape[-1], 1)
        rel = (actions[..., :, None] - lin[..., None, :]).reshape(*actions.shape[:-1], -1)
        return np.concatenate([lin, lin[..., i] - lin[..., j], np.sin(ang), np.cos(ang), states[..., nq:], actions, rel],
                              axis=-1)

    def predict(self, states: np.ndarray, actions: np.ndarray, per_member: bool = False) -> np.ndarray:
        """``(E, B, nstate)`` state change over one tick; ``per_member``: row ``e`` of ``states``
        (shape ``(E, B, nstate)``) goes through member ``e`` only."""
        x = (self.features(states, actions) - self.stats["x_mean"]) / self.stats["x_std"]
        x = np.broadcast_to(x, (self.config.members, *x.shape[-2:])) if not per_member else x
        with torch.no_grad(), torch_threads(1):
            y = self.net(torch.from_numpy(np.ascontiguousarray(x))).numpy()
        return y * self.stats["y_std"] + self.stats["y_mean"]




def hinge_positions(model: mujoco.MjModel) -> np.ndarray:
    """``(nq,)`` True where a position coordinate is a hinge angle."""
    out = np.zeros(model.nq, bool)
    for j in range(model.njnt):
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE:
            out[model.jnt_qposadr[j]] = True
    return out


def _wrap_delta(d: np.ndarray, hinge: np.ndarray) -> np.ndarray:
    d = d.copy()
    d[..., : len(hinge)][..., hinge] = np.arctan2(np.sin(d[..., : len(hinge)][..., hinge]),
                                                  np.cos(d[..., : len(hinge)][..., hinge]))
    return d


def transitions(trajectories: Sequence, nstate: int, nu: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(states (B, nstate), actions (B, nu), next_states (B, nstate))`` of trajectories."""
    s, a, n = [], [], []
    for i, tr in enumerate(trajectories):
        states = as_array(getattr(tr, "states", None), f"trajectory {i} states", (None, None))[:, :nstate]
        actions = as_array(getattr(tr, "actions", None), f"trajectory {i} actions", (len(states) - 1, nu))
        s.append(states[:-1]), a.append(actions), n.append(states[1:])
    if not s:
        raise TwinloopError("no trajectories to learn from")
    return np.concatenate(s), np.concatenate(a), np.concatenate(n)


def fit_dynamics(states, actions, targets, hinge: np.ndarray, config: EnsembleConfig,
                 pretrain: tuple | None = None, progress: Callable[[int, float], None] | None = None) -> Dynamics:
    """Train an ensemble to predict ``targets (B, nstate)`` from ``(states, actions)``; with
    ``pretrain = (states, actions, targets)`` it first trains on those, then on these."""
    gen = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)
    dyn = Dynamics(None, {}, hinge, config)
    stages = [pretrain, (states, actions, targets)] if pretrain is not None else [(states, actions, targets)]
    x0, y0 = dyn.features(*stages[0][:2]), stages[0][2]
    dyn.stats = {"x_mean": x0.mean(0), "x_std": _std(x0), "y_mean": y0.mean(0), "y_std": _std(y0)}
    dyn.net = _Ensemble(config.members, x0.shape[1], y0.shape[1], config.hidden, gen)
    for s, a, y in stages:
        xn = torch.from_numpy((dyn.features(s, a) - dyn.stats["x_mean"]) / dyn.stats["x_std"])
        yn = torch.from_numpy((y - dyn.stats["y_mean"]) / dyn.stats["y_std"])
        with torch_threads(1):
            _train(dyn, xn, yn, gen, progress)
    dyn.net.eval()
    return dyn


def _std(x: np.ndarray) -> np.ndarray:
    s = x.std(axis=0)
    return np.where(s > 1e-8, s, 1.0)  # constant columns (an unobserved height) stay unscaled


def _train(dyn: Dynamics, xn: torch.Tensor, yn: torch.Tensor, gen: torch.Generator, progress) -> None:
    cfg = dyn.config
    opt = torch.optim.AdamW(dyn.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps = max(1, len(xn) // cfg.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.epochs * steps, eta_min=cfg.lr * 0.05)
    dyn.net.train()
    for _ in range(cfg.epochs):
        total = 0.0
        for _ in range(steps):
            # each member draws its own batch with replacement: a bootstrap per member
            idx = torch.randint(0, len(xn), (cfg.members, cfg.batch_size), generator=gen)
            loss = torch.nn.functional.mse_loss(dyn.net(xn[idx]), yn[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item()
        dyn.losses.append(total / steps)
        if progress is not None:
            progress(len(dyn.losses), dyn.losses[-1])


def save_dynamics(dyn: Dynamics, path: str | os.PathLike, kind: str, control_period: float, model: mujoco.MjModel,
                  params=None) -> Path:
    """Write a trained ensemble (and what it was trained for) to ``path`` atomically."""
    meta = {"format_version": FORMAT_VERSION, "kind": kind, "control_period": control_period,
            "sizes": [model.nq, model.nv, model.nu], "config": asdict(dyn.config), "losses": dyn.losses,
            "hinge": dyn.hinge.tolist(), "params": None if params is None else np.asarray(params, float).tolist()}
    return save_checkpoint(path, meta, dyn.stats, dyn.net.state_dict())


def load_dynamics(path: str | os.PathLike, kind: str, model: mujoco.MjModel) -> tuple[Dynamics, dict]:
    """A saved ensemble, checked against ``model`` and the kind of twin that loads it."""
    blob = load_checkpoint(path, "learned twin")
    meta = blob["meta"]
    if meta.get("format_version") != FORMAT_VERSION or meta.get("kind") != kind:
        raise TwinloopError(f"{path} holds a {meta.get('kind')!r} twin (format {meta.get('format_version')}), "
                            f"not a {kind!r} twin of format {FORMAT_VERSION}")
    if meta["sizes"] != [model.nq, model.nv, model.nu]:
        raise TwinloopError(f"{path} was trained on a scene with (nq, nv, nu) = {meta['sizes']}, "
                            f"not {[model.nq, model.nv, model.nu]}")
    cfg = EnsembleConfig(**{**meta["config"], "hidden": tuple(meta["config"]["hidden"])})
    stats = {k: v.numpy() for k, v in blob["stats"].items()}
    net = _Ensemble(cfg.members, len(stats["x_mean"]), len(stats["y_mean"]), cfg.hidden, torch.Generator())
    net.load_state_dict(blob["state_dict"])
    net.eval()
    return Dynamics(net, stats, np.array(meta["hinge"], bool), cfg, list(meta["losses"])), meta


def _tick_actions(u: np.ndarray, substeps: int) -> np.ndarray:
    """``(K, T, nu)`` per physics step -> ``(K, T/substeps, nu)``: each tick's mean control."""
    K, T, nu = u.shape
    if T % substeps:
        raise TwinloopError(f"a learned twin steps whole control ticks: ctrl has {T} physics steps, "
                            f"not a multiple of {substeps}")
    return u.reshape(K, T // substeps, substeps, nu).mean(axis=2)


def _interpolate(ticks: np.ndarray, substeps: int) -> np.ndarray:
    """``(..., n+1, d)`` tick-boundary values -> ``(..., n*substeps+1, d)`` per physics step."""
    w = (np.arange(substeps) / substeps)[:, None]
    a, b = ticks[..., :-1, None, :], ticks[..., 1:, None, :]
    inner = (a * (1 - w) + b * w).reshape(*ticks.shape[:-2], -1, ticks.shape[-1])
    return np.concatenate([inner, ticks[..., -1:, :]], axis=-2)


class _TickTwin(BatchTwin):
    """What both learned twins share: the model's sizes, the tick length, loading."""

    kind = ""

    def __init__(self, model: mujoco.MjModel, param_space: ParamSpace | None, dynamics: Dynamics | None,
                 checkpoint: str | None, control_period: float | None, max_speed: float):
        if (dynamics is None) == (checkpoint is None):
            raise TwinloopError(f"a {self.kind} twin needs a trained ensemble: pass dynamics= or checkpoint=")
        self.model = model
        self.param_space = param_space or ParamSpace(())
        self.meta: dict = {}
        if checkpoint is not None:
            dynamics, self.meta = load_dynamics(checkpoint, self.kind, model)
            control_period = self.meta["control_period"]
        if control_period is None:
            raise TwinloopError("control_period is needed with dynamics=")
        self.dynamics = dynamics
        self.dt = float(model.opt.timestep)
        self.substeps = int(round(control_period / self.dt))
        self.control_period = float(control_period)
        self.nu, self.nq, self.nv = model.nu, model.nq, model.nv
        self.nstate = model.nq + model.nv + model.na
        self.max_speed = max_speed

    def save(self, path: str | os.PathLike, params=None) -> Path:
        return save_dynamics(self.dynamics, path, self.kind, self.control_period, self.model, params)


class LearnedTwin(_TickTwin):
    """A dynamics ensemble as a twin (see the module docstring); ``P`` = ensemble members.

    Args:
        model: the scene (sizes, timestep, which positions are angles); never simulated.
        param_space: ignored by the network; ``params`` must be ``None``.
        dynamics: a trained :class:`Dynamics` (with ``control_period``), or
        checkpoint: a file written by :meth:`save`.
        max_speed: a rollout with any ``|qvel|`` above this is flagged unstable.
    """

    name = "learned"
    kind = "learned"

    def __init__(self, model: mujoco.MjModel, param_space: ParamSpace | None = None, *, dynamics: Dynamics | None = None,
                 checkpoint: str | None = None, control_period: float | None = None, max_speed: float = 1e3):
        super().__init__(model, param_space, dynamics, checkpoint, control_period, max_speed)

    @classmethod
    def fit(cls, model: mujoco.MjModel, trajectories: Sequence, control_period: float,
            config: EnsembleConfig | None = None, pretrain: Sequence | None = None, progress=None) -> LearnedTwin:
        """Train on trajectories (world episodes), after ``pretrain`` ones (twin rollouts) if given."""
        n = model.nq + model.nv
        hinge = hinge_positions(model)

        def data(trajs):
            s, a, nxt = transitions(trajs, n, model.nu)
            return s, a, _wrap_delta(nxt - s, hinge)

        dyn = fit_dynamics(*data(trajectories), hinge, config or EnsembleConfig(),
                           pretrain=None if pretrain is None else data(pretrain), progress=progress)
        return cls(model, dynamics=dyn, control_period=control_period)

    def _run(self, states: np.ndarray, ctrl: np.ndarray, params, sensors: bool) -> Rollouts:
        if params is not None:
            raise TwinloopError("a learned twin has no physical parameters: pass params=None (its particles are its members)")
        E, n = self.dynamics.config.members, self.nq + self.nv
        acts = _tick_actions(ctrl, self.substeps)
        K, ticks, _ = acts.shape
        traj = np.empty((E, K, ticks + 1, n))
        traj[:, :, 0] = states[:, :n]
        for k in range(ticks):
            traj[:, :, k + 1] = traj[:, :, k] + self.dynamics.predict(traj[:, :, k], np.broadcast_to(acts[:, k], (E, K, self.nu)),
                                                                     per_member=True)
        full = _interpolate(traj, self.substeps)
        qpos, qvel = full[..., : self.nq], full[..., self.nq :]
        ok = np.isfinite(full).all(axis=(2, 3)) & (np.abs(qvel) <= self.max_speed).all(axis=(2, 3))
        sens = np.full((*full.shape[:3], self.model.nsensordata), np.nan)
        spread = _interpolate(traj[..., : self.nq].std(axis=0), self.substeps)
        return Rollouts(qpos=qpos, qvel=qvel, sensordata=sens, ctrl=ctrl, ok=ok, dt=self.dt, uncertainty=spread)


class HybridTwin(_TickTwin):
    """The MuJoCo twin plus a learned residual of each tick's end state (module docstring).

    Args:
        model: the scene, simulated by a CPU MuJoCo twin.
        param_space: parameters ``rollout(..., params=)`` may vary (as :class:`MujocoTwin`).
        dynamics / checkpoint / control_period: the residual ensemble, as :class:`LearnedTwin`.
        base_params: ``(n,)`` values of ``param_space`` the residual was learned against (e.g. a
            calibrated estimate; a checkpoint stores them); they are the twin's own model, so
            ``params=None`` simulates them.
        nthread, max_speed: of the MuJoCo twin.
    """

    name = "hybrid"
    kind = "hybrid"

    def __init__(self, model: mujoco.MjModel, param_space: ParamSpace | None = None, *, dynamics: Dynamics | None = None,
                 checkpoint: str | None = None, control_period: float | None = None, base_params=None,
                 nthread: int | None = None, max_speed: float = 1e3):
        super().__init__(model, param_space, dynamics, checkpoint, control_period, max_speed)
        if base_params is None and self.meta.get("params") is not None:
            base_params = np.array(self.meta["params"])
        self.base_params = None if base_params is None else self.param_space.check(
            as_array(base_params, "base_params", (len(self.param_space),)), "base_params")
        if self.base_params is not None:
            self.model = self.param_space.apply(model, self.base_params)
        self.physics = MujocoTwin(self.model, self.param_space, nthread=nthread, max_speed=max_speed)

    def save(self, path: str | os.PathLike, params=None) -> Path:
        return super().save(path, self.base_params if params is None else params)

    @classmethod
    def fit(cls, model: mujoco.MjModel, trajectories: Sequence, control_period: float,
            config: EnsembleConfig | None = None, param_space: ParamSpace | None = None, params=None,
            progress=None) -> HybridTwin:
        """Learn the residual between world transitions and the MuJoCo twin's prediction under
        ``params`` (``(n,)`` values of ``param_space``; default nominal)."""
        twin = cls(model, param_space, dynamics=Dynamics(None, {}, hinge_positions(model), EnsembleConfig()),
                   control_period=control_period, base_params=params)
        n = model.nq + model.nv
        s, a, nxt = transitions(trajectories, n, model.nu)
        pred = twin._physics_tick(np.concatenate([s, np.zeros((len(s), model.na))], axis=1), a, None)
        hinge = hinge_positions(model)
        twin.dynamics = fit_dynamics(s, a, _wrap_delta(nxt - pred[0], hinge), hinge, config or EnsembleConfig(),
                                     progress=progress)
        return twin

    def _physics_tick(self, states: np.ndarray, actions: np.ndarray, params) -> np.ndarray:
        """``(P, B, nq+nv)`` MuJoCo state after one tick holding ``actions (B, nu)`` from ``states``."""
        r = self.physics.rollout_many(states, np.repeat(actions[:, None], self.substeps, axis=1), params, sensors=False)
        return np.concatenate([r.qpos[:, :, -1], r.qvel[:, :, -1]], axis=-1)

    def _run(self, states: np.ndarray, ctrl: np.ndarray, params, sensors: bool) -> Rollouts:
        models = self.physics.models_for(params)
        acts = _tick_actions(ctrl, self.substeps)
        K, ticks, _ = acts.shape
        n, S = self.nq + self.nv, self.substeps
        P = len(models)
        qpos = np.empty((P, K, ticks * S + 1, self.nq))
        qvel = np.empty((P, K, ticks * S + 1, self.nv))
        sens = np.empty((P, K, ticks * S + 1, self.model.nsensordata))
        ok = np.ones((P, K), bool)
        var = np.zeros((K, ticks + 1, self.nq))
        for p in range(P):
            s = np.array(states)
            for k in range(ticks):
                r = self.physics.rollout_many(s, ctrl[:, k * S : (k + 1) * S], [models[p]], sensors=sensors)
                qpos[p, :, k * S : (k + 1) * S + 1] = r.qpos[0]
                qvel[p, :, k * S : (k + 1) * S + 1] = r.qvel[0]
                sens[p, :, k * S : (k + 1) * S + 1] = r.sensordata[0]
                ok[p] &= r.ok[0]
                end = np.concatenate([r.qpos[0, :, -1], r.qvel[0, :, -1]], axis=-1)
                corr = self.dynamics.predict(s[:, :n], acts[:, k])  # (E, K, n)
                end = end + corr.mean(axis=0)
                if p == 0:
                    var[:, k + 1] = var[:, k] + corr[..., : self.nq].var(axis=0)
                qpos[p, :, (k + 1) * S], qvel[p, :, (k + 1) * S] = end[:, : self.nq], end[:, self.nq :]
                s = np.concatenate([end, s[:, n:]], axis=1)
        ok &= np.isfinite(qpos).all(axis=(2, 3)) & (np.abs(qvel) <= self.max_speed).all(axis=(2, 3))
        spread = np.repeat(np.sqrt(var), S, axis=1)[:, : ticks * S + 1]
        return Rollouts(qpos=qpos, qvel=qvel, sensordata=sens, ctrl=ctrl, ok=ok, dt=self.dt, uncertainty=spread)


__all__ = ["Dynamics", "EnsembleConfig", "HybridTwin", "LearnedTwin", "fit_dynamics", "hinge_positions",
           "load_dynamics", "save_dynamics", "transitions"]
