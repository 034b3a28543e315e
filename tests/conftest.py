import os

os.environ.setdefault("MUJOCO_GL", "egl")  # before anything imports mujoco

import pytest  # noqa: E402

from twinloop.tasks import make_task  # noqa: E402


@pytest.fixture(scope="module")
def push_t():
    return make_task("push-t")


@pytest.fixture(scope="module")
def block_push():
    return make_task("block-push")
