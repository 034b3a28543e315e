"""Checks of a task's own declarations, where a user's mistakes are made: a horizon longer
than an episode (a unit slip), a keyframe outside its joint's range (degrees for radians)."""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.errors import TwinloopError


def check_horizon(task, horizon: float) -> float:
    """``horizon`` (s) if a plan that long fits in one episode of ``task``, else a clear
    error with the unit (a 500 s horizon meant as 500 ms)."""
    episode = task.max_ticks * task.control_period
    if horizon > episode + 1e-9:
        raise TwinloopError(f"horizon {horizon:g} s is longer than a whole episode of task {task.name!r} "
                            f"({episode:g} s = {task.max_ticks} ticks of {task.control_period:g} s); the horizon "
                            f"is in seconds (its default: {task.horizon:g} s)")
    return horizon


def check_keyframe(model: mujoco.MjModel, name: str) -> None:
    """Raise if the scene's first keyframe (a :class:`SceneTask`'s start pose) puts a limited
    hinge or slide joint outside its range: MuJoCo compiles a joint's ``range`` from degrees
    unless the scene says ``<compiler angle="radian"/>``, but reads keyframe ``qpos`` in radians
    always, so a pose written in degrees lands far outside."""
    if not model.nkey:
        return
    for j in range(model.njnt):
        kind = mujoco.mjtJoint(model.jnt_type[j])
        if not model.jnt_limited[j] or kind not in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE):
            continue
        q = float(model.key_qpos[0, model.jnt_qposadr[j]])
        lo, hi = (float(x) for x in model.jnt_range[j])
        if not lo - 1e-6 <= q <= hi + 1e-6:
            jname = model.joint(j).name or f"#{j}"
            if kind == mujoco.mjtJoint.mjJNT_HINGE:
                unit = (f"{q:g} rad ({np.degrees(q):g} deg), outside its range [{lo:g}, {hi:g}] rad "
                        f"([{np.degrees(lo):g}, {np.degrees(hi):g}] deg). Keyframe qpos is always in radians; "
                        "a joint range is in degrees unless the scene sets <compiler angle=\"radian\"/>")
            else:
                unit = f"{q:g} m, outside its range [{lo:g}, {hi:g}] m"
            raise TwinloopError(f"task {name!r}: the scene's keyframe puts joint {jname!r} at {unit}")
