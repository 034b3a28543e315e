"""The PyBullet world is generic: each task builds its own scene (``Task.bullet_scene``)."""

import numpy as np
import pytest

from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.tasks.block_push import BlockPush

pytest.importorskip("pybullet")

from twinloop.worlds import BulletWorld, make_world  # noqa: E402


class _StageOnly:
    """A user's scene: a pusher that is wherever it was last commanded, a block that never moves."""

    def __init__(self, task, pb, client, offset: float = 0.0):
        self.task, self.offset, self.qpos = task, offset, None

    def reset(self, state):
        self.qpos = np.array(state[: self.task.model.nq], dtype=float)

    def act(self, action):
        self.qpos[:2] = np.asarray(action) + self.offset

    def state(self):
        return self.qpos.copy(), np.zeros(self.task.model.nv)

    def describe(self):
        return {"scene": "stage only", "offset": self.offset}


class _UserPush(BlockPush):
    name = "user-push"

    def bullet_scene(self, pb, client, **options):
        return _StageOnly(self, pb, client, **options)


def test_the_world_runs_the_scene_a_task_builds_with_its_options():
    task = _UserPush()
    world = BulletWorld(task, noise=0, offset=0.01)
    try:
        world.reset(0)
        action = (task.action_low + task.action_high) / 2
        _, info = world.step(action)
        np.testing.assert_allclose(info["qpos"][:2], action + 0.01)
        assert world.describe()["scene"] == "stage only"
    finally:
        world.close()


def test_a_task_without_a_bullet_scene_is_refused_by_name():
    with pytest.raises(TwinloopError, match="task 'pivot' has no PyBullet scene"):
        make_world(make_task("pivot"), "bullet")


def test_the_planar_scenes_take_their_contact_options():
    world = BulletWorld(make_task("block-push"), pusher_friction=0.3)
    try:
        assert world.describe()["pusher_friction"] == 0.3
    finally:
        world.close()
    with pytest.raises(TwinloopError, match="pusher_friction"):
        BulletWorld(make_task("block-push"), pusher_friction=-1.0)
