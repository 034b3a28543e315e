"""What a task is: a scene, a cost made of named weighted residuals, a success test, action
bounds, a control period, the map from a world's observation to a twin state, and the
parameters worth calibrating.

Cost of a rollout (MuJoCo MPC style, readable at a glance)::

    J = sum_i w_i * mean_t ||r_i(t)||^2   (running terms)
      + sum_j w_j * ||r_j(T)||^2          (terminal terms)
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.params import ParamSpace
from twinloop.rollouts import Rollouts
from twinloop.tasks.seen import Seen


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
    """A task: the contract every task fulfils (hydrax's ``Task`` declares its hooks the same way).

    A subclass sets the class attributes and implements the four required methods
    (:meth:`residuals`, :meth:`initial_state`, :meth:`success`, :meth:`error`); every other hook
    has a documented default, so a task only overrides what differs. Nothing in twinloop looks
    a hook up with ``getattr`` or branches on a task's name.

    Class attributes:
        name: registry name (``twinloop run --task NAME``).
        xml: scene file, beside the task module (or an absolute path).
        control_period: seconds per control tick (a multiple of the scene's timestep).
        max_ticks: episode length in control ticks.
        cost_stride: running costs read every n-th physics step (costs, not physics, coarser).
        obs_names: names of the observation entries (default: the observation is the full
            twin state, named ``qpos:i``, ``qvel:i``, ``act:i``).
        camera: a model camera name for videos, or ``None`` for an orthographic top-down view.
        seen: what a camera observes (:class:`~twinloop.tasks.seen.Seen`), or ``None``: no camera.
        error_unit: the unit of :meth:`error` (tables and plots label the final error with it).
        action_low, action_high: ``(nu,)`` action bounds (default: the actuators' ctrlrange).
        gym_id: the gymnasium env this task's twin models (``--world gym`` uses it), or
            ``None``; its observation and action maps are :meth:`obs_from_env` and
            :meth:`action_to_env`.
        defaults: the task's planner and run settings, ``{field path: value}`` (the way MuJoCo
            MPC's task files carry their planner defaults): every loop (``twinloop run``,
            ``rsr``, ``distill``) starts from them, a recipe and the command line override them
            (library default < task default < recipe < command line). A path names a field of
            the loop's config (``planner.refiner.horizon``, ``planner.optimizer``,
            ``planner.noise``: a task whose action bounds span far more than one tick's useful
            motion wants it small); a loop without that field skips it. Extend the base's:
            ``defaults = {**Task.defaults, "planner.noise": 0.05}``.
        euler_step: the physics step (s) of a world that integrates this scene with explicit
            Euler (a severity-3 :class:`~twinloop.worlds.ShiftedWorld`), or ``None``: the
            scene's own timestep. A scene whose stiff terms an explicit step cannot follow at
            its timestep declares a smaller one (a velocity gain ``c`` on a body of mass ``m``
            diverges for ``dt c / m > 2``), so that its severe world stays a physical world and
            not an integration artefact no twin parameter can express. It must divide
            ``control_period``.
        binary_actions: indices of the actions that are open/closed commands (a pinch
            gripper's grasp), which a refiner told so (``RefinerConfig.binary_actions``) snaps
            at the middle of their range; ``()``: every action is continuous.
        max_body_speed: the speed (m/s) no body's centre of mass reaches in this task's
            physics, measured over normal episodes with a margin, or ``None``: no bound. A
            simulated world (:class:`~twinloop.worlds.SimWorld`) whose body exceeds it ends the
            episode as a failure (``simulation unstable: body ... reached ...``): a blow-up
            that stayed finite, which MuJoCo's own instability check does not see.
        success_dwell: how long (s) :meth:`success` must hold, tick after tick, before an
            episode counts it (:meth:`dwell_ticks`): an object that slides through its goal
            has not reached it. ``0``: the first tick that meets the test counts.
    """

    name: str = "task"
    xml: str = ""
    control_period: float = 0.1
    max_ticks: int = 100
    cost_stride: int = 5
    camera: str | None = None
    seen: Seen | None = None
    error_unit: str = "m"
    gym_id: str | None = None
    defaults: Mapping[str, object] = MappingProxyType({
        "planner.optimizer": "mppi",
        "planner.refiner.num_samples": 32,
        "planner.refiner.horizon": 0.5,
        "planner.twin_timestep": 0.01,
    })
    euler_step: float | None = None
    binary_actions: tuple[int, ...] = ()
    max_body_speed: float | None = None
    success_dwell: float = 0.5

    @property
    def horizon(self) -> float:
        """The task's default planning horizon (s): its ``planner.refiner.horizon`` default."""
        return float(self.defaults.get("planner.refiner.horizon", 0.5))

    # -- scene -------------------------------------------------------------------------------

    @property
    def xml_path(self) -> Path:
        p = Path(self.xml)
        if p.is_absolute():
            return p
        # beside the module of the class that named the file (a subclass elsewhere inherits it)
        owner = next((c for c in type(self).__mro__ if "xml" in vars(c)), type(self))
        return Path(inspect.getfile(owner)).with_name(self.xml)

    def spec(self) -> mujoco.MjSpec:
        return mujoco.MjSpec.from_file(str(self.xml_path))

    @cached_property
    def model(self) -> mujoco.MjModel:
        """The nominal model (shared; copy before mutating): the scene after :meth:`edit_scene`."""
        if not self.xml_path.is_file():
            raise TwinloopError(f"task {self.name!r}: scene file {self.xml_path} does not exist")
        spec = self.spec()
        self.edit_scene(spec)
        return spec.compile()

    def edit_scene(self, spec: mujoco.MjSpec) -> None:
        """Change the scene's structure before it compiles (task options such as explicit
        contact pairs or a stiffer actuator). Default: the scene as written."""

    @property
    def substeps(self) -> int:
        n = self.control_period / self.model.opt.timestep
        if abs(n - round(n)) > 1e-6:
            raise TwinloopError(f"{self.name}: control period {self.control_period} is not a multiple of timestep {self.model.opt.timestep}")
        return int(round(n))

    def dwell_ticks(self) -> int:
        """Consecutive control ticks :meth:`success` must hold for an episode to succeed:
        ``success_dwell`` in ticks, rounded up, at least 1."""
        dwell = number(self.success_dwell, f"task {self.name!r}: success_dwell (s)", low=0)
        return max(1, math.ceil(dwell / self.control_period - 1e-9))

    @property
    def nu(self) -> int:
        return self.model.nu

    @property
    def nstate(self) -> int:
        return self.model.nq + self.model.nv + self.model.na

    @cached_property
    def obs_names(self) -> tuple[str, ...]:
        m = self.model
        return tuple(f"{k}:{i}" for k, n in (("qpos", m.nq), ("qvel", m.nv), ("act", m.na)) for i in range(n))

    @cached_property
    def action_low(self) -> np.ndarray:
        return self._ctrlrange()[:, 0]

    @cached_property
    def action_high(self) -> np.ndarray:
        return self._ctrlrange()[:, 1]

    def _ctrlrange(self) -> np.ndarray:
        m = self.model
        r = m.actuator_ctrlrange.copy()
        if not (m.actuator_ctrllimited.all() and np.isfinite(r).all()):
            raise TwinloopError(f"task {self.name!r}: give action_low/action_high, or ctrlrange for every actuator of its scene")
        return r

    # -- required ----------------------------------------------------------------------------

    def residuals(self) -> tuple[Residual, ...]:
        """The cost: named weighted residual terms (see the module docstring)."""
        raise NotImplementedError(f"task {self.name!r} defines no residuals")

    def initial_state(self, rng: np.random.Generator) -> np.ndarray:
        """A start state ``[qpos, qvel, act]`` drawn from the task's reset distribution."""
        raise NotImplementedError(f"task {self.name!r} defines no initial_state")

    def success(self, qpos: np.ndarray) -> bool:
        """Whether ``(nq,)`` true positions solve the task."""
        raise NotImplementedError(f"task {self.name!r} defines no success test")

    def error(self, qpos: np.ndarray) -> np.ndarray:
        """Distance to the goal of ``(..., nq)`` positions (units documented per task)."""
        raise NotImplementedError(f"task {self.name!r} defines no error")

    # -- hooks with defaults -----------------------------------------------------------------

    def description(self) -> str:
        """What the task asks, in a few sentences (for help text and language-model prompts).
        Default: the first paragraph of the class (or module) docstring."""
        doc = inspect.getdoc(type(self)) or inspect.getdoc(inspect.getmodule(type(self))) or self.name
        return doc.split("\n\n")[0].replace("\n", " ").strip()

    def failure(self, qpos: np.ndarray) -> str:
        """Why ``(nq,)`` positions have failed beyond recovery (e.g. ``"toppled"``), or ``""``.
        An episode stops at a failure. Default: never fails."""
        return ""

    def near_goal_state(self, rng: np.random.Generator) -> np.ndarray | None:
        """A state ``[qpos, qvel, act]`` near the goal, as a controller leaves the scene there
        (what a perception model must read most accurately, and the reset distribution rarely
        draws), or ``None``: the task draws none. Default: none."""
        return None

    def rolled_under(self, state: np.ndarray, proposer, ticks: int) -> np.ndarray:
        """``[qpos, qvel, act]`` after ``ticks`` control ticks of the task's own model from
        ``state`` under ``proposer`` (the first action of each tick's proposal, clipped to the
        action bounds): states a manipulation leaves, for :meth:`near_goal_state`."""
        m = self.model
        d = mujoco.MjData(m)
        d.qpos[:], d.qvel[:] = state[: m.nq], state[m.nq : m.nq + m.nv]
        mujoco.mj_forward(m, d)
        for _ in range(ticks):
            now = np.concatenate([d.qpos, d.qvel, d.act])
            d.ctrl[:] = np.clip(proposer.propose(None, now)[0], self.action_low, self.action_high)
            mujoco.mj_step(m, d, self.substeps)
        return np.concatenate([d.qpos, d.qvel, d.act])

    def near_goal_focus(self) -> np.ndarray | None:
        """``(3,)`` the world point (m) around which the near-goal states
        (:meth:`near_goal_state`) lie: where a perception model's fine stage looks. ``None``:
        none. Default: none."""
        return None

    def obs_from_data(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        """What the robot's sensors report (noise-free), shape ``(len(obs_names),)``.
        Default: the full twin state ``[qpos, qvel, act]``."""
        return np.concatenate([data.qpos, data.qvel, data.act])

    def state_from_obs(self, obs) -> np.ndarray:
        """Twin state ``[qpos, qvel, act]`` estimated from an observation. Default: the
        observation is the full state."""
        return self.check_obs(obs)

    def check_obs(self, obs) -> np.ndarray:
        return as_array(obs, f"{self.name} observation", (len(self.obs_names),))

    def check_qpos(self, qpos) -> np.ndarray:
        """``qpos`` as a finite ``(nq,)`` float array, or a clear error (what a success test
        reads first)."""
        return as_array(qpos, f"{self.name} qpos", (self.model.nq,))

    def obs_from_env(self, raw_obs, info: dict) -> np.ndarray:
        """A gymnasium env's observation (and its step ``info``, where some envs put velocities)
        -> this task's observation. Default: the raw observation as a float vector."""
        return np.asarray(raw_obs, dtype=float).ravel()

    def action_to_env(self, action: np.ndarray):
        """A twin action (this task's units) -> the gymnasium env's action. Default: unchanged."""
        return action

    def obs_units(self) -> tuple[str, ...]:
        """Unit of each observation entry: ``m``, ``rad``, ``m/s`` or ``rad/s`` (what a
        shifted world's observation noise is scaled by). Default: from the names (``*_v?`` and
        ``qvel:*`` velocities, ``*yaw*``/``*angle*`` angles, the rest positions); for the full
        state, from the joint types."""
        m = self.model
        rot_q, rot_v = np.zeros(m.nq, bool), np.zeros(m.nv, bool)
        for j in range(m.njnt):
            t, qa, va = mujoco.mjtJoint(m.jnt_type[j]), m.jnt_qposadr[j], m.jnt_dofadr[j]
            if t in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_BALL):
                rot_q[qa : qa + (1 if t == mujoco.mjtJoint.mjJNT_HINGE else 4)] = True
                rot_v[va : va + (1 if t == mujoco.mjtJoint.mjJNT_HINGE else 3)] = True
            elif t == mujoco.mjtJoint.mjJNT_FREE:
                rot_q[qa + 3 : qa + 7], rot_v[va + 3 : va + 6] = True, True
        out = []
        for name in self.obs_names:
            kind, _, idx = name.partition(":")
            if kind in ("qpos", "qvel") and idx.isdigit():
                rot = (rot_q if kind == "qpos" else rot_v)[int(idx)]
                out.append(("rad" if rot else "m") + ("/s" if kind == "qvel" else ""))
            elif kind == "act" and idx.isdigit():
                out.append("m")
            elif name.rsplit("_", 1)[-1] in ("vx", "vy", "vz"):
                out.append("m/s")
            elif name.rsplit("_", 1)[-1] in ("wx", "wy", "wz"):
                out.append("rad/s")
            elif "yaw" in name or "angle" in name:
                out.append("rad")
            else:
                out.append("m")
        return tuple(out)

    def hold_action(self, state: np.ndarray) -> np.ndarray:
        """The action that keeps the robot where it is in ``state`` (the start of a plan made
        from nothing). Default: the middle of the action range."""
        return (self.action_low + self.action_high) / 2

    def goal_features(self) -> np.ndarray:
        """The goal as a flat vector, appended to a learned policy's inputs. Default: none."""
        return np.zeros(0)

    def policy_frame(self, obs: np.ndarray) -> np.ndarray:
        """``(..., n_obs)`` observations -> ``(..., 3)`` planar poses ``(x, y, yaw)`` (m, rad):
        the frame a learned policy may see an observation, the goal and its actions in
        (``PolicyConfig.frame``; :meth:`obs_in_frame`, :meth:`goal_in_frame`,
        :meth:`actions_in_frame`), e.g. the pushed object's own frame: pushing is the same at
        every position and heading of the object, so what a policy learns at one holds at all
        of them. Default: the world frame (zeros); the three maps are then the identity."""
        return np.zeros((*np.shape(obs)[:-1], 3))

    def obs_in_frame(self, frame: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Observations ``(..., n_obs)`` expressed in frames ``(..., 3)`` (shapes broadcast; see
        :meth:`policy_frame`). Default: unchanged (the world frame)."""
        return np.broadcast_to(np.asarray(obs, dtype=float), np.broadcast_shapes(np.shape(obs), (*np.shape(frame)[:-1], 1)))

    def goal_in_frame(self, frame: np.ndarray) -> np.ndarray:
        """``(..., 3)`` frames -> ``(..., G')`` the goal seen from each (a learned policy's goal
        input). Default: :meth:`goal_features`, the same from every frame."""
        g = self.goal_features()
        return np.broadcast_to(g, (*np.shape(frame)[:-1], len(g)))

    def actions_in_frame(self, frame: np.ndarray, actions: np.ndarray, inverse: bool = False) -> np.ndarray:
        """Actions ``(..., nu)`` expressed in frames ``(..., 3)`` (shapes broadcast), or with
        ``inverse`` from those frames back to the world. Default: unchanged."""
        return np.broadcast_to(np.asarray(actions, dtype=float),
                               np.broadcast_shapes(np.shape(actions), (*np.shape(frame)[:-1], 1)))

    def param_space(self) -> ParamSpace:
        """The default physical parameters to randomize or calibrate. Default: none."""
        return ParamSpace(())

    def default_proposer(self):
        """The task's scripted base proposer (``propose(obs, state) -> (H, nu)``), or ``None``
        when the task has none (refinement then starts from nothing)."""
        return None

    def state_estimator(self, stateful: bool = False, params=None):
        """The controller's state estimator (``reset(seed)``, ``estimate(obs) -> (nstate,)``,
        ``sent(action)``; see :class:`~twinloop.control.parts.StateEstimator`). Default: the
        stateless map :meth:`state_from_obs` (:class:`ObservationMap`); ``stateful=True`` asks
        for the task's stateful estimate (predicting under the twin's ``params``), which a task
        without one refuses."""
        if stateful:
            raise TwinloopError(f"task {self.name!r} has no stateful observer (the grasp tasks have)")
        return ObservationMap(self)

    def candidate_sources(self, options: Mapping[str, object] | None = None) -> tuple:
        """The task's own candidate sources for a refined controller (each
        ``offer(obs, state, ticks, rng) -> (M, L, nu)`` chunks offered beside the refiner's
        samples; see :class:`~twinloop.control.parts.CandidateSource`), chosen by a run's
        ``options`` (the grasp tasks': ``repair``, ``repair_push``, ``repair_reach``,
        ``repair_commit``, ``repair_regrasp_reach``). Default: none."""
        return ()

    def bullet_scene(self, pb, client: int, **options):
        """The task's scene built in the PyBullet ``client`` (``pb``: the ``pybullet`` module),
        for :class:`~twinloop.worlds.BulletWorld`: ``reset(state)`` places it at a twin state,
        ``act(action)`` commands it, ``state() -> (qpos, qvel)`` reads it in the twin's
        coordinates, ``describe() -> dict``. Default: none (the world refuses the task)."""
        raise TwinloopError(f"task {self.name!r} has no PyBullet scene (Task.bullet_scene); the bullet world "
                            "rebuilds the planar pushing tasks (block-push, push-t)")

    def excitation(self, seed: int, kind: str = "excite") -> Callable[[np.ndarray, int], np.ndarray]:
        """A seeded policy ``f(obs, tick) -> action`` that excites the dynamics for calibration.

        Default (``kind="excite"``): a new uniformly random target in the action range every
        ``period`` ticks, moved to linearly (smooth, bounded, covers the range).
        """
        if kind != "excite":
            raise TwinloopError(f"task {self.name!r} has no excitation {kind!r}; it has: excite")
        rng = np.random.default_rng([seed, 7])
        lo, hi, period = self.action_low, self.action_high, 10
        mem: dict = {}

        def f(obs, k):
            if k % period == 0 or "to" not in mem:
                mem["from"] = mem.get("to", self.hold_action(self.state_from_obs(obs)))
                mem["to"] = rng.uniform(lo, hi)
            w = (k % period + 1) / period
            return np.clip((1 - w) * mem["from"] + w * mem["to"], lo, hi)

        return f

    def trace_points(self, qpos: np.ndarray, sensordata: np.ndarray) -> np.ndarray:
        """``(..., n, 3)`` world points (m) whose paths a video draws as ghost rollouts, from
        ``(..., nq)`` positions and ``(..., nsensordata)`` sensor readings. Default: none."""
        return np.zeros((*np.shape(qpos)[:-1], 0, 3))

    # -- cost --------------------------------------------------------------------------------

    def cost_terms(self, traj: Traj) -> dict[str, np.ndarray]:
        """Weighted value of every residual term, each ``(...)``."""
        out = {}
        for r in self.residuals():
            v = np.asarray(r.fn(traj))
            if v.size == 0 or v.ndim == 0:  # would add a constant 0: every plan alike, silently
                raise TwinloopError(f"task {self.name!r}: residual {r.name!r} returned an array of shape {v.shape}; a "
                                    f"residual returns ({'..., r' if r.terminal else '..., T, r'}) values with r >= 1")
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


class ObservationMap:
    """The stateless state estimator: each observation mapped by ``task.state_from_obs``,
    nothing kept from one tick to the next."""

    def __init__(self, task: Task):
        self.task = task

    def reset(self, seed: int | None = None) -> None:
        """Nothing to forget."""

    def estimate(self, obs) -> np.ndarray:
        return self.task.state_from_obs(obs)

    def sent(self, action) -> None:
        """Nothing to predict."""




from twinloop.tasks.scene import SceneTask  # noqa: E402, F401 - a Task subclass, importable from here as before
