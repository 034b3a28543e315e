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

torch is the optional ``[learn]`` extra; this package imports without it and raises a
:class:`~twinloop.errors.TwinloopError` naming the extra when a policy is built or loaded.

Modules: :mod:`~twinloop.policies.distilled.config` (the config, demonstrations, training
log), :mod:`~twinloop.policies.distilled.targets` (contexts, labels, training arrays),
:mod:`~twinloop.policies.distilled.flow` (the velocity network and its training),
:mod:`~twinloop.policies.distilled.policy` (the policy); every public name is importable
from here.
"""

from twinloop.policies.distilled.config import (
    FORMAT_VERSION,
    KIND,
    LABELS,
    LEARN_HINT,
    LEARNERS,
    MEMORIES,
    Demo,
    PolicyConfig,
    TrainLog,
    require_torch,
)
from twinloop.policies.distilled.policy import DistilledPolicy
from twinloop.policies.distilled.targets import (
    anchors,
    base_proposer,
    chunk_targets,
    context,
    features,
    fit_chunks,
    histories,
    local_linear,
    policy_targets,
    smoothed,
    split_episodes,
    train_steps,
    training_arrays,
    world_chunks,
)

__all__ = [
    "FORMAT_VERSION",
    "KIND",
    "LABELS",
    "LEARN_HINT",
    "LEARNERS",
    "MEMORIES",
    "Demo",
    "DistilledPolicy",
    "PolicyConfig",
    "TrainLog",
    "anchors",
    "base_proposer",
    "chunk_targets",
    "context",
    "features",
    "fit_chunks",
    "histories",
    "local_linear",
    "policy_targets",
    "require_torch",
    "smoothed",
    "split_episodes",
    "train_steps",
    "training_arrays",
    "world_chunks",
]
