"""Distilled base policies: a flow-matching policy over action chunks, trained on refined actions.

The policy maps a short history of observations (and the task goal) to an action chunk of
``H`` control ticks. It is trained on what a refined controller chose, so at run time it
proposes in a few forward passes what refinement found with hundreds of rollouts, and
refinement starts from that proposal instead of from scratch. A generative model (not a
regression to the mean) so that two ways of pushing a block (around its left or its right)
stay two modes instead of being averaged into a push through its middle::

    c      = [features(obs_{t-n+1}), ..., features(obs_t), goal]     normalized context
    y      = (chunk_t - hold_action(state_t) - mu_y) / sigma_y        (H*nu,) normalized target

(with ``PolicyConfig.frame`` the observations, goal, chunk and hold action are first expressed
in the task's policy frame of ``obs_t``, e.g. the pushed block's own frame)
    x_s    = (1 - s) x0 + s y,   x0 ~ N(0, I),   s ~ U(0, 1)           the straight path
    loss   = | v(x_s, s, c) - (y - x0) |^2                            flow matching (rectified flow)

Sampling integrates ``dx/ds = v(x, s, c)`` from ``x0`` at ``s = 0`` to ``s = 1`` with
``flow_steps`` Euler steps; the chunk is ``hold + mu_y + sigma_y * x(1)``, clipped to the
action bounds. ``v`` is a residual MLP whose blocks are modulated (FiLM) by the context and
the flow time (about 1-5 M parameters: it trains on two CPU cores).

Randomness: :meth:`DistilledPolicy.sample` draws ``x0`` from the caller's NumPy generator;
:meth:`DistilledPolicy.propose` flows from one noise vector drawn per episode by
``reset(seed)`` (times ``temperature``; 0 gives the deterministic flow from ``x0 = 0``), so a
proposal does not hop between modes from one tick to the next. Neither touches torch's
global random state. The policy keeps the last ``n_obs_steps - 1`` observations of the episode
(padded with the first one), as LeRobot's policies do.

torch is the optional ``[learn]`` extra; this module imports without it and raises a
:class:`~twinloop.errors.TwinloopError` naming the extra when a policy is built or loaded.
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

from twinloop.data.episodes import check_recorded_on
from twinloop.errors import TwinloopError, as_array, choose, number
from twinloop.io import load_checkpoint, save_checkpoint
from twinloop.tasks.base import Task

#: 1: the MLP regression policy of twinloop <= 0.1 (no longer read); 2: flow matching
FORMAT_VERSION = 2
KIND = "twinloop.flow_chunk_policy"
#: what maps a context to a chunk (PolicyConfig.learner)
LEARNERS = ("flow", "neighbours", "local")
#: learners that keep every training sample instead of a network
MEMORIES = ("neighbours", "local")
#: what a chunk label is (PolicyConfig.labels)
LABELS = ("plan", "decisions")
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
    """Architecture and training knobs of a distilled (flow-matching) policy.

    Attributes:
        chunk: H, control ticks per predicted action chunk; ``None`` = the task's planning
            horizon (``task.horizon / task.control_period``).
        n_obs_steps: observations the policy sees (the current one and the ones before it).
        width: width of the velocity network's residual blocks.
        depth: number of residual blocks.
        steps: gradient steps of training when ``epochs`` is ``None`` (the data size does not
            change the compute), else the most steps ``epochs`` may ask for.
        epochs: passes over the training samples (``ceil(epochs * samples / batch_size)``
            steps, at most ``steps``): compute that grows with the data, as rounds add to it.
            ``None``: ``steps`` steps.
        batch_size: samples per gradient step.
        val_fraction: fraction of the demonstration *episodes* held out (seeded; at least one
            when > 0 and there are two or more) to measure the flow-matching loss of the
            weight average every ``val_every`` steps; the policy keeps the weights of the
            lowest held-out loss. 0: no hold-out, the last weights.
        val_every: steps between held-out evaluations.
        patience: held-out evaluations without a new lowest loss before training stops early
            (``None``: never stops early).
        lr: AdamW learning rate (cosine-decayed to 5% over training).
        weight_decay: AdamW weight decay.
        ema: decay of the exponential moving average of the weights that the policy uses.
        flow_steps: Euler steps of sampling.
        temperature: scale of the noise ``propose`` flows from (0: deterministic).
        average: chunks ``propose`` flows per inference, each from its own noise of the
            episode (times ``temperature``), and averages: an estimate of the labels'
            conditional mean. A sampled chunk reproduces the teacher's label noise; the mean
            does not. 1: one chunk. More than 1 needs ``temperature > 0``.
        relative: predict the chunk relative to ``task.hold_action(state)`` (the pusher's own
            position for push tasks), which makes the targets small and translation-invariant.
        residual: predict the chunk relative to the chunk of the task's scripted proposer
            (:meth:`~twinloop.tasks.base.Task.default_proposer`, which the policy runs
            alongside, asked once per tick): a residual policy that learns the teacher's
            correction of the script, so that where it has learned nothing it falls back to
            the script instead of to holding still. Needs a task with a scripted proposer;
            ``relative`` is then moot.
        frame: see the observation history, the goal and the chunk in the task's
            :meth:`~twinloop.tasks.base.Task.policy_frame` of the newest observation (push-t:
            the block's own frame), so that one push learned at one pose of the object holds
            at every other. False: the world frame.
        learner: ``flow`` (the flow-matching network) | ``neighbours`` (no network: a memory
            of every training sample, proposing the mean target of the ``neighbours`` nearest
            in standardized context; instant to fit, deterministic, its ``sample`` returns
            copies of that mean; the held-out and training-step knobs do not act). With
            ``residual`` on push-t the memory succeeds alone where the network does not: the
            network's fit averages the teacher's corrections over many episodes, the memory
            follows the few nearest ones. ``local``: the same memory, but a locally linear
            fit (:func:`local_linear`) of the targets of the ``neighbours`` nearest samples,
            evaluated at the query: where the mean of neighbours lying to one side of the
            query is biased toward them, the local fit follows the trend through them.
        neighbours: samples a ``neighbours`` policy averages or a ``local`` one fits (at most
            the number of training samples).
        ridge: penalty on the slopes of a ``local`` fit, in standardized context units; the
            intercept is not penalized, so a large ridge tends to the neighbours' mean and 0
            fits the slopes exactly (least norm where the neighbours do not determine them).
        labels: what a chunk label is, for demos with ``plans``: ``plan`` (the refined plan of
            the tick, cut or held to ``chunk`` ticks) | ``decisions`` (the first action of each
            tick's plan, the teacher's decision there, for this tick and the ``chunk - 1`` after
            it: what the teacher did next, not what it planned). Demos without plans: the
            actions taken next, either way.
        smooth: with ``decisions`` labels (or demos without plans), a centred moving average
            over this many ticks of the decision sequence before it is cut into chunks (1:
            none). A sampling teacher's decision is its plan's mean plus sampling noise as
            large as the decision itself (push-t, MPPI at K=32); the pusher's PD stage averages
            that noise away in the world, and a label averaged over neighbouring ticks does
            the same for the learner.
        execute: ticks a predicted chunk runs before :meth:`DistilledPolicy.propose` infers
            the next one (1: a new chunk every tick, receding horizon; up to ``chunk``: action
            chunking, fewer decisions to compound errors over). Between inferences it
            proposes the rest of the last chunk, its last action held.
        ensemble: temporal ensembling (ACT's): ``None`` proposes the newest chunk alone; a
            number ``m`` averages, for each tick of the proposed chunk, what every stored
            chunk still covering it predicted, weighted ``exp(-m * age)`` (age in ticks since
            the chunk was predicted: ``m > 0`` trusts newer chunks more, 0 weighs all alike).
            It smooths the noise of labels from a sampling teacher out of the executed actions.
        threads: torch threads while training (inference always uses one). More than one
            pays only on an otherwise idle machine: on a busy 2-core one thread sync made a
            step 10x slower.
        seed: seed of initialization, batch order and training noise.
    """

    chunk: int | None = None
    n_obs_steps: int = 2
    width: int = 256
    depth: int = 4
    steps: int = 4000
    epochs: float | None = None
    batch_size: int = 256
    val_fraction: float = 0.0
    val_every: int = 250
    patience: int | None = None
    lr: float = 1e-3
    weight_decay: float = 1e-4
    ema: float = 0.995
    flow_steps: int = 10
    temperature: float = 0.0
    average: int = 1
    relative: bool = True
    frame: bool = False
    residual: bool = False
    learner: str = "flow"
    neighbours: int = 4
    ridge: float = 1.0
    labels: str = "plan"
    smooth: int = 1
    execute: int = 1
    ensemble: float | None = None
    threads: int = 1
    seed: int = 0

    def __post_init__(self):
        if self.chunk is not None:
            object.__setattr__(self, "chunk", number(self.chunk, "chunk (ticks)", low=1, integer=True))
        choose("labels", self.labels, LABELS)
        choose("learner", self.learner, LEARNERS)
        for name in ("n_obs_steps", "width", "depth", "steps", "batch_size", "flow_steps", "execute", "threads",
                     "val_every", "average", "smooth", "neighbours"):
            object.__setattr__(self, name, number(getattr(self, name), name, low=1, integer=True))
        object.__setattr__(self, "seed", number(self.seed, "seed", low=0, integer=True))
        object.__setattr__(self, "lr", number(self.lr, "lr", low=0, low_open=True))
        object.__setattr__(self, "weight_decay", number(self.weight_decay, "weight_decay", low=0))
        object.__setattr__(self, "ema", number(self.ema, "ema", low=0, high=1, high_open=True))
        object.__setattr__(self, "temperature", number(self.temperature, "temperature", low=0))
        object.__setattr__(self, "ridge", number(self.ridge, "ridge", low=0))
        if self.epochs is not None:
            object.__setattr__(self, "epochs", number(self.epochs, "epochs", low=0, low_open=True))
        if self.patience is not None:
            object.__setattr__(self, "patience", number(self.patience, "patience (evaluations)", low=1, integer=True))
        object.__setattr__(self, "val_fraction", number(self.val_fraction, "val_fraction", low=0, high=1, high_open=True))
        if self.ensemble is not None:
            object.__setattr__(self, "ensemble", number(self.ensemble, "ensemble (1/tick)", low=0))
        if self.smooth > 1 and self.labels == "plan":
            raise TwinloopError(f"smooth ({self.smooth} ticks) > 1 needs labels='decisions': a plan is not smoothed")
        if self.average > 1 and self.temperature == 0:
            raise TwinloopError(f"average ({self.average} chunks) > 1 needs temperature > 0: flows from zero noise "
                                "are all the same chunk")
        if self.chunk is not None and self.execute > self.chunk:
            raise TwinloopError(f"execute ({self.execute} ticks) must be at most chunk ({self.chunk} ticks)")


@dataclass
class Demo:
    """One demonstration episode: ``obs (T, n_obs)`` seen and ``actions (T, nu)`` taken, and
    optionally ``plans (T, H', nu)``: the chunk to imitate at each tick (a refined plan);
    without plans the chunk is the next H actions taken.

    Anything with ``.obs`` and ``.actions`` of these shapes (e.g. a recorded
    :class:`twinloop.data.episodes.Episode`, whose ``plans`` come from ``refine.plan``)
    works wherever a Demo is accepted.
    """

    obs: np.ndarray
    actions: np.ndarray
    plans: np.ndarray | None = None


@dataclass
class TrainLog:
    """Training loss per 50 steps (flow-matching MSE), held-out loss per ``val_every`` steps
    (``val_steps``, ``val_losses``), the step whose weights were kept, steps run, samples kept
    (training, held out), duplicates dropped, seconds."""

    losses: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    val_losses: list[float] = field(default_factory=list)
    best_step: int = 0
    steps: int = 0
    samples: int = 0
    val_samples: int = 0
    duplicates: int = 0
    seconds: float = 0.0


# -- features and targets --------------------------------------------------------------------


def _angle_columns(task: Task) -> list[int]:
    # a wrapped angle jumps by 2 pi at +-pi; its sine and cosine do not
    return [i for i, n in enumerate(task.obs_names) if n.endswith("yaw") or n.endswith("theta")]


def features(task: Task, obs: np.ndarray) -> np.ndarray:
    """``(..., n_obs)`` observations -> ``(..., F)`` per-frame inputs (obs, sin/cos of angles)."""
    obs = np.asarray(obs, dtype=float)
    ang = obs[..., _angle_columns(task)]
    return np.concatenate([obs, np.sin(ang), np.cos(ang)], axis=-1)


def context(task: Task, history: np.ndarray, frame: bool = False) -> np.ndarray:
    """``(..., n, n_obs)`` observation histories (oldest first) -> ``(..., n*F + G)`` policy
    context: each frame's features, then the goal; with ``frame`` all of them seen from
    ``task.policy_frame`` of the newest observation (:meth:`~twinloop.tasks.base.Task.obs_in_frame`,
    :meth:`~twinloop.tasks.base.Task.goal_in_frame`)."""
    history = np.asarray(history, dtype=float)
    if frame:
        pose = task.policy_frame(history[..., -1, :])
        history, g = task.obs_in_frame(pose[..., None, :], history), task.goal_in_frame(pose)
    else:
        g = np.broadcast_to(task.goal_features(), (*history.shape[:-2], len(task.goal_features())))
    f = features(task, history)
    f = f.reshape(*f.shape[:-2], -1)
    return np.concatenate([f, g], axis=-1)


def histories(obs: np.ndarray, n: int) -> np.ndarray:
    """``(T, n_obs)`` -> ``(T, n, n_obs)``: at each tick the last ``n`` observations, the
    first one repeated before the episode's start."""
    idx = np.maximum(np.arange(len(obs))[:, None] + np.arange(1 - n, 1)[None, :], 0)
    return np.asarray(obs, dtype=float)[idx]


def chunk_targets(actions: np.ndarray, horizon: int) -> np.ndarray:
    """``(T, nu)`` actions -> ``(T, H, nu)``: at each tick the next H actions, the last one
    held past the episode's end (as the world would hold it)."""
    a = np.asarray(actions, dtype=float)
    pad = np.concatenate([a, np.repeat(a[-1:], horizon - 1, axis=0)])
    idx = np.arange(len(a))[:, None] + np.arange(horizon)[None, :]
    return pad[idx]


def smoothed(actions: np.ndarray, window: int) -> np.ndarray:
    """``(T, nu)`` -> ``(T, nu)``: the centred moving average over ``window`` ticks (the
    first and last actions held beyond the ends); ``window`` 1 returns them unchanged."""
    a = np.asarray(actions, dtype=float)
    before, after = (window - 1) // 2, window // 2
    pad = np.concatenate([np.repeat(a[:1], before, axis=0), a, np.repeat(a[-1:], after, axis=0)])
    c = np.concatenate([np.zeros((1, a.shape[1])), np.cumsum(pad, axis=0)])
    return (c[window:] - c[:-window]) / window


def fit_chunks(plans: np.ndarray, horizon: int) -> np.ndarray:
    """``(T, H', nu)`` plans -> ``(T, H, nu)``: cut to H ticks, or the last action held."""
    p = np.asarray(plans, dtype=float)
    if p.shape[1] >= horizon:
        return p[:, :horizon]
    return np.concatenate([p, np.repeat(p[:, -1:], horizon - p.shape[1], axis=1)], axis=1)


def base_proposer(task: Task, cfg: PolicyConfig):
    """The proposer a residual policy (:attr:`PolicyConfig.residual`) adds to: a fresh
    ``task.default_proposer()``; None for a policy that is not residual."""
    if not cfg.residual:
        return None
    base = task.default_proposer()
    if base is None:
        raise TwinloopError(f"residual=True needs a task with a scripted proposer; task {task.name!r} has none")
    return base


def anchors(task: Task, obs: np.ndarray, cfg: PolicyConfig, horizon: int, base=None) -> np.ndarray:
    """``(T, H, nu)`` what the chunks at observations ``(T, n_obs)`` are predicted relative to:
    the chunk of ``base`` (:func:`base_proposer`, asked once per observation in order: an
    episode replayed) for a residual policy, else ``task.hold_action`` of each state held over
    the chunk (:attr:`PolicyConfig.relative`), else zeros."""
    obs = np.atleast_2d(obs)
    if base is not None:
        return np.stack([fit_chunks(np.asarray(base.propose(o, task.state_from_obs(o)), dtype=float)[None], horizon)[0]
                         for o in obs])
    if not cfg.relative:
        return np.zeros((len(obs), horizon, task.nu))
    hold = np.stack([np.asarray(task.hold_action(task.state_from_obs(o)), dtype=float) for o in obs])
    return np.repeat(hold[:, None], horizon, axis=1)


def policy_targets(task: Task, obs: np.ndarray, chunks: np.ndarray, anchor: np.ndarray, cfg: PolicyConfig) -> np.ndarray:
    """World chunks ``(T, H, nu)`` taken at observations ``(T, n_obs)`` -> what the policy
    predicts: the chunk less its ``anchor`` (:func:`anchors`), in the policy frame
    (:attr:`PolicyConfig.frame`). The inverse is :func:`world_chunks`."""
    obs = np.atleast_2d(obs)
    if not cfg.frame:
        return np.asarray(chunks, dtype=float) - anchor
    pose = task.policy_frame(obs)[:, None]
    return task.actions_in_frame(pose, chunks) - task.actions_in_frame(pose, anchor)


def world_chunks(task: Task, obs: np.ndarray, targets: np.ndarray, anchor: np.ndarray, cfg: PolicyConfig) -> np.ndarray:
    """The inverse of :func:`policy_targets`: ``(T, H, nu)`` predictions at ``(T, n_obs)``
    observations -> world chunks (not clipped)."""
    obs = np.atleast_2d(obs)
    if not cfg.frame:
        return np.asarray(targets, dtype=float) + anchor
    pose = task.policy_frame(obs)[:, None]
    return task.actions_in_frame(pose, targets + task.actions_in_frame(pose, anchor), inverse=True)


def training_arrays(task: Task, demos: Sequence, cfg: PolicyConfig, horizon: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(N, C)`` contexts and ``(N, H*nu)`` relative chunks of ``demos``, duplicates dropped
    (a state and label seen twice, e.g. a pusher at rest, would weigh twice); returns them
    and the number of duplicates."""
    xs, ys = [], []
    n_obs = len(task.obs_names)
    check_recorded_on(task, demos, "demonstrations")
    for i, d in enumerate(demos):
        obs = as_array(getattr(d, "obs", None), f"demo {i} obs", (None, n_obs))
        act = as_array(getattr(d, "actions", None), f"demo {i} actions", (len(obs), task.nu))
        plans = getattr(d, "plans", None)
        if plans is not None:
            plans = as_array(plans, f"demo {i} plans", (len(obs), None, task.nu))
        if plans is not None and cfg.labels == "plan":
            chunks = fit_chunks(plans, horizon)
        else:
            chunks = chunk_targets(smoothed(act if plans is None else plans[:, 0], cfg.smooth), horizon)
        xs.append(context(task, histories(obs, cfg.n_obs_steps), cfg.frame))
        base = base_proposer(task, cfg)
        if base is not None:
            base.reset(None)
        ys.append(policy_targets(task, obs, chunks, anchors(task, obs, cfg, horizon, base), cfg).reshape(len(obs), -1))
    if not xs:
        raise TwinloopError("no demonstrations to train on: need at least one episode")
    x, y = np.concatenate(xs), np.concatenate(ys)
    # rounded to 1e-9 so that float noise does not hide a repeat
    _, keep = np.unique(np.round(np.concatenate([x, y], axis=1), 9), axis=0, return_index=True)
    keep.sort()
    return x[keep], y[keep], len(x) - len(keep)


def local_linear(dx: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    """The value at the query of a linear fit to ``(k, C)`` context offsets ``dx`` (sample
    minus query) and their ``(k, D)`` targets ``y``: ``(D,)``.

    Ridge regression with an unpenalized intercept (``ridge`` on the slopes), solved on the
    centred samples: ``W = argmin |(dx - mean) W - (y - mean)|^2 + ridge |W|^2`` and the
    answer ``mean(y) - mean(dx) W``. One sample, or slopes that ``ridge`` forces to zero, give
    the mean of ``y``; with ``ridge`` 0 and too few samples to fix every slope, the least-norm
    slopes (no direction the samples do not span is extrapolated along)."""
    dx, y = np.asarray(dx, dtype=float), np.asarray(y, dtype=float)
    dm, ym = dx.mean(axis=0), y.mean(axis=0)
    a = np.concatenate([dx - dm, math.sqrt(ridge) * np.eye(dx.shape[1])])
    b = np.concatenate([y - ym, np.zeros((dx.shape[1], y.shape[1]))])
    w = np.linalg.lstsq(a, b, rcond=None)[0]
    return ym - dm @ w


def split_episodes(demos: Sequence, fraction: float, seed: int) -> tuple[list, list]:
    """``demos`` -> (training, held-out) episodes: ``round(fraction * n)`` held out (at least
    one when ``fraction > 0`` and ``n >= 2``), chosen by ``seed``. Whole episodes, so that the
    held-out loss measures states the policy has not seen the neighbours of."""
    demos = list(demos)
    n_val = max(1, round(fraction * len(demos))) if fraction > 0 and len(demos) >= 2 else 0
    held = set(np.random.default_rng([seed, 29]).permutation(len(demos))[:n_val].tolist())
    return [d for i, d in enumerate(demos) if i not in held], [d for i, d in enumerate(demos) if i in held]


def train_steps(cfg: PolicyConfig, samples: int) -> int:
    """Gradient steps of training on ``samples`` samples: ``cfg.steps``, or ``cfg.epochs``
    passes over them (at most ``cfg.steps``)."""
    if cfg.epochs is None:
        return cfg.steps
    return int(min(cfg.steps, max(1, math.ceil(cfg.epochs * samples / cfg.batch_size))))


def _std(x: np.ndarray) -> np.ndarray:
    s = x.std(axis=0)
    # constant inputs (e.g. a fixed goal) would divide by zero; leave them unscaled
    return np.where(s > 1e-8, s, 1.0)


@contextmanager
def _threads(torch, n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# -- the velocity network ------------------------------------------------------------------------


def _velocity_net(torch, n_ctx: int, n_y: int, cfg: PolicyConfig):
    """``v(x (B, D), s (B,), c (B, C)) -> (B, D)``: a residual MLP, FiLM-modulated by the
    context and the flow time."""
    nn = torch.nn
    w = cfg.width

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(w, elementwise_affine=False)
            self.film = nn.Linear(w, 2 * w)
            self.mlp = nn.Sequential(nn.Linear(w, 2 * w), nn.SiLU(), nn.Linear(2 * w, w))

        def forward(self, h, c):
            scale, shift = self.film(c).chunk(2, dim=-1)
            return h + self.mlp(self.norm(h) * (1 + scale) + shift)

    class Velocity(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("freqs", torch.exp(torch.linspace(0.0, math.log(1000.0), w // 2)))
            self.time = nn.Sequential(nn.Linear(2 * (w // 2), w), nn.SiLU(), nn.Linear(w, w))
            self.ctx = nn.Sequential(nn.Linear(n_ctx, w), nn.SiLU(), nn.Linear(w, w))
            self.inp = nn.Linear(n_y, w)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.depth))
            self.out = nn.Sequential(nn.LayerNorm(w), nn.Linear(w, n_y))
            nn.init.zeros_(self.out[1].weight)  # start as the zero field: x0 flows nowhere
            nn.init.zeros_(self.out[1].bias)

        def forward(self, x, s, ctx):
            arg = s[:, None] * self.freqs[None, :]
            c = nn.functional.silu(self.time(torch.cat([arg.sin(), arg.cos()], dim=-1)) + self.ctx(ctx))
            h = self.inp(x)
            for b in self.blocks:
                h = b(h, c)
            return self.out(h)

    return Velocity()


# -- the policy ------------------------------------------------------------------------------


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
        with _threads(torch, cfg.threads):
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
        with _threads(torch, 1):
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
            with torch.inference_mode(), _threads(torch, 1):
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


# -- training and sampling ------------------------------------------------------------------------


def _flow_loss(torch, net, ctx, y, gen):
    """Rectified-flow loss of a batch: ``|v(x_s, s, c) - (y - x0)|^2``."""
    x0 = torch.randn(y.shape, generator=gen)
    s = torch.rand(len(y), generator=gen)
    xs = (1 - s[:, None]) * x0 + s[:, None] * y
    return torch.nn.functional.mse_loss(net(xs, s, ctx), y - x0)


def _mean_flow_loss(torch, net, ctx, y, n_noise: int, seed: int) -> float:
    """:func:`_flow_loss` averaged over ``n_noise`` draws of noise and flow time from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        return float(np.mean([_flow_loss(torch, net, ctx, y, gen).item() for _ in range(n_noise)]))


def _integrate(torch, net, x, ctx, n_steps: int):
    """Euler integration of ``dx/ds = v(x, s, c)`` from ``s = 0`` to 1."""
    ds = 1.0 / n_steps
    for i in range(n_steps):
        s = torch.full((len(x),), i * ds)
        x = x + ds * net(x, s, ctx)
    return x


def _train(torch, xn, yn, val, cfg: PolicyConfig, log: TrainLog, progress):
    """AdamW on the flow-matching loss; returns the EMA of the weights (in eval mode): the
    last, or with held-out data ``val = (x, y)`` the one of the lowest held-out loss."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    net = _velocity_net(torch, xn.shape[1], yn.shape[1], cfg)
    ema = _velocity_net(torch, xn.shape[1], yn.shape[1], cfg)
    ema.load_state_dict(net.state_dict())
    steps = log.steps = train_steps(cfg, len(xn))
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = min(200, steps // 10 + 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / warmup) * (
        0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(k, steps) / steps))))
    best, best_state, stale = math.inf, None, 0
    net.train()
    perm, pos, total, count = torch.randperm(len(xn), generator=gen), 0, 0.0, 0
    for step in range(1, steps + 1):
        if pos + cfg.batch_size > len(xn) and pos > 0:
            perm, pos = torch.randperm(len(xn), generator=gen), 0
        idx = perm[pos : pos + cfg.batch_size]
        pos += cfg.batch_size
        loss = _flow_loss(torch, net, xn[idx], yn[idx], gen)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        with torch.no_grad():
            for pe, p in zip(ema.parameters(), net.parameters()):
                pe.lerp_(p, 1 - cfg.ema)
        total, count = total + loss.item(), count + 1
        if step % 50 == 0 or step == steps:
            log.losses.append(total / count)
            total, count = 0.0, 0
            if progress is not None:
                progress(step, steps, log.losses[-1])
        if val is not None and (step % cfg.val_every == 0 or step == steps):
            v = _mean_flow_loss(torch, ema, *val, n_noise=4, seed=0)  # the same draws every time
            log.val_steps.append(step)
            log.val_losses.append(v)
            if v < best:
                best, best_state, stale, log.best_step = v, copy.deepcopy(ema.state_dict()), 0, step
            else:
                stale += 1
                if cfg.patience is not None and stale >= cfg.patience:
                    break
    log.steps = step
    if best_state is not None:
        ema.load_state_dict(best_state)
    else:
        log.best_step = step
    ema.eval()
    return ema
