"""A distilled policy's configuration (:class:`PolicyConfig`), its demonstrations (:class:`Demo`)
and its training record (:class:`TrainLog`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from twinloop.errors import TwinloopError, choose, number

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
