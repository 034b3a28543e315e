"""The world contract and the simplest world: the task's own scene, stepped in MuJoCo.

A world is what the robot really acts in::

    obs = world.reset(seed)
    obs, info = world.step(action)     # holds ``action`` for one control period
    world.info()                       # what the last reset or step reported
    world.describe()                   # JSON-serializable: what kind of world, what is hidden

``info`` carries at least ``time`` (s, world time of the observation) and ``tick`` (steps
since reset) and, for simulated worlds, ``qpos``/``qvel`` (the hidden true state, used by
benchmarks and success tests, never by controllers). A world may also report ``terminated``
(the episode is over: stop), ``truncated`` (stop: a time limit), ``success`` (its own
verdict, which then replaces the task's test) and ``failure`` (a non-empty reason the episode
cannot count: it stops there and fails, e.g. a simulation MuJoCo had to reset, or one whose
bodies moved faster than the task's ``max_body_speed``: a physics blow-up that stayed finite).

``world.period`` is the world time (s) one ``step`` advances: the task's control period,
unless a world is made finer for a real-time wrapper (``SimWorld(task, period=0.01)``).
"""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.tasks.base import Task
from twinloop.twin.base import scene_mismatch


class World:
    """Base of every world: ``reset`` and ``step`` to implement, the rest has defaults.

    Attributes:
        task: the task whose controller acts here.
        name: the world's kind (``nominal``, ``shifted``, ``gym`` ...).
        period: world time (s) one ``step`` advances.

    Capabilities (class attributes each kind of world declares; a run checks these, never a
    world's name):
        simulated: a MuJoCo stand-in of the task's own scene that twinloop steps itself.
        adjustable_period: its step period is an option (``period``): a real-time run steps
            it finer than the control period (others step at their own, paced by a rate).
        has_hidden_params: its physics differ from the twin's nominal ones by parameter values
            it does not show (what calibration is to find).
        keeps_clock: real time: it runs on without waiting for the controller.
        remote: it lives in another process (another environment, a robot driver).
        records_twin_state: each step's ``info`` carries its true ``qpos`` and ``qvel``.
        counterpart: ``counterpart(task, severity, period) -> World``: the same world with the
            twin's own (nominal) parameters, where a gap monitor's threshold is calibrated
            (``severity``: the noise and delay of a shifted world); ``None``: it has none.
    """

    name = "world"
    task: Task

    @property
    def period(self) -> float:
        """World time (s) one ``step`` advances; default: the task's control period."""
        return self.__dict__.get("_period", None) or self.task.control_period

    @period.setter
    def period(self, value: float) -> None:
        self.__dict__["_period"] = number(value, "period (s)", low=0, low_open=True)
    simulated = False
    adjustable_period = False
    has_hidden_params = False
    keeps_clock = False
    remote = False
    records_twin_state = False
    counterpart = None

    def reset(self, seed: int) -> np.ndarray:
        """Start an episode; the same seed gives the same episode. Returns the observation."""
        raise NotImplementedError

    def step(self, action) -> tuple[np.ndarray, dict]:
        """Apply ``action`` for one control period; returns ``(obs, info)``."""
        raise NotImplementedError

    def info(self) -> dict:
        """What the last ``reset``/``step`` reported (default: nothing beyond the clock)."""
        return {"time": 0.0, "tick": 0}

    def describe(self) -> dict:
        """JSON-serializable description (what kind of world, what it hides from the twin)."""
        return {"world": self.name, "task": self.task.name}

    def close(self) -> None:
        """Release what the world holds (threads, processes, sockets); default: nothing."""


