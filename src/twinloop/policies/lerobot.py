"""Policies written for LeRobot, as twinloop proposers.

Any object with LeRobot's policy interface (``reset()``, ``select_action(batch)``,
``predict_action_chunk(batch)``: a trained ``lerobot.policies`` policy, or your own class) is
adapted by :class:`LeRobotProposer`, so that twinloop can refine its actions in the twin::

    from lerobot.policies.act.modeling_act import ACTPolicy
    policy = ACTPolicy.from_pretrained("path/to/checkpoint")
    proposer = LeRobotProposer(task, policy, preprocess=pre, postprocess=post)
    controller = Controller(refiner, proposer)          # refined around the policy's chunks

Each tick the observation becomes a batch ``{state_key: (1, n_obs) float32 tensor, **extra}``
(``extra``: e.g. ``{"task": ["push the T"]}`` for a language-conditioned policy), optionally
passed through ``preprocess`` (lerobot 0.4 keeps normalization outside the policy, in its
pre/post-processor pipelines). ``mode="chunk"`` asks ``predict_action_chunk`` for an
``(1, H, nu)`` chunk, the prior that refinement starts from; ``mode="select"`` asks
``select_action`` for one ``(1, nu)`` action (the policy keeps its own queues: LeRobot's
diffusion policy fills its observation history only there). ``postprocess`` maps the policy's
output back to actions.

Randomness: LeRobot policies draw their sampling noise from torch's global generator, so
``reset(seed)`` seeds it (``torch.manual_seed``) to make an episode repeatable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from twinloop.errors import TwinloopError, as_array, choose
from twinloop.policies.distilled import require_torch
from twinloop.tasks.base import Task

MODES = ("chunk", "select")


class LeRobotProposer:
    """A policy with LeRobot's interface as a proposer: ``propose(obs, state) -> (H, nu)``.

    Args:
        task: the task whose observations the policy reads and whose actions it returns.
        policy: an object with ``reset()``, and ``predict_action_chunk(batch)`` (``mode``
            ``chunk``) or ``select_action(batch)`` (``mode`` ``select``).
        mode: ``chunk`` | ``select`` (see the module docstring).
        state_key: the batch key of the observation vector.
        extra: more batch entries, the same every tick (e.g. ``{"task": ["push the T"]}``).
        preprocess: ``batch -> batch`` before the policy (e.g. lerobot's preprocessor).
        postprocess: ``actions -> actions`` after it (e.g. lerobot's postprocessor).
    """

    def __init__(self, task: Task, policy, *, mode: str = "chunk", state_key: str = "observation.state",
                 extra: Mapping | None = None, preprocess: Callable | None = None,
                 postprocess: Callable | None = None):
        choose("mode", mode, MODES)
        method = "predict_action_chunk" if mode == "chunk" else "select_action"
        for hook in ("reset", method):
            if not callable(getattr(policy, hook, None)):
                raise TwinloopError(f"policy {type(policy).__name__} has no {hook}() method; mode {mode!r} needs "
                                    f"LeRobot's policy interface (reset, {method})")
        for name, fn in (("preprocess", preprocess), ("postprocess", postprocess)):
            if fn is not None and not callable(fn):
                raise TwinloopError(f"{name} must be callable, got {type(fn).__name__}")
        self.task, self.policy, self.mode, self.state_key = task, policy, mode, state_key
        self.extra = dict(extra or {})
        self.preprocess, self.postprocess = preprocess, postprocess
        self._call = getattr(policy, method)
        self.torch = require_torch()

    def reset(self, seed: int | None = None) -> None:
        """Start an episode: the policy's ``reset()``; seed torch's generator with ``seed``."""
        self.policy.reset()
        if seed is not None:
            self.torch.manual_seed(seed)

    def propose(self, obs, state=None) -> np.ndarray:
        """``(H, nu)`` actions (``H = 1`` in ``select`` mode), clipped to the action bounds."""
        torch = self.torch
        o = self.task.check_obs(obs)
        batch = {self.state_key: torch.as_tensor(o, dtype=torch.float32)[None], **self.extra}
        if self.preprocess is not None:
            batch = self.preprocess(batch)
        with torch.no_grad():
            out = self._call(batch)
        if self.postprocess is not None:
            out = self.postprocess(out)
        a = as_array(out.detach().cpu().numpy() if hasattr(out, "detach") else out, f"policy {self.mode} output")
        if self.mode == "select":
            a = a.reshape(-1, self.task.nu)[:1]
        elif a.ndim == 3 and a.shape[0] == 1:
            a = a[0]
        if a.ndim != 2 or a.shape[1] != self.task.nu:
            raise TwinloopError(f"policy returned actions of shape {np.shape(out)}; expected (1, H, {self.task.nu}) "
                                f"from predict_action_chunk or (1, {self.task.nu}) from select_action")
        return np.clip(a, self.task.action_low, self.task.action_high)


__all__ = ["MODES", "LeRobotProposer"]
