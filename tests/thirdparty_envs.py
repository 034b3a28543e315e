"""A third-party gymnasium environment, registered when this module is imported (gymnasium's
``MODULE:ENV_ID`` convention): the block-push scene stepped in MuJoCo by an env twinloop did
not write, observed in the task's layout. ``--world gym:thirdparty_envs:ThirdPartyBlockPush-v0``; its
rough variant (the block's friction 3x the twin's) is a world the twin gets wrong."""

from __future__ import annotations

import copy

import gymnasium as gym
import mujoco
import numpy as np

from twinloop.tasks import make_task

ENV_ID = "ThirdPartyBlockPush-v0"
ROUGH_ID = "ThirdPartyRoughBlockPush-v0"  # the block's friction 3x the twin's


class ThirdPartyBlockPush(gym.Env):
    """Push a cube with a sphere on an XY stage; the action is the stage's target (m)."""

    metadata = {"render_modes": [], "render_fps": 10}

    def __init__(self, frame_skip: int = 20, friction: float = 1.0):
        self._task = make_task("block-push")  # the scene and its observation layout
        self.model = copy.deepcopy(self._task.model)
        block = self.model.body("block").id
        self.model.geom_friction[self.model.geom_bodyid == block, 0] *= friction
        self.data = mujoco.MjData(self.model)
        self.frame_skip = frame_skip  # with model.opt.timestep: one step is 0.1 s
        self.action_space = gym.spaces.Box(-0.3, 0.3, (2,), np.float64)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (10,), np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        state = self._task.initial_state(self.np_random)
        nq, nv = self.model.nq, self.model.nv
        self.data.qpos[:], self.data.qvel[:] = state[:nq], state[nq : nq + nv]
        self.data.ctrl[:] = self._task.hold_action(state)
        mujoco.mj_forward(self.model, self.data)
        return self._obs(), {}

    def step(self, action):
        self.data.ctrl[:] = action
        mujoco.mj_step(self.model, self.data, nstep=self.frame_skip)
        pos = self.data.qpos[2:4]
        success = bool(np.linalg.norm(pos - self._task.goal[:2]) < 0.015)
        return self._obs(), -float(np.linalg.norm(pos - self._task.goal[:2])), False, False, {"is_success": success}

    def _obs(self):
        return self._task.obs_from_data(self.model, self.data)


gym.register(ENV_ID, entry_point=ThirdPartyBlockPush, max_episode_steps=80)
gym.register(ROUGH_ID, entry_point=ThirdPartyBlockPush, max_episode_steps=80, kwargs={"friction": 3.0})
