"""Any gymnasium environment as a world.

``GymWorld(env_or_id, state_from_obs, task=None)`` wraps an env (or makes one from its id)::

    obs = world.reset(seed)             # env.reset(seed=seed); obs is state_from_obs(raw obs)
    obs, info = world.step(action)      # info: reward, terminated, truncated, time, raw_obs, env

``state_from_obs`` maps the env's raw observation to what the controller sees (for a twin
built from a task, usually the task's observation vector). Actions are checked against the
env's action space (shape, finiteness, bounds for a ``Box``) before they reach the env, so a
bad action fails here with a message that names the problem, not deep inside the env.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from twinloop.errors import TwinloopError, as_array
from twinloop.worlds.base import World


class GymWorld(World):
    """A gymnasium env behind the world protocol.

    Args:
        env_or_id: a ``gymnasium.Env`` or an id for ``gymnasium.make``.
        state_from_obs: raw env observation -> ``(n,)`` array the controller observes
            (default: the raw observation as a float array).
        task: the task whose controller drives this world (optional; kept for reference and
            for its control period when the env has none).
        **make_kwargs: passed to ``gymnasium.make`` when ``env_or_id`` is an id.
    """

    name = "gym"

    def __init__(self, env_or_id, state_from_obs: Callable | None = None, task=None, **make_kwargs):
        try:
            import gymnasium as gym
        except ImportError as exc:  # pragma: no cover - gymnasium is a test dependency
            raise TwinloopError("GymWorld needs gymnasium: pip install 'twinloop[gym]'") from exc
        if isinstance(env_or_id, str):
            try:
                env = gym.make(env_or_id, **make_kwargs)
            except gym.error.Error as exc:
                raise TwinloopError(f"cannot make gymnasium env {env_or_id!r}: {exc}") from exc
        elif isinstance(env_or_id, gym.Env):
            if make_kwargs:
                raise TwinloopError(f"keyword arguments {sorted(make_kwargs)} only apply when an env id is given")
            env = env_or_id
        else:
            raise TwinloopError(f"env_or_id must be a gymnasium.Env or an env id, got {type(env_or_id).__name__}")
        if state_from_obs is not None and not callable(state_from_obs):
            raise TwinloopError(f"state_from_obs must be callable, got {type(state_from_obs).__name__}")
        self.env = env
        self.task = task
        self.state_from_obs = state_from_obs or (lambda o: np.asarray(o, dtype=float))
        self.dt = self._control_period()
        self.t = 0
        self._started = False

    def _control_period(self) -> float:
        dt = getattr(self.env.unwrapped, "dt", None)
        if dt is None and self.task is not None:
            dt = self.task.control_period
        if dt is None:
            fps = self.env.metadata.get("render_fps")
            dt = 1.0 / fps if fps else 1.0
        return float(dt)

    def _map(self, raw) -> np.ndarray:
        try:
            obs = self.state_from_obs(raw)
        except TwinloopError:
            raise
        except Exception as exc:
            raise TwinloopError(f"state_from_obs failed on the env's observation: {type(exc).__name__}: {exc}") from exc
        return as_array(obs, "mapped observation")

    def reset(self, seed: int) -> np.ndarray:
        """Reset the env with ``seed`` (the same seed gives the same observation)."""
        raw, _ = self.env.reset(seed=int(seed))
        self.env.action_space.seed(int(seed))
        self.t = 0
        self._started = True
        return self._map(raw)

    def step(self, action) -> tuple[np.ndarray, dict]:
        """Apply ``action`` for one env step; ``info`` has reward, terminated, truncated, time."""
        if not self._started:
            raise TwinloopError("GymWorld.step called before reset(seed)")
        a = self._check_action(action)
        raw, reward, terminated, truncated, env_info = self.env.step(a)
        self.t += 1
        info = {
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "time": self.t * self.dt,
            "raw_obs": raw,
            "env": env_info,
        }
        return self._map(raw), info

    def _check_action(self, action):
        from gymnasium import spaces

        space = self.env.action_space
        if isinstance(space, spaces.Box):
            a = as_array(action, "action", space.shape)
            lo, hi = space.low, space.high
            if np.any(a < lo - 1e-9) or np.any(a > hi + 1e-9):
                raise TwinloopError(f"action {a} outside the env's bounds [{lo}, {hi}]")
            return a.astype(space.dtype)
        if isinstance(space, spaces.Discrete):
            a = as_array(action, "action")
            if a.size != 1 or a.ravel()[0] != int(a.ravel()[0]) or not space.contains(int(a.ravel()[0])):
                raise TwinloopError(f"action must be one integer in [{space.start}, {space.start + space.n}), got {action!r}")
            return int(a.ravel()[0])
        if not space.contains(action):
            raise TwinloopError(f"action {action!r} is not in the env's action space {space}")
        return action

    def close(self) -> None:
        self.env.close()