class SimWorld(World):
    """The task's scene in CPU MuJoCo: the nominal twin acting as the world.

    Subclasses change ``self.model`` (hidden physics) and override ``_observe`` / ``_actuate``
    (noise, delay).

    Args:
        task: the task.
        model: the world's model (default: the task's nominal model).
        period: world time (s) per ``step`` (default: the task's control period); a finer
            period lets a real-time wrapper apply actions as they arrive. A multiple of the
            model's timestep.
    """

    name = "nominal"
    simulated = adjustable_period = records_twin_state = True

    @staticmethod
    def counterpart(task: Task, severity: int = 0, period: float | None = None) -> World:
        """The nominal scene itself (as a noise-free shifted world of severity 0)."""
        from twinloop.worlds.shifted import nominal_counterpart

        return nominal_counterpart(task, 0, period)

    def __init__(self, task: Task, model: mujoco.MjModel | None = None, period: float | None = None):
        self.task = check_task(task, type(self).__name__)
        self.model = check_scene(model, task) if model is not None else task.model
        self.data = mujoco.MjData(self.model)
        self.period = float(task.control_period if period is None else period)
        n = self.period / self.model.opt.timestep
        if not np.isfinite(n) or abs(n - round(n)) > 1e-6 * max(n, 1.0) or round(n) < 1:
            raise TwinloopError(f"the world's timestep {self.model.opt.timestep:g} s does not divide its step period "
                                f"{self.period:g} s (period={period!r}; default: the task's control period "
                                f"{task.control_period:g} s)")
        self.substeps = int(round(n))
        self.watched = watched_bodies(self.model)
        self.max_body_speed = speed_bound(task, self.model, self.watched)
        self.peak_speed, self.peak_body = 0.0, 0  # the fastest watched body since reset (m/s, body id)
        self.rng = np.random.default_rng(0)
        self.t = 0
        self._started = False  # the default MjData is no episode state (the pusher sits inside the block)

    def reset(self, seed: int) -> np.ndarray:
        seed = number(seed, "seed", low=0, integer=True)
        self.rng = np.random.default_rng(seed)
        state = self.task.initial_state(np.random.default_rng([seed, 0]))
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        d.qpos[:] = state[: m.nq]
        d.qvel[:] = state[m.nq : m.nq + m.nv]
        d.ctrl[:] = self.task.hold_action(state)
        mujoco.mj_forward(m, d)
        self.peak_speed, self.peak_body = 0.0, 0
        self._watch()
        self.t = 0
        self._started = True
        return self._observe()

    def _check_action(self, action) -> np.ndarray:
        """``action`` as ``(nu,)`` within bounds, in a started episode."""
        if not self._started:
            raise TwinloopError(f"{type(self).__name__}.step called before reset(seed): there is no episode yet")
        a = as_array(action, "action", (self.model.nu,))
        lo, hi = self.task.action_low, self.task.action_high
        if np.any(a < lo - 1e-9) or np.any(a > hi + 1e-9):
            raise TwinloopError(f"action {a} outside bounds [{lo}, {hi}]")
        return a

    def step(self, action) -> tuple[np.ndarray, dict]:
        a = self._check_action(action)
        self.data.ctrl[:] = self._actuate(a)
        for _ in range(self.substeps):
            self._physics_step()
        self.t += 1
        return self._observe(), self.info()

    def info(self) -> dict:
        d = self.data
        out = {"time": self.t * self.period, "tick": self.t, "qpos": d.qpos.copy(), "qvel": d.qvel.copy()}
        unstable = unstable_reason(d) or self._too_fast()
        if unstable:
            # MuJoCo reset the state, or a body outran the physics: what follows is no continuation
            out.update(failure=unstable, terminated=True)
        return out

    def _physics_step(self) -> None:
        """One physics step, its bodies' speeds watched (each step: a spike can be over by the
        end of a control tick)."""
        mujoco.mj_step(self.model, self.data)
        self._watch()

    def _watch(self) -> None:
        """Keep the fastest watched body of the state the last velocity computation read (after
        ``mj_step``: the state that step started from)."""
        s = body_speeds(self.model, self.data)[self.watched]
        if s.size and s.max() > self.peak_speed:
            i = int(np.argmax(s))
            self.peak_speed, self.peak_body = float(s[i]), int(self.watched[i])

    def _too_fast(self) -> str:
        """``""``, or why the episode's fastest body so far breaks the task's speed bound."""
        bound = self.max_body_speed
        if bound is None or not self.peak_speed > bound:
            return ""
        name = self.model.body(self.peak_body).name or f"#{self.peak_body}"
        return (f"simulation unstable: body {name!r} reached {self.peak_speed:.1f} m/s, above the task's bound of "
                f"{bound:g} m/s (a physics blow-up MuJoCo did not reset, e.g. a contact pinched through; "
                f"Task.max_body_speed)")

    def true_state(self) -> np.ndarray:
        d = self.data
        return np.concatenate([d.qpos, d.qvel, d.act])

    def _observe(self) -> np.ndarray:
        return self.task.obs_from_data(self.model, self.data)

    def _actuate(self, action: np.ndarray) -> np.ndarray:
        return action


def check_task(task, world: str) -> Task:
    """``task`` if it is a :class:`Task`, else a clear error naming the world."""
    if not isinstance(task, Task):
        raise TwinloopError(f"{world} needs a task (twinloop.tasks.make_task(name)), got {type(task).__name__}")
    return task


