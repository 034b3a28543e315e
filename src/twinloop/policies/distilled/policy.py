"""The distilled policy: a proposer that flows (or recalls) action chunks for an episode's
observations, fitted to demonstrations and saved to / loaded from a checkpoint."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

from twinloop.errors import TwinloopError, number
from twinloop.io import load_checkpoint, save_checkpoint
from twinloop.policies.distilled.config import (
    FORMAT_VERSION,
    KIND,
    MEMORIES,
    PolicyConfig,
    TrainLog,
    require_torch,
)
from twinloop.policies.distilled.flow import (
    _integrate,
    _mean_flow_loss,
    _train,
    _velocity_net,
)
from twinloop.policies.distilled.targets import (
    _std,
    anchors,
    base_proposer,
    context,
    local_linear,
    split_episodes,
    training_arrays,
    world_chunks,
)
from twinloop.tasks.base import Task
from twinloop.threads import torch_threads


class DistilledPolicy:
    """A flow-matching chunk policy; a proposer for :class:`twinloop.control.Controller`.

    Build one with :meth:`fit` or :meth:`load`.
    """

    def __init__(self, task: Task, net, stats: dict[str, np.ndarray], config: PolicyConfig, horizon: int):
        self.task, self.net, self.config, self.horizon = task, net, config, int(horizon)
        self.stats = {k: np.asarray(v, dtype=float) for k, v in stats.items()}
        self.torch = require_torch()
        self._memory = None
        if net is None:
            self._memory = cKDTree(self.stats["memory_x"])
        else:
            self.net.eval()
        self._base = base_proposer(task, config)
        self.reset(None)

    @property
    def chunk_shape(self) -> tuple[int, int]:
        return (self.horizon, self.task.nu)

    @property
    def n_params(self) -> int:
        """Weights of the network (0 for a memory: ``learner`` ``neighbours`` or ``local``)."""
        return 0 if self.net is None else int(sum(p.numel() for p in self.net.parameters()))

    # -- training ----------------------------------------------------------------------------

    @classmethod
    def fit(cls, task: Task, demos: Sequence, config: PolicyConfig | None = None,
            progress: Callable[[int, int, float], None] | None = None) -> tuple[DistilledPolicy, TrainLog]:
        """Train on ``demos`` (objects with ``obs (T, n_obs)``, ``actions (T, nu)`` and
        optionally ``plans (T, H', nu)``, see :class:`Demo`).

        Deterministic on one CPU thread: the same demos, config and seed give the same weights.

        Args:
            progress: called every 50 steps with ``(step, steps planned, loss)`` (fewer steps
                run when the held-out loss stops training early).
        """
        torch = require_torch()
        cfg = config or PolicyConfig()
        horizon = cfg.chunk or max(1, int(round(task.horizon / task.control_period)))
        t0 = time.perf_counter()
        if cfg.learner in MEMORIES:  # a memory of every sample: nothing to hold out
            x, y, dup = training_arrays(task, demos, cfg, horizon)
            stats = {"x_mean": x.mean(0), "x_std": _std(x), "y_mean": y.mean(0), "y_std": _std(y)}
            stats.update(memory_x=(x - stats["x_mean"]) / stats["x_std"], memory_y=(y - stats["y_mean"]) / stats["y_std"])
            log = TrainLog(samples=len(x), duplicates=dup, seconds=time.perf_counter() - t0)
            return cls(task, None, stats, cfg, horizon), log
        train, held = split_episodes(demos, cfg.val_fraction, cfg.seed)
        x, y, dup = training_arrays(task, train, cfg, horizon)
        stats = {"x_mean": x.mean(0), "x_std": _std(x), "y_mean": y.mean(0), "y_std": _std(y)}

        def normed(x, y):
            return (torch.as_tensor((x - stats["x_mean"]) / stats["x_std"], dtype=torch.float32),
                    torch.as_tensor((y - stats["y_mean"]) / stats["y_std"], dtype=torch.float32))

        xn, yn = normed(x, y)
        val = normed(*training_arrays(task, held, cfg, horizon)[:2]) if held else None
        log = TrainLog(samples=len(xn), val_samples=0 if val is None else len(val[0]), duplicates=dup)
        with torch_threads(cfg.threads):
            net = _train(torch, xn, yn, val, cfg, log, progress)
        log.seconds = time.perf_counter() - t0
        return cls(task, net, stats, cfg, horizon), log

    def loss(self, demos: Sequence, n_noise: int = 8, seed: int = 0) -> float:
        """Flow-matching loss on ``demos`` (the training objective), averaged over ``n_noise``
        seeded draws of noise and flow time per sample."""
        torch = self.torch
        if self.net is None:
            raise TwinloopError(f"a memory policy (learner={self.config.learner!r}) has no flow-matching loss")
        x, y, _ = training_arrays(self.task, demos, self.config, self.horizon)
        xn = torch.as_tensor((x - self.stats["x_mean"]) / self.stats["x_std"], dtype=torch.float32)
        yn = torch.as_tensor((y - self.stats["y_mean"]) / self.stats["y_std"], dtype=torch.float32)
        with torch_threads(1):
            return _mean_flow_loss(torch, self.net, xn, yn, n_noise, seed)

    # -- the proposer protocol ---------------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        """Start an episode: forget the observation history; draw the episode's proposal noise
        from ``seed``."""
        rng = np.random.default_rng([0 if seed is None else seed, 23])
        cfg = self.config
        self._noise = cfg.temperature * rng.standard_normal((cfg.average, self.horizon * self.task.nu))
        self._history: list[np.ndarray] = []
        self._current: np.ndarray | None = None
        self._tick = -1
        self._chunks: list[tuple[int, np.ndarray]] = []  # (tick predicted, (H, nu) chunk), oldest first
        self._answer: np.ndarray | None = None
        self._anchor: tuple[np.ndarray, np.ndarray] | None = None  # (observation, (H, nu) anchor)
        if self._base is not None:
            self._base.reset(seed)

    def _base_chunk(self, o: np.ndarray) -> np.ndarray:
        """``(1, H, nu)`` the anchor of observation ``o`` (:func:`anchors`); the base proposer
        is asked once per observation."""
        if self._anchor is None or not np.array_equal(self._anchor[0], o):
            self._anchor = (o.copy(), anchors(self.task, o, self.config, self.horizon, self._base))
        return self._anchor[1]

    def propose(self, obs, state=None) -> np.ndarray:
        """``(H, nu)`` action chunk for ``obs``, the episode's next observation (a new tick
        whenever the observation differs from the last one). Asked twice with the same
        observation (a refiner and a recorder in one tick) it answers the same. A new chunk
        is inferred every ``config.execute`` ticks; see ``config.ensemble`` for what is
        proposed from the stored chunks."""
        o = self.task.check_obs(obs)
        if self._current is not None and np.array_equal(o, self._current):
            return self._answer.copy()
        if self._current is not None:
            self._history = self._past(o)
        self._current, self._tick = o.copy(), self._tick + 1
        cfg = self.config
        if not self._chunks or self._tick - self._chunks[-1][0] >= cfg.execute:
            self._chunks.append((self._tick, self._sample(o, self._noise).mean(axis=0)))
        # a chunk older than H ticks covers none of the ticks to come
        self._chunks = [(t, c) for t, c in self._chunks if self._tick - t < self.horizon]
        self._answer = self._from_chunks()
        return self._answer.copy()

    def _from_chunks(self) -> np.ndarray:
        """``(H, nu)``: the stored chunks' actions for this tick and the H - 1 after it."""
        H, t = self.horizon, self._tick
        newest_t, newest = self._chunks[-1]
        rows = np.minimum(t - newest_t + np.arange(H), H - 1)  # past its end, its last action held
        out = newest[rows]
        m = self.config.ensemble
        if m is None or len(self._chunks) == 1:
            return out
        total, weight = np.zeros_like(out), np.zeros(H)
        for t_c, c in self._chunks:
            j = t - t_c + np.arange(H)
            covered = j < H
            w = np.exp(-m * (t - t_c))
            total[covered] += w * c[j[covered]]
            weight[covered] += w
        # ticks that only the newest chunk's held last action reaches keep it
        return np.where(weight[:, None] > 0, total / np.maximum(weight, 1e-300)[:, None], out)

    def sample(self, obs, state, n: int, rng: np.random.Generator) -> np.ndarray:
        """``(n, H, nu)`` chunks for ``obs`` (the observation of the last :meth:`propose`, or
        the next one), flowed from noise drawn from ``rng``."""
        n = number(n, "n (samples)", low=1, integer=True)
        o = self.task.check_obs(obs)
        return self._sample(o, rng.standard_normal((n, self.horizon * self.task.nu)))

    def _window(self, o: np.ndarray) -> np.ndarray:
        """``(n_obs_steps, n_obs)``: the history before ``o`` (first frame repeated), then ``o``."""
        frames = [*self._past(o), o]
        return np.stack([frames[0]] * (self.config.n_obs_steps - len(frames)) + frames)

    def _past(self, o: np.ndarray) -> list[np.ndarray]:
        """The last ``n_obs_steps - 1`` observations before ``o``."""
        keep = self.config.n_obs_steps - 1
        past = self._history if self._current is None or np.array_equal(o, self._current) else [*self._history, self._current]
        return past[len(past) - keep:] if keep else []

    def _sample(self, o: np.ndarray, x0: np.ndarray) -> np.ndarray:
        """Flow ``(B, D)`` noise to ``(B, H, nu)`` chunks for observation ``o`` (a memory:
        ``B`` copies of :meth:`_recall`, the noise unused)."""
        torch = self.torch
        c = context(self.task, self._window(o), self.config.frame)
        cn = (c - self.stats["x_mean"]) / self.stats["x_std"]
        if self._memory is not None:
            yn = np.repeat(self._recall(cn)[None], len(x0), axis=0)
        else:
            x = torch.as_tensor(x0, dtype=torch.float32)
            with torch.inference_mode(), torch_threads(1):
                yn = _integrate(torch, self.net, x, torch.as_tensor(cn, dtype=torch.float32).expand(len(x), -1),
                                self.config.flow_steps).double().numpy()
        y = (yn * self.stats["y_std"] + self.stats["y_mean"]).reshape(len(yn), *self.chunk_shape)
        y = world_chunks(self.task, np.broadcast_to(o, (len(y), len(o))), y, self._base_chunk(o), self.config)
        return np.clip(y, self.task.action_low, self.task.action_high)

    def _recall(self, cn: np.ndarray) -> np.ndarray:
        """A memory's normalized target ``(H*nu,)`` at normalized context ``cn``: the mean of
        the nearest samples' (``neighbours``) or their local linear fit's value (``local``)."""
        _, idx = self._memory.query(cn, k=min(self.config.neighbours, self._memory.n))
        idx = np.atleast_1d(idx)
        y = self.stats["memory_y"][idx]
        if self.config.learner == "neighbours":
            return y.mean(axis=0)
        return local_linear(self.stats["memory_x"][idx] - cn, y, self.config.ridge)

    # -- persistence -------------------------------------------------------------------------

    def metadata(self) -> dict:
        torch = self.torch
        import twinloop

        return {
            "format_version": FORMAT_VERSION,
            "kind": KIND,
            "task": self.task.name,
            "obs_names": list(self.task.obs_names),
            "obs_dim": len(self.task.obs_names),
            "action_dim": int(self.task.nu),
            "chunk": self.horizon,
            "context_dim": int(len(self.stats["x_mean"])),
            "goal": self.task.goal_features().tolist(),
            "config": asdict(self.config),
            "n_params": self.n_params,
            "torch_version": str(torch.__version__),
            "twinloop_version": getattr(twinloop, "__version__", "unknown"),
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write weights, normalization stats and metadata to ``path`` atomically."""
        return save_checkpoint(path, self.metadata(), self.stats, {} if self.net is None else self.net.state_dict())

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
        blob = load_checkpoint(path, "twinloop policy")
        meta = blob["meta"]
        version = meta.get("format_version")
        if version != FORMAT_VERSION:
            hint = " (an MLP policy of an older twinloop: train it again with twinloop distill)" if version == 1 else ""
            raise TwinloopError(f"{path} has policy format version {version!r}; this twinloop reads "
                                f"version {FORMAT_VERSION}{hint}")
        if meta["task"] != task.name:
            raise TwinloopError(f"{path} was trained for task {meta['task']!r}, not {task.name!r}")
        if meta["action_dim"] != task.nu:
            raise TwinloopError(f"{path} predicts {meta['action_dim']}-dim actions but task {task.name!r} has {task.nu}")
        if meta["obs_dim"] != len(task.obs_names):
            raise TwinloopError(
                f"{path} reads {meta['obs_dim']}-dim observations but task {task.name!r} has {len(task.obs_names)}"
            )
        cfg = PolicyConfig(**meta["config"])
        n_ctx = context(task, np.zeros((cfg.n_obs_steps, len(task.obs_names))), cfg.frame).shape[-1]
        if meta["context_dim"] != n_ctx:
            raise TwinloopError(f"{path} expects {meta['context_dim']} context inputs; task {task.name!r} gives {n_ctx}")
        stats = {k: v.numpy() for k, v in blob["stats"].items()}
        if cfg.learner in MEMORIES:
            return cls(task, None, stats, cfg, meta["chunk"])
        net = _velocity_net(torch, n_ctx, meta["chunk"] * task.nu, cfg)
        try:
            net.load_state_dict(blob["state_dict"])
        except RuntimeError as exc:
            raise TwinloopError(f"{path}: weights do not fit the network its config describes: {exc}") from exc
        return cls(task, net, stats, cfg, meta["chunk"])
