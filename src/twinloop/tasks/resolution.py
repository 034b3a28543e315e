"""One deformable at two resolutions: the world's mesh and a coarser (or finer) twin's.

A grasp task's deformable can be built at another resolution (a towel with fewer flex
vertices, a rope of fewer capsules: :meth:`GraspTask.at_resolution
<twinloop.tasks.deformable.GraspTask.at_resolution>`) with the same size, mass and material,
the same keypoints (names, places on the object, observation layout) and so the same goal and
cost. A state moves between the two through the keypoints, the maps a robot that sees only
keypoints already uses::

    state (resolution a) -> keypoints, their velocities, gripper, grasp   (forward kinematics)
                         -> state (resolution b)                           (b's keypoint estimator)

So a twin coarser than the world plans from the world's observation directly (its own
estimator reads the same keypoints), and its rollouts are scored on the same keypoints.
"""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array


def observe(task, state) -> np.ndarray:
    """The noise-free observation ``(7 + 6 n,)`` of a twin state ``[qpos, qvel, act]`` of ``task``."""
    m = task.model
    s = as_array(state, "state", (m.nq + m.nv + m.na,))
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:], d.act[:] = s[: m.nq], s[m.nq : m.nq + m.nv], s[m.nq + m.nv :]
    mujoco.mj_forward(m, d)
    return task.obs_from_data(m, d)


def restate(state, source, target) -> np.ndarray:
    """A ``source`` twin state ``[qpos, qvel, act]`` mapped onto ``target``'s resolution: its
    keypoints (positions and velocities), gripper and grasp, estimated by ``target``
    (``target.state_from_obs``). The two tasks must observe the same keypoints."""
    if tuple(source.obs_names) != tuple(target.obs_names):
        raise TwinloopError(f"restate: {source.name} and {target.name} do not observe the same keypoints")
    return target.state_from_obs(observe(source, state))


__all__ = ["observe", "restate"]
