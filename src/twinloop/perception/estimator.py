"""The camera state estimator: images -> keypoints (a perception model) -> the task's estimator.

Each tick it reads a :class:`~twinloop.worlds.camera.CameraObs`: the robot's own observation
entries as given, the keypoints (``Task.seen.keypoints``) predicted from the image, and their
rates (``Task.seen.rates``) as the change since the last tick's prediction over the control
period (zero at an episode's first tick); a task whose ``Seen.held`` is set then places a point
its grasp holds where the fingers are (:func:`~twinloop.tasks.seen.held_seen`); the observation so completed goes to
the task's own estimator (the stateless map, or a stateful observer), which returns the twin state.
"""

from __future__ import annotations

import numpy as np

from twinloop.errors import TwinloopError
from twinloop.perception.model import Perception
from twinloop.tasks.seen import held_seen
from twinloop.worlds.camera import CameraObs


class CameraEstimator:
    """A :class:`~twinloop.control.parts.StateEstimator` for camera worlds.

    Args:
        task: the task.
        perception: its trained model (:func:`~twinloop.perception.load_perception`).
        inner: the estimator the completed observation goes to (default: the task's own).

    Attributes:
        last_obs: ``(n_obs,)`` the last completed observation (what a recording stores).
        last_keypoints: ``(n_keypoints,)`` the last prediction.
    """

    def __init__(self, task, perception: Perception, inner=None):
        if perception.meta.task != task.name:
            raise TwinloopError(f"perception model is for task {perception.meta.task!r}, not {task.name!r}")
        if task.seen.held and not getattr(task, "grasp_point", ""):
            raise TwinloopError(f"task {task.name!r} declares Seen.held but grasps nothing (grasp_point)")
        self.task, self.perception = task, perception
        self.inner = task.state_estimator() if inner is None else inner
        names = list(task.obs_names)
        self.kp_idx = np.array([names.index(k) for k in perception.meta.keypoints])
        self.rate_idx = np.array([names.index(v) for v in task.seen.rates], dtype=int)
        self.rate_of = np.array([list(perception.meta.keypoints).index(k) for k in task.seen.rates.values()], dtype=int)
        self.angles = np.array(perception.meta.angles)
        self.last_obs: np.ndarray | None = None
        self.last_keypoints: np.ndarray | None = None

    def reset(self, seed: int | None = None) -> None:
        self.last_obs = self.last_keypoints = None
        self.inner.reset(seed)

    def complete(self, obs: CameraObs) -> np.ndarray:
        """``(n_obs,)``: the robot's entries of ``obs``, the keypoints seen in its images and
        their rates."""
        if not isinstance(obs, CameraObs) or obs.images is None:
            raise TwinloopError("a camera estimator needs a camera world's observations (observe='rgb'), got "
                                f"{type(obs).__name__}")
        kp = self.perception.predict(obs.images)
        full = np.array(obs, dtype=float)
        full[self.kp_idx] = kp
        rate = np.zeros(len(kp))
        if self.last_keypoints is not None:
            d = kp - self.last_keypoints
            d = np.where(self.angles, np.angle(np.exp(1j * d)), d)
            rate = d / self.task.control_period
        full[self.rate_idx] = rate[self.rate_of]
        if self.task.seen.held:  # the robot knows what its grasp holds (Seen.held)
            full = held_seen(self.task, full)
        self.last_keypoints, self.last_obs = kp, full
        return full

    def estimate(self, obs) -> np.ndarray:
        return self.inner.estimate(self.complete(obs))

    def sent(self, action) -> None:
        self.inner.sent(action)