def check_scene(model, task: Task) -> mujoco.MjModel:
    """``model`` if it is a model of ``task``'s scene (every size compared, as a twin checks
    its models; its timestep and physical parameters may differ), else a clear error: a world
    stepping another scene would report observations read by the wrong layout."""
    if not isinstance(model, mujoco.MjModel):
        raise TwinloopError(f"the world's model must be a mujoco.MjModel, got {type(model).__name__}")
    diff = scene_mismatch(model, task.model, timestep=False)
    if diff:
        raise TwinloopError(f"the world's model is not a model of the scene of task {task.name!r}: {diff} (model vs task)")
    return model


def speed_bound(task: Task, model: mujoco.MjModel, watched: np.ndarray) -> float | None:
    """``task.max_body_speed`` checked: ``None`` (no bound) or a number > 0 (m/s), with a
    body for it to watch."""
    v = task.max_body_speed
    if v is None:
        return None
    v = number(v, f"task {task.name!r}: max_body_speed (m/s, or None: no bound)", low=0, low_open=True)
    if not len(watched):
        raise TwinloopError(f"task {task.name!r}: max_body_speed={v:g} bounds no body: every body of its scene is "
                            f"the robot's (moved by an actuator) or fixed")
    return v


def watched_bodies(model: mujoco.MjModel) -> np.ndarray:
    """Ids of the bodies whose speed is the physics' own: every body with degrees of freedom
    except the robot's, those an actuator moves through a joint (the joint's body) or a site
    (the site's body and its ancestors); a robot's speed is what it is commanded (a position
    servo sent 30 cm away moves at 4 m/s), a scene object's is what the physics makes of it.
    A tendon's joints (a gripper's fingers) are the robot's when the tendon is fixed (made of
    joints); a spatial tendon (a grasp pulling a cloth corner) moves no robot body itself."""
    robot = set()
    for trn, (target, _) in zip(model.actuator_trntype, model.actuator_trnid, strict=True):
        trn = mujoco.mjtTrn(trn)
        if trn in (mujoco.mjtTrn.mjTRN_JOINT, mujoco.mjtTrn.mjTRN_JOINTINPARENT):
            robot.add(int(model.jnt_bodyid[target]))
        elif trn == mujoco.mjtTrn.mjTRN_TENDON:
            wraps = range(model.tendon_adr[target], model.tendon_adr[target] + model.tendon_num[target])
            robot.update(int(model.jnt_bodyid[model.wrap_objid[w]]) for w in wraps
                         if model.wrap_type[w] == mujoco.mjtWrap.mjWRAP_JOINT)
        elif trn == mujoco.mjtTrn.mjTRN_SITE:
            b = int(model.site_bodyid[target])
            while b > 0:
                robot.add(b)
                b = int(model.body_parentid[b])
    return np.array([b for b in range(1, model.nbody) if b not in robot and model.body_dofnum[b] > 0], dtype=int)


def body_speeds(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """``(nbody,)`` linear speed (m/s) of each body's centre of mass (``mj_objectVelocity``'s,
    vectorized) in the state of ``data``'s last velocity computation; the world body's is 0."""
    cvel = data.cvel  # [angular; linear] about the subtree centre of mass of each body's root
    w, r = cvel[:, :3], data.xipos - data.subtree_com[model.body_rootid]
    v = cvel[:, 3:] + w[:, [1, 2, 0]] * r[:, [2, 0, 1]] - w[:, [2, 0, 1]] * r[:, [1, 2, 0]]  # + w x r (np.cross: 1.5x slower)
    return np.sqrt(np.einsum("ij,ij->i", v, v))


#: MuJoCo's warnings for a state it found non-finite or huge and reset to the model's default
INSTABILITY_WARNINGS = {mujoco.mjtWarning.mjWARN_BADQPOS: "positions", mujoco.mjtWarning.mjWARN_BADQVEL: "velocities",
                        mujoco.mjtWarning.mjWARN_BADQACC: "accelerations"}


def unstable_reason(data: mujoco.MjData) -> str:
    """``""``, or why the simulation in ``data`` went unstable since its last ``mj_resetData``
    (MuJoCo then silently resets the state and counts a warning: the physics step diverged)."""
    bad = [what for w, what in INSTABILITY_WARNINGS.items() if data.warning[w].number > 0]
    return f"simulation unstable: MuJoCo reset the state after bad {', '.join(bad)} (time step too large for this physics)" if bad else ""
