"""Perception: the twin's state from camera images, learned from the twin's own renders.

A :class:`~twinloop.perception.model.Perception` maps an image to a task's keypoints
(``Task.seen``); :func:`~twinloop.perception.train.train_perception` trains one on renders of
the twin in random states under random appearance; a
:class:`~twinloop.perception.estimator.CameraEstimator` hands its keypoints to the task's own
state estimator. Needs the ``learn`` extra (PyTorch).
"""

from twinloop.perception.estimator import CameraEstimator
from twinloop.perception.model import Perception, load_perception
from twinloop.perception.train import (
           PerceptionConfig,
           evaluate_perception,
           render_dataset,
           train_perception,
)

__all__ = ["CameraEstimator", "Perception", "PerceptionConfig", "evaluate_perception", "load_perception",
           "render_dataset", "train_perception"]
