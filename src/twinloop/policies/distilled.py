"""Distilled base policies: behaviour cloning of refined actions into a fast proposer.

The policy maps an observation (and the task goal, when the task has one) to an action chunk
of ``H`` control ticks. It is trained on episodes of a refined controller, so at run time it
proposes in one forward pass what refinement found with hundreds of rollouts, and refinement
starts from that proposal instead of from scratch::

    x     = [obs, sin/cos(yaw-like obs), goal]                  features, normalized
    y     = actions[t : t+H] - hold_action(state_t)              chunk relative to the pusher
    f(x) ~ (y - mu_y) / sigma_y                                  MLP, mean squared error

``propose`` returns ``hold + mu_y + sigma_y * f(x)``, clipped to the action bounds.
``sample`` adds Gaussian noise with the covariance of the training residuals (full over the
chunk, so samples stay smooth in time) drawn from the caller's NumPy generator: seeded and
free of torch's global random state.

(A flow-matching head was tried and left out: on push-t with 40 refined episodes it made the
base policy worse alone (mean final error 0.25 m vs 0.17 m) and no better under refinement,
at 1.5x the compute per tick.)

torch is the optional ``[learn]`` extra; this module imports without it and raises a
:class:`~twinloop.errors.TwinloopError` naming the extra when a policy is built or loaded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from twinloop.errors import TwinloopError, as_array
from twinloop.io import atomic_write
from twinloop.tasks.base import Task

FORMAT_VERSION = 1
LEARN_HINT = "pip install 'twinloop[learn]'"


def require_torch():
    """The ``torch`` module, or a TwinloopError that says how to install it."""
    try:
        import torch
    except ImportError as exc:
        raise TwinloopError(f"distilled policies need torch, the [learn] extra: {LEARN_HINT} ({exc})") from exc
    return torch


@dataclass(frozen=True)
class PolicyConfig:
    """Architecture and training knobs of a distilled policy.

    Attributes:
        chunk: H, control ticks per predicted action chunk; ``None`` = the task's planning
            horizon (``task.horizon / task.control_period``).
        hidden: widths of the MLP's hidden layers.
        epochs: passes over the training set.
        batch_size: samples per gradient step.
        lr: Adam learning rate (cosine-decayed to 5% over training).
        weight_decay: AdamW weight decay.
        relative: predict the chunk relative to ``task.hold_action(state)`` (the pusher's own
            position for push tasks), which makes the targets small and translation-invariant.
        noise_scale: ``sample`` draws residual noise scaled by this (1 = the training spread).
        seed: seed of initialization and batch order.
    """

    chunk: int | None = None
    hidden: tuple[int, ...] = (256, 256)
    epochs: int = 150
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 1e-4
    relative: bool = True
    noise_scale: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if self.chunk is not None and self.chunk < 1:
            raise TwinloopError(f"chunk must be >= 1 control tick or None, got {self.chunk}")
        if not self.hidden or any(int(h) < 1 for h in self.hidden):
            raise TwinloopError(f"hidden must list positive layer widths, got {self.hidden}")
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.epochs < 1 or self.batch_size < 1:
            raise TwinloopError(f"epochs and batch_size must be >= 1, got {self.epochs}, {self.batch_size}")
        if not self.lr > 0 or self.weight_decay < 0 or self.noise_scale < 0:
            raise TwinloopError(
                f"need lr > 0, weight_decay >= 0, noise_scale >= 0, got {self.lr}, {self.weight_decay}, {self.noise_scale}"
            )


@dataclass
class Demo:
    """One demonstration episode: ``obs (T, n_obs)`` seen and ``actions (T, nu)`` taken.

    Anything with ``.obs`` and ``.actions`` of these shapes (e.g. a recorded
    :class:`twinloop.data.episodes.Episode`) works wherever a Demo is accepted.
    """

    obs: np.ndarray
    actions: np.ndarray
    success: bool = False


@dataclass
class TrainLog:
    """Loss per epoch (mean squared error of normalized chunks) and the sample count."""

    losses: list[float] = field(default_factory=list)
    samples: int = 0
    seconds: float = 0.0


# -- features and targets --------------------------------------------------------------------


def _angle_columns(task: Task) -> list[int]:
    # a wrapped angle jumps by 2 pi at +-pi; its sine and cosine do not
    return [i for i, n in enumerate(task.obs_names) if n.endswith("yaw") or n.endswith("theta")]


def features(task: Task, obs: np.ndarray) -> np.ndarray:
    """``(..., n_obs)`` observations -> ``(..., F)`` policy inputs (obs, sin/cos of angles, goal)."""
    obs = np.asarray(obs, dtype=float)
    ang = obs[..., _angle_columns(task)]
    g = task.goal_features()
    goal = np.broadcast_to(g, (*obs.shape[:-1], len(g)))
    return np.concatenate([obs, np.sin(ang), np.cos(ang), goal], axis=-1)


def _anchor(task: Task, obs: np.ndarray, relative: bool) -> np.ndarray:
    """``(T, nu)`` what chunks are predicted relative to: ``task.hold_action`` of each state
    (zeros when not relative)."""
    obs = np.atleast_2d(obs)
    if not relative:
        return np.zeros((len(obs), task.nu))
    return np.stack([np.asarray(task.hold_action(task.state_from_obs(o)), dtype=float) for o in obs])


def chunk_targets(actions: np.ndarray, horizon: int) -> np.ndarray:
    """``(T, nu)`` actions -> ``(T, H, nu)``: at each tick the next H actions, the last one
    held past the episode's end (as the world would hold it)."""
    a = np.asarray(actions, dtype=float)
    pad = np.concatenate([a, np.repeat(a[-1:], horizon - 1, axis=0)])
    idx = np.arange(len(a))[:, None] + np.arange(horizon)[None, :]
    return pad[idx]


