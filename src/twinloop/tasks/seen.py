"""What a camera sees of a task: the observation entries images must supply.

A task that a camera can observe declares a :class:`Seen` (``Task.seen``): the entries of its
observation a perception model reads from images (positions and angles: the keypoints), the
velocity entries estimated as their rates, and the fixed cameras. Every other observation entry
is the robot's own state (its joints), which a camera world passes through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


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
        held: the robot knows what its grasp holds: the camera estimator hands the completed
            observation to ``Task.held_seen``, which may place a held point at the fingers
            (:meth:`~twinloop.tasks.deformable.GraspTask.held_seen`). Default: off.
    """

    keypoints: tuple[str, ...]
    rates: Mapping[str, str] = field(default_factory=dict)
    cameras: tuple[Mapping[str, object], ...] = ({},)
    held: bool = False
