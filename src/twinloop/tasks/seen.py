"""What a camera sees of a task: the observation entries images must supply.

A task that a camera can observe declares a :class:`Seen` (``Task.seen``): the entries of its
observation a perception model reads from images (positions and angles: the keypoints), the
velocity entries estimated as their rates, and the fixed cameras. Every other observation entry
is the robot's own state (its joints), which a camera world passes through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Seen:
    """What a camera sees of a task.

    Attributes:
        keypoints: observation entries read from images (m, or rad where the task's
            ``obs_units`` says so: an angle is learned as its cosine and sine).
        rates: ``{velocity entry: keypoint entry}``, each velocity estimated as the rate of
            change of that keypoint between control ticks.
        cameras: each camera's :class:`~twinloop.worlds.camera.CameraSpec` fields (default: one
            96 px camera straight above the origin, 0.68 m up).
        held: the robot knows what its grasp holds (a grasp task): the camera estimator places
            the grasped point under the fingers while the grasp holds it (:func:`held_seen`).
            Default: off.
    """

    keypoints: tuple[str, ...]
    rates: Mapping[str, str] = field(default_factory=dict)
    cameras: tuple[Mapping[str, object], ...] = ({},)
    held: bool = False


def held_seen(task, obs) -> np.ndarray:
    """``(n_obs,)`` a grasp task's completed camera observation with the grasped point placed
    under the fingers where the robot holds it: the grasp activation above 0.5 (the robot's own
    state) and the image reading the point within twice the capture radius of the fingers; the
    point is then put at the gripper less the finger's radius in z, as a held point sits pressed
    under the finger. Otherwise ``obs`` unchanged. (A point read farther than the capture radius
    from the fingers is what a scripted fold takes for dropped.)"""
    o = np.array(obs, dtype=float)
    g, _, act, pts, _ = task.split_obs(o)
    i = [k.name for k in task.keypoints].index(task.grasp_point)
    if act > 0.5 and np.linalg.norm(pts[i] - g) < 2 * task.capture_radius:
        radius = float(task.model.geom_size[task.model.geom("finger").id, 0])
        at = list(task.obs_names).index(f"{task.grasp_point}_x")  # the point's x, y, z entries
        o[at : at + 3] = g - np.array([0.0, 0.0, radius])
    return o