def _demo_arrays(task: Task, demos: Sequence, horizon: int, relative: bool) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    n_obs = len(task.obs_names)
    for i, d in enumerate(demos):
        obs = as_array(getattr(d, "obs", None), f"demo {i} obs", (None, n_obs))
        act = as_array(getattr(d, "actions", None), f"demo {i} actions", (len(obs), task.nu))
        xs.append(features(task, obs))
        ys.append(chunk_targets(act, horizon) - _anchor(task, obs, relative)[:, None, :])
    if not xs:
        raise TwinloopError("no demonstrations to train on: need at least one episode")
    return np.concatenate(xs), np.concatenate(ys)


def _std(x: np.ndarray) -> np.ndarray:
    s = x.std(axis=0)
    # constant inputs (e.g. a fixed goal) would divide by zero; leave them unscaled
    return np.where(s > 1e-8, s, 1.0)


@contextmanager
def _one_thread(torch):
    """Run a small MLP on one thread: thread sync costs more than it saves at these sizes (25x
    slower on a busy 2-core machine), and one thread makes results independent of the core count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _mlp(torch, n_x: int, n_y: int, cfg: PolicyConfig):
    """``(B, F)`` normalized features -> ``(B, D)`` normalized chunks."""
    layers, w = [], n_x
    for h in cfg.hidden:
        layers += [torch.nn.Linear(w, h), torch.nn.GELU()]
        w = h
    layers.append(torch.nn.Linear(w, n_y))
    return torch.nn.Sequential(*layers)


# -- the policy ------------------------------------------------------------------------------


class DistilledPolicy:
    """An MLP chunk policy; a proposer for :class:`twinloop.control.Controller`.

    Build one with :meth:`fit` or :meth:`load`.
    """

    def __init__(self, task: Task, net, stats: dict[str, np.ndarray], config: PolicyConfig, horizon: int,
                 noise_chol: np.ndarray):
        self.task, self.net, self.config, self.horizon = task, net, config, int(horizon)
        self.stats = {k: np.asarray(v, dtype=float) for k, v in stats.items()}
        self.noise_chol = np.asarray(noise_chol, dtype=float)
        self.torch = require_torch()
        self.net.eval()

    @property
    def chunk_shape(self) -> tuple[int, int]:
        return (self.horizon, self.task.nu)

    # -- training ----------------------------------------------------------------------------

    @classmethod
    def fit(cls, task: Task, demos: Sequence, config: PolicyConfig | None = None,
            progress: Callable[[int, float], None] | None = None) -> tuple[DistilledPolicy, TrainLog]:
        """Behaviour-clone ``demos`` (objects with ``obs (T, n_obs)``, ``actions (T, nu)``).

        Deterministic on CPU: the same demos, config and seed give the same weights.

        Args:
            progress: called after each epoch with ``(epoch, loss)``.
        """
        torch = require_torch()
        cfg = config or PolicyConfig()
        horizon = cfg.chunk or max(1, int(round(task.horizon / task.control_period)))
        t0 = time.perf_counter()
        x, y = _demo_arrays(task, demos, horizon, cfg.relative)
        y = y.reshape(len(y), -1)
        stats = {"x_mean": x.mean(0), "x_std": _std(x), "y_mean": y.mean(0), "y_std": _std(y)}
        xn = torch.as_tensor((x - stats["x_mean"]) / stats["x_std"], dtype=torch.float32)
        yn = torch.as_tensor((y - stats["y_mean"]) / stats["y_std"], dtype=torch.float32)

        with _one_thread(torch):
            log = TrainLog(samples=len(xn))
            net, resid = _train(torch, xn, yn, cfg, log, progress)
        log.seconds = time.perf_counter() - t0
        return cls(task, net, stats, cfg, horizon, _noise_factor(resid)), log

    def loss(self, demos: Sequence) -> float:
        """Mean squared error of normalized chunks on ``demos`` (the training objective)."""
        x, y = _demo_arrays(self.task, demos, self.horizon, self.config.relative)
        pred = self._predict(x)
        yn = (y.reshape(len(y), -1) - self.stats["y_mean"]) / self.stats["y_std"]
        return float(np.mean((pred - yn) ** 2))

    # -- the proposer protocol ---------------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset: the policy is stateless and ``sample`` draws from the caller's rng."""

    def propose(self, obs, state=None) -> np.ndarray:
        """``(H, nu)`` action chunk (per control tick) for one observation."""
        o = self.task.check_obs(obs)
        return self._chunks(o, self._predict(features(self.task, o)[None]))[0]

    def sample(self, obs, state, n: int, rng: np.random.Generator) -> np.ndarray:
        """``(n, H, nu)`` chunks: the proposal plus residual noise drawn from ``rng``."""
        if n < 1:
            raise TwinloopError(f"n must be >= 1 sample, got {n}")
        o = self.task.check_obs(obs)
        mean = self._predict(features(self.task, o)[None])
        eps = self.config.noise_scale * rng.standard_normal((n, self.noise_chol.shape[0]))
        return self._chunks(o, mean + eps @ self.noise_chol.T)

    def _predict(self, x: np.ndarray) -> np.ndarray:
        """``(B, F)`` features -> ``(B, H*nu)`` normalized chunks."""
        torch = self.torch
        xn = torch.as_tensor((x - self.stats["x_mean"]) / self.stats["x_std"], dtype=torch.float32)
        with torch.inference_mode(), _one_thread(torch):
            return self.net(xn).double().numpy()

    def _chunks(self, obs: np.ndarray, yn: np.ndarray) -> np.ndarray:
        """Normalized ``(B, H*nu)`` -> ``(B, H, nu)`` actions, re-anchored and clipped."""
        y = (yn * self.stats["y_std"] + self.stats["y_mean"]).reshape(len(yn), *self.chunk_shape)
        y = y + _anchor(self.task, obs, self.config.relative)[0]
        return np.clip(y, self.task.action_low, self.task.action_high)

    # -- persistence -------------------------------------------------------------------------

    def metadata(self) -> dict:
        torch = self.torch
        import twinloop

        return {
            "format_version": FORMAT_VERSION,
            "kind": "twinloop.distilled_mlp",
            "task": self.task.name,
            "obs_names": list(self.task.obs_names),
            "obs_dim": len(self.task.obs_names),
            "action_dim": int(self.task.nu),
            "chunk": self.horizon,
            "goal": self.task.goal_features().tolist(),
            "config": asdict(self.config),
            "torch_version": str(torch.__version__),
            "twinloop_version": getattr(twinloop, "__version__", "unknown"),
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write weights, normalization stats and metadata to ``path`` atomically."""
        torch = self.torch
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = {
            "meta": self.metadata(),
            "stats": {k: torch.as_tensor(v) for k, v in self.stats.items()},
            "noise_chol": torch.as_tensor(self.noise_chol),
            "state_dict": self.net.state_dict(),
        }
        with atomic_write(path) as tmp:
            torch.save(blob, tmp)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, task: Task) -> DistilledPolicy:
        """A policy saved by :meth:`save`, checked against ``task``.

        Raises:
            TwinloopError: missing/unreadable file, unknown format version, or a policy trained
                for another task, observation or action dimension.
        """
        torch = require_torch()
        path = Path(path)
        if not path.is_file():
            raise TwinloopError(f"no distilled policy at {path}")
        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
            meta = blob["meta"]
        except Exception as exc:
            raise TwinloopError(f"{path} is not a readable twinloop policy: {type(exc).__name__}: {exc}") from exc
        if meta.get("format_version") != FORMAT_VERSION:
            raise TwinloopError(
                f"{path} has policy format version {meta.get('format_version')!r}; this twinloop reads version {FORMAT_VERSION}"
            )
        if meta["task"] != task.name:
            raise TwinloopError(f"{path} was trained for task {meta['task']!r}, not {task.name!r}")
        if meta["action_dim"] != task.nu:
            raise TwinloopError(f"{path} predicts {meta['action_dim']}-dim actions but task {task.name!r} has {task.nu}")
        if meta["obs_dim"] != len(task.obs_names):
            raise TwinloopError(
                f"{path} reads {meta['obs_dim']}-dim observations but task {task.name!r} has {len(task.obs_names)}"
            )
        cfg = PolicyConfig(**{**meta["config"], "hidden": tuple(meta["config"]["hidden"])})
        stats = {k: v.numpy() for k, v in blob["stats"].items()}
        net = _mlp(torch, len(stats["x_mean"]), len(stats["y_mean"]), cfg)
        if len(stats["x_mean"]) != features(task, np.zeros(len(task.obs_names))).shape[-1]:
            raise TwinloopError(f"{path} expects {len(stats['x_mean'])} input features; task {task.name!r} gives another count")
        net.load_state_dict(blob["state_dict"])
        return cls(task, net, stats, cfg, meta["chunk"], blob["noise_chol"].numpy())


def _train(torch, xn, yn, cfg: PolicyConfig, log: TrainLog, progress):
    """Minibatch AdamW on mean squared error; returns the net and its ``(B, D)`` residuals."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    net = _mlp(torch, xn.shape[1], yn.shape[1], cfg)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = -(-len(xn) // cfg.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.epochs * steps_per_epoch, eta_min=cfg.lr * 0.05)
    net.train()
    for epoch in range(cfg.epochs):
        perm = torch.randperm(len(xn), generator=gen)
        total = 0.0
        for i in range(0, len(xn), cfg.batch_size):
            idx = perm[i : i + cfg.batch_size]
            loss = torch.nn.functional.mse_loss(net(xn[idx]), yn[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        log.losses.append(total / len(xn))
        if progress is not None:
            progress(epoch + 1, log.losses[-1])
    net.eval()
    with torch.no_grad():
        resid = (yn - net(xn)).double().numpy()
    return net, resid


def _noise_factor(resid: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of the ``(D, D)`` covariance of ``(B, D)`` residuals (jittered)."""
    if len(resid) < 2:
        return np.zeros((resid.shape[1], resid.shape[1]))
    cov = np.cov(resid, rowvar=False).reshape(resid.shape[1], resid.shape[1])
    jitter = 1e-6 * max(float(np.trace(cov)) / len(cov), 1e-12)
    return np.linalg.cholesky(cov + jitter * np.eye(len(cov)))
