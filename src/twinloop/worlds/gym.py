"""Any gymnasium environment as a world.

``GymWorld(env_or_id, state_from_obs, task=None)`` wraps an env (or makes one from its id)::

    obs = world.reset(seed)             # env.reset(seed=seed), mapped to what the controller sees
    obs, info = world.step(action)      # info: reward, terminated, truncated, time, tick,
                                        # raw_obs, env (the env's own info), success (if it says)

Envs others wrote differ in three ways this adapter makes explicit:

- **Units.** ``action_to_env`` maps a twin action (the task's units) to the env's action;
  ``state_from_obs(raw)`` or ``obs_from_env(raw, info)`` maps the env's observation (and its
  ``info``, where some envs put velocities) to the controller's observation. With a ``task``
  and no maps given, the task's :meth:`~twinloop.tasks.base.Task.obs_from_env` and
  :meth:`~twinloop.tasks.base.Task.action_to_env` are used.
- **Time.** The control period is the seconds one ``env.step()`` advances. What an env calls
  ``dt`` differs: gymnasium's MuJoCo envs define ``dt = model.opt.timestep * frame_skip`` (one
  step); gym-pusht's ``dt`` is its physics substep (0.01 s) while a step lasts
  ``1 / control_hz`` (0.1 s); classic-control envs (Pendulum) use ``dt`` for one step. The
  period is therefore read as: ``control_period=`` if given; else ``timestep * frame_skip``
  for a MuJoCo env; else ``1 / control_hz`` where the env declares a control rate; else
  ``env.unwrapped.dt``; else ``1 / metadata["render_fps"]``. ``describe()`` says which was
  used. With a task, a period that differs from ``task.control_period`` is an error that
  names both (the twin would plan at another rate and recorded timestamps would be wrong).
- **Episode ends.** ``terminated`` / ``truncated`` from the env are passed on (episodes stop
  at either), and an env's own success flag (``info["is_success"]`` or ``info["success"]``)
  becomes ``info["success"]``, which then judges the episode instead of the task's test.

Actions are checked (shape, finiteness, the task's bounds, then the env's action space after
mapping) before they reach the env, so a bad action fails here with a message that names the
problem, not deep inside the env.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.worlds.base import World

#: keys under which envs report their own success verdict
SUCCESS_KEYS = ("is_success", "success")


def control_period_of(env, task=None) -> tuple[float, str]:
    """``(seconds per env.step(), where that number came from)`` for a gymnasium env.

    Raises:
        TwinloopError: if only ``env.unwrapped.dt`` is known and it differs from the task's
            control period (it may be a physics substep), or nothing tells the period.
    """
    u = env.unwrapped
    model = getattr(u, "model", None)
    if isinstance(model, mujoco.MjModel) and isinstance(getattr(u, "frame_skip", None), int):
        return float(model.opt.timestep * u.frame_skip), "model.opt.timestep * frame_skip"
    hz = getattr(u, "control_hz", None)
    if isinstance(hz, (int, float)) and hz > 0:
        return 1.0 / float(hz), "1 / env.control_hz"
    dt = getattr(u, "dt", None)
    if isinstance(dt, (int, float)) and dt > 0:
        if task is not None and abs(dt - task.control_period) > 1e-9:
            raise TwinloopError(
                f"env.unwrapped.dt is {dt:g} s but task {task.name!r} acts every {task.control_period:g} s; "
                f"for some envs dt is the physics substep, not one step: give control_period= "
                f"(the seconds one env.step() advances)")
        return float(dt), "env.unwrapped.dt"
    fps = env.metadata.get("render_fps")
    if fps:
        return 1.0 / float(fps), "1 / metadata['render_fps']"
    if task is not None:
        return float(task.control_period), "task.control_period"
    raise TwinloopError("cannot tell this env's control period (no frame_skip, control_hz, dt or render_fps): "
                        "give control_period= (the seconds one env.step() advances)")


def import_env_module(env_id: str) -> str:
    """Import the module of a ``MODULE:ENV_ID`` id (gymnasium's convention for an env a
    package registers when imported) and return ``ENV_ID``; a plain id is returned as is."""
    module, sep, name = env_id.rpartition(":")
    if not sep:
        return env_id
    if not module or not name:
        raise TwinloopError(f"env id {env_id!r}: a third-party env is named MODULE:ENV_ID (e.g. "
                            "my_robots.envs:Pusher-v0), both parts non-empty")
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise TwinloopError(f"env id {env_id!r}: cannot import module {module!r} ({exc}); it must be importable "
                            "from here (installed, or on PYTHONPATH) and register the env when imported") from exc
    except Exception as exc:  # the module's own code failed
        raise TwinloopError(f"env id {env_id!r}: importing module {module!r} failed: "
                            f"{type(exc).__name__}: {exc}") from exc
    return name


def make_env(env_id: str, **make_kwargs):
    """``gymnasium.make`` of ``env_id`` (``ENV_ID``, or ``MODULE:ENV_ID``: the module is imported
    first, which registers the env), with errors that name the id."""
    import gymnasium as gym

    name = import_env_module(env_id)
    try:
        return gym.make(name, **make_kwargs)
    except gym.error.Error as exc:
        hint = ("" if name != env_id else "; an env a package registers when imported is named MODULE:ENV_ID "
                "(the module is imported first)")
        raise TwinloopError(f"cannot make gymnasium env {env_id!r}: {exc}{hint}") from exc


class GymWorld(World):
    """A gymnasium env behind the world protocol.

    Args:
        env_or_id: a ``gymnasium.Env`` or an id for ``gymnasium.make``; ``MODULE:ENV_ID``
            imports ``MODULE`` first (which registers a third-party env, gymnasium's convention).
        state_from_obs: raw env observation -> ``(n,)`` array the controller observes.
        task: the task whose controller drives this world: its control period is checked
            against the env's, its action bounds are enforced, and its ``obs_from_env`` /
            ``action_to_env`` are the default maps.
        obs_from_env: ``(raw observation, info) -> (n,)`` instead of ``state_from_obs``, for
            envs that put part of the state in ``info``.
        action_to_env: twin action ``(nu,)`` -> env action (units, scaling, dtype).
        control_period: seconds one ``env.step()`` advances (default: read from the env, see
            the module docstring).
        **make_kwargs: passed to ``gymnasium.make`` when ``env_or_id`` is an id.
    """

    name = "gym"

    def __init__(self, env_or_id, state_from_obs: Callable | None = None, task=None, *,
                 obs_from_env: Callable | None = None, action_to_env: Callable | None = None,
                 control_period: float | None = None, **make_kwargs):
        try:
            import gymnasium as gym
        except ImportError as exc:  # pragma: no cover - gymnasium is a test dependency
            raise TwinloopError("GymWorld needs gymnasium: pip install 'twinloop[gym]'") from exc
        if isinstance(env_or_id, str):
            env = make_env(env_or_id, **make_kwargs)
        elif isinstance(env_or_id, gym.Env):
            if make_kwargs:
                raise TwinloopError(f"keyword arguments {sorted(make_kwargs)} only apply when an env id is given")
            env = env_or_id
        else:
            raise TwinloopError(f"env_or_id must be a gymnasium.Env or an env id, got {type(env_or_id).__name__}")
        for label, fn in (("state_from_obs", state_from_obs), ("obs_from_env", obs_from_env),
                          ("action_to_env", action_to_env)):
            if fn is not None and not callable(fn):
                raise TwinloopError(f"{label} must be callable, got {type(fn).__name__}")
        if state_from_obs is not None and obs_from_env is not None:
            raise TwinloopError("give state_from_obs (raw obs) or obs_from_env (raw obs, info), not both")
        self.env, self.task = env, task
        if isinstance(env_or_id, str):  # as named (MODULE:ENV_ID says where the env comes from)
            self.env_id = env_or_id
        else:
            self.env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
        if state_from_obs is not None:
            self._obs_map, self._obs_label = (lambda raw, info: state_from_obs(raw)), "state_from_obs"
        elif obs_from_env is not None:
            self._obs_map, self._obs_label = obs_from_env, "obs_from_env"
        elif task is not None:
            self._obs_map, self._obs_label = task.obs_from_env, f"task {task.name!r} obs_from_env"
        else:
            self._obs_map, self._obs_label = (lambda raw, info: np.asarray(raw, dtype=float)), "the identity map"
        self._action_map = action_to_env or (task.action_to_env if task is not None else None)
        if control_period is not None:
            if not (isinstance(control_period, (int, float)) and np.isfinite(control_period) and control_period > 0):
                raise TwinloopError(f"control_period must be > 0 s, got {control_period!r}")
            self.period, self.period_source = float(control_period), "control_period argument"
        else:
            self.period, self.period_source = control_period_of(env, task)
        if task is not None and abs(self.period - task.control_period) > 1e-9:
            raise TwinloopError(f"env {self.env_id!r} steps {self.period:g} s ({self.period_source}) but task "
                                f"{task.name!r} acts every {task.control_period:g} s; the twin would plan at another rate")
        self.t = 0
        self._started = False
        self._info: dict = {"time": 0.0, "tick": 0}

    def _map(self, raw, info: dict) -> np.ndarray:
        try:
            obs = self._obs_map(raw, info)
        except TwinloopError:
            raise
        except Exception as exc:
            raise TwinloopError(f"{self._obs_label} failed on the env's observation: {type(exc).__name__}: {exc}") from exc
        return as_array(obs, "mapped observation")

    def reset(self, seed: int) -> np.ndarray:
        """Reset the env with ``seed`` (the same seed gives the same observation)."""
        seed = number(seed, "seed", low=0, integer=True)
        raw, env_info = self.env.reset(seed=seed)
        self.env.action_space.seed(seed)
        self.t = 0
        self._started = True
        self._info = {"time": 0.0, "tick": 0, "raw_obs": raw, "env": env_info}
        return self._map(raw, env_info)

    def step(self, action) -> tuple[np.ndarray, dict]:
        """Apply ``action`` for one env step; ``info`` as in the module docstring."""
        if not self._started:
            raise TwinloopError("GymWorld.step called before reset(seed)")
        a = self._check_action(action)
        raw, reward, terminated, truncated, env_info = self.env.step(a)
        self.t += 1
        info = {
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "time": self.t * self.period,
            "tick": self.t,
            "raw_obs": raw,
            "env": env_info,
        }
        flag = next((k for k in SUCCESS_KEYS if k in env_info), None)
        if flag is not None:
            info["success"] = bool(env_info[flag])
        self._info = info
        return self._map(raw, env_info), info

    def info(self) -> dict:
        return self._info

    def describe(self) -> dict:
        return {"world": self.name, "env_id": self.env_id, "task": None if self.task is None else self.task.name,
                "control_period": self.period, "control_period_source": self.period_source}

    def _check_action(self, action):
        from gymnasium import spaces

        if self.task is not None:
            a = as_array(action, "action", (self.task.nu,))
            lo, hi = self.task.action_low, self.task.action_high
            if np.any(a < lo - 1e-9) or np.any(a > hi + 1e-9):
                raise TwinloopError(f"action {a} outside the task's bounds [{lo}, {hi}]")
            action = a
        if self._action_map is not None:
            try:
                action = self._action_map(action)
            except TwinloopError:
                raise
            except Exception as exc:
                raise TwinloopError(f"action_to_env failed on action {action!r}: {type(exc).__name__}: {exc}") from exc
        space = self.env.action_space
        if isinstance(space, spaces.Box):
            a = as_array(action, "action", space.shape)
            lo, hi = space.low, space.high
            if np.any(a < lo - 1e-6) or np.any(a > hi + 1e-6):
                raise TwinloopError(f"action {a} outside the env's bounds [{lo}, {hi}]")
            return np.clip(a, lo, hi).astype(space.dtype)
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
