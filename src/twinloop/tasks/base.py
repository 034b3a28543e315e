"""What a task is: a scene, a cost made of named weighted residuals, a success test, action
bounds, a control period, the map from a world's observation to a twin state, and the
parameters worth calibrating.

Cost of a rollout (MuJoCo MPC style, readable at a glance)::

    J = sum_i w_i * mean_t ||r_i(t)||^2   (running terms)
      + sum_j w_j * ||r_j(T)||^2          (terminal terms)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array
from twinloop.params import ParamSpace
from twinloop.twin.base import Rollouts


@dataclass(frozen=True)
class Traj:
    """Trajectory arrays a residual reads: ``qpos (..., T+1, nq)``, ``qvel``, ``sensordata``,
    ``ctrl (..., T, nu)``."""

    qpos: np.ndarray
    qvel: np.ndarray
    sensordata: np.ndarray
    ctrl: np.ndarray


@dataclass(frozen=True)
class Residual:
    """A named cost term. ``fn(traj)`` returns ``(..., T', r)`` per-step residuals for a running
    term (averaged over its time axis) or ``(..., r)`` at the final state for a terminal one."""

    name: str
    weight: float
    fn: Callable[[Traj], np.ndarray]
    terminal: bool = False


class Task:
    """Base class; subclasses set the class attributes and implement the hooks."""

    name: str = "task"
    xml: str = ""  # scene file name beside the task module
    control_period: float = 0.1
    horizon: float = 1.0  # default planning horizon (s)
    max_ticks: int = 100  # episode length in control ticks
    cost_stride: int = 5  # running costs read every n-th physics step (costs, not physics, get coarser)
    action_low: np.ndarray
    action_high: np.ndarray
    obs_names: tuple[str, ...] = ()

    # -- scene -------------------------------------------------------------------------------

    @property
    def xml_path(self) -> Path:
        return Path(__file__).with_name(self.xml)

    def spec(self) -> mujoco.MjSpec:
        return mujoco.MjSpec.from_file(str(self.xml_path))

    @cached_property
    def model(self) -> mujoco.MjModel:
        """The nominal model (shared; copy before mutating)."""
        return mujoco.MjModel.from_xml_path(str(self.xml_path))

    @property
    def substeps(self) -> int:
        n = self.control_period / self.model.opt.timestep
        if abs(n - round(n)) > 1e-6:
            raise TwinloopError(f"{self.name}: control period {self.control_period} is not a multiple of timestep {self.model.opt.timestep}")
        return int(round(n))

    @property
    def nu(self) -> int:
        return self.model.nu

    @property
    def nstate(self) -> int:
        return self.model.nq + self.model.nv + self.model.na

    # -- cost --------------------------------------------------------------------------------

    def residuals(self) -> tuple[Residual, ...]:
        raise NotImplementedError

    def cost_terms(self, traj: Traj) -> dict[str, np.ndarray]:
        """Weighted value of every residual term, each ``(...)``."""
        out = {}
        for r in self.residuals():
            v = np.asarray(r.fn(traj))
            sq = (v**2).sum(axis=-1)
            out[r.name] = r.weight * (sq if r.terminal else sq.mean(axis=-1))
        return out

    def rollout_terms(self, rollouts: Rollouts) -> dict[str, np.ndarray]:
        """Weighted value of every residual term of each rollout, each ``(P, K)``.

        Residuals are read every ``cost_stride`` physics steps (the final state is always
        included): rollouts are simulated at full rate, only the cost is sampled coarser.
        """
        n = self.cost_stride
        T = rollouts.ctrl.shape[-2]
        if n > 1 and T % n == 0:
            traj = Traj(rollouts.qpos[..., ::n, :], rollouts.qvel[..., ::n, :],
                        rollouts.sensordata[..., ::n, :], rollouts.ctrl[None, :, ::n, :])
        else:
            traj = Traj(rollouts.qpos, rollouts.qvel, rollouts.sensordata, rollouts.ctrl[None])
        return self.cost_terms(traj)

    def cost(self, rollouts: Rollouts) -> np.ndarray:
        """``(P, K)`` total cost of each rollout: the sum of :meth:`rollout_terms`."""
        return sum(self.rollout_terms(rollouts).values())

    # -- words -------------------------------------------------------------------------------

    def description(self) -> str:
        """What the task is, in words (for people, and for a language-model optimizer).

        Default: the first paragraph of the task class's own docstring (``""`` without one).
        Tasks with instance settings a reader needs (a goal) extend it.
        """
        doc = inspect.cleandoc(type(self).__doc__ or "")
        return " ".join(doc.split("\n\n")[0].split())

    # -- episodes ----------------------------------------------------------------------------

    def initial_state(self, rng: np.random.Generator) -> np.ndarray:
        """A start state ``[qpos, qvel, act]`` drawn from the task's reset distribution."""
        raise NotImplementedError

    def obs_from_data(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        """What the robot's sensors report (noise-free), shape ``(len(obs_names),)``."""
        raise NotImplementedError

    def state_from_obs(self, obs) -> np.ndarray:
        """Twin state ``[qpos, qvel, act]`` estimated from an observation."""
        raise NotImplementedError

    def check_obs(self, obs) -> np.ndarray:
        return as_array(obs, f"{self.name} observation", (len(self.obs_names),))

    def error(self, qpos: np.ndarray) -> np.ndarray:
        """Distance to the goal of ``(..., nq)`` positions (task units documented per task)."""
        raise NotImplementedError

    def success(self, qpos: np.ndarray) -> bool:
        raise NotImplementedError

    def param_space(self) -> ParamSpace:
        """The default physical parameters to randomize or calibrate."""
        return ParamSpace(())
