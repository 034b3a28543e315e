"""What a batch did, told to an optimizer that reasons over rollouts (a language model)."""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.plan import Feedback, PlanSpec
from twinloop.rollouts import Rollouts


def batch_feedback(task, spec: PlanSpec, r: Rollouts, cand: np.ndarray, costs: np.ndarray, description: str,
                   state_names: tuple[str, ...]) -> Feedback:
    """The :class:`~twinloop.plan.Feedback` of ``(K, N, nu)`` candidates ``cand`` with ``(K,)``
    ``costs`` and their rollouts ``r``: states at the control ticks, per-term costs on demand."""
    ticks = np.arange(0, r.horizon_steps + 1, spec.substeps)
    return Feedback(
        description=description, spec=spec, candidates=cand, costs=costs,
        unstable=~r.ok.all(axis=0), times=ticks * r.dt, states=r.qpos[0][:, ticks],
        state_names=state_names,
        cost_terms=lambda: {k: v.mean(axis=0) for k, v in task.rollout_terms(r).items()},
        failure=task.failure,
    )


def qpos_names(model: mujoco.MjModel) -> tuple[str, ...]:
    """``(nq,)`` names of a model's position coordinates: the joint's name, indexed for the
    7 of a free joint and the 4 of a ball joint."""
    width = {int(mujoco.mjtJoint.mjJNT_FREE): 7, int(mujoco.mjtJoint.mjJNT_BALL): 4}
    names: list[str] = []
    for j in range(model.njnt):
        name = model.joint(j).name or f"joint{j}"
        n = width.get(int(model.jnt_type[j]), 1)
        names += [name] if n == 1 else [f"{name}[{i}]" for i in range(n)]
    return tuple(names)
