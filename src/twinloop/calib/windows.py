"""Recorded trajectories cut into short windows for multiple shooting.

A :class:`Trajectory` is what calibration and gap metrics read from an episode: twin states at
control-tick boundaries and the action held over each tick. :func:`make_windows` cuts
trajectories into windows of ``length`` ticks; each window restarts the twin from the recorded
state, so one bad stretch (a slip, a missed contact) spoils only its own window::

    window w:  s_w(0) = recorded state,  s_w(k+1) = twin(s_w(k), a_k held for one tick)
               residual_w(k) = (s_w(k) - recorded(k)) / scale,   k = 1..length

:class:`StateError` turns predicted vs recorded states into that weighted residual: only the
components a world actually observes (a component that is exactly constant over the whole
dataset, such as an unmeasured height, is not compared), hinge angles wrapped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mujoco
import numpy as np

from twinloop.data.episodes import check_recorded_on
from twinloop.errors import TwinloopError, as_array
from twinloop.modifiers import delay_controls
from twinloop.tasks.base import Task


@dataclass(frozen=True)
class Trajectory:
    """One recorded episode, as calibration reads it.

    Attributes:
        states: ``(T+1, nstate)`` twin states ``[qpos, qvel, act]`` at tick boundaries
            (estimated from observations, so noisy).
        actions: ``(T, nu)`` action held over each tick.
        index: the episode index (windows remember it, splits group by it).
    """

    states: np.ndarray
    actions: np.ndarray
    index: int = 0

    @property
    def ticks(self) -> int:
        return len(self.actions)


def _state_label(model: mujoco.MjModel, j: int) -> str:
    """``qpos[3] (joint block_y)``-style name of twin state component ``j``."""
    for part, size, adr in (("qpos", model.nq, model.jnt_qposadr), ("qvel", model.nv, model.jnt_dofadr)):
        if j < size:
            jnt = int(np.searchsorted(adr, j, side="right")) - 1
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, jnt) if jnt >= 0 else None
            return f"{part}[{j}]" + (f" (joint {name})" if name else "")
        j -= size
    return f"act[{j}]"


def _refuse_nonfinite(task: Task, states: np.ndarray, actions: np.ndarray, index: int) -> None:
    """Non-finite recorded data are refused, never skipped: a NaN would otherwise make its
    state component look unmeasured and silently drop it from the whole fit."""
    for what, arr in (("twin state", states), ("action", actions)):
        bad = ~np.isfinite(arr)
        if bad.any():
            k, j = (int(i) for i in np.argwhere(bad)[0])
            comp = _state_label(task.model, j) if what == "twin state" else f"action[{j}]"
            raise TwinloopError(
                f"episode {index}: the {what} at frame {k} is {arr[k, j]} in {comp} ({int(bad.any(axis=1).sum())} "
                f"frame(s) non-finite); calibration and gap metrics refuse non-finite data: drop or repair those frames")


def _episode_states(task: Task, ep) -> np.ndarray:
    m = task.model
    if getattr(ep, "states", None) is not None:
        return as_array(ep.states, "episode states", (None, task.nstate), finite=False)
    qpos, qvel = getattr(ep, "qpos", None), getattr(ep, "qvel", None)
    if qpos is not None and qvel is not None:
        qpos = as_array(qpos, "episode qpos", (None, m.nq), finite=False)
        qvel = as_array(qvel, "episode qvel", (len(qpos), m.nv), finite=False)
        act = getattr(ep, "act", None)
        act = np.zeros((len(qpos), m.na)) if act is None else as_array(act, "episode act", (len(qpos), m.na), finite=False)
        return np.concatenate([qpos, qvel, act], axis=1)
    obs = getattr(ep, "obs", None)
    if obs is None:
        raise TwinloopError(
            f"episode {type(ep).__name__} has neither states, qpos/qvel nor obs; cannot read twin states"
        )
    return np.stack([task.state_from_obs(o) for o in np.asarray(obs)])


def as_trajectories(task: Task, episodes: Sequence) -> list[Trajectory]:
    """Read episodes (``Trajectory``, or any object with ``actions`` and ``states`` /
    ``qpos``+``qvel`` / ``obs``, optionally ``timestamps``) as trajectories.

    An episode that records one state per action (the state *before* each action, none after
    the last) gives ``T-1`` transitions. Timestamps that skip a control tick split the episode,
    because a window must not bridge a gap it cannot replay.
    """
    if len(episodes) == 0:
        raise TwinloopError("no episodes given: calibration needs at least one recorded episode")
    check_recorded_on(task, episodes)
    out: list[Trajectory] = []
    off_period: list[float] = []  # time steps that did not match the control period
    for i, ep in enumerate(episodes):
        if isinstance(ep, Trajectory):
            as_array(ep.states, f"episode {ep.index} states", (ep.ticks + 1, task.nstate), finite=False)
            as_array(ep.actions, f"episode {ep.index} actions", (None, task.nu), finite=False)
            _refuse_nonfinite(task, ep.states, ep.actions, ep.index)
            out.append(ep)
            continue
        index = int(getattr(ep, "index", getattr(ep, "episode_index", i)))
        states = _episode_states(task, ep)
        actions = as_array(getattr(ep, "actions", None), f"episode {index} actions", (None, task.nu), finite=False)
        _refuse_nonfinite(task, states, actions, index)
        if len(states) == len(actions):
            actions = actions[:-1]
        if len(states) != len(actions) + 1:
            raise TwinloopError(f"episode {index}: {len(states)} states do not match {len(actions)} actions")
        valid = np.ones(len(actions), bool)
        ts = getattr(ep, "timestamps", None)
        if ts is not None and len(ts) >= len(states):
            ts = as_array(ts, f"episode {index} timestamps", (None,), finite=False)[: len(states)]
            if not np.isfinite(ts).all():
                k = int(np.argmin(np.isfinite(ts)))
                raise TwinloopError(f"episode {index}: timestamp at frame {k} is {ts[k]}; calibration refuses "
                                    "non-finite data")
            dt = np.diff(ts)
            on_period = np.abs(dt - task.control_period) <= 0.5 * task.control_period
            off_period += dt[~on_period].tolist()
            valid &= on_period
        # runs of valid transitions [a, b): states a..b, actions a..b-1
        edges = np.flatnonzero(np.diff(np.concatenate([[0], valid.astype(int), [0]])))
        for a, b in zip(edges[::2], edges[1::2], strict=True):
            out.append(Trajectory(states[a : b + 1], actions[a:b], index))
    if not out:
        if off_period:
            raise TwinloopError(
                f"the episodes hold no transitions: their timestamps step by {np.median(off_period):g} s (median) but "
                f"task {task.name!r} acts every {task.control_period:g} s, so every transition was dropped as a gap. "
                f"The recording world reported the wrong period (a gymnasium env's dt can be its physics substep: "
                f"give GymWorld control_period=), or the data belongs to another task")
        raise TwinloopError("the episodes hold no transitions (each needs at least two states)")
    return out


@dataclass(frozen=True)
class Windows:
    """Windows of equal length, batched for one ``rollout_many`` call.

    Attributes:
        starts: ``(B, nstate)`` recorded start states.
        actions: ``(B, L, nu)`` actions per tick.
        targets: ``(B, L, nstate)`` recorded states after each tick.
        episode: ``(B,)`` episode index of each window.
        before: ``(B, nu)`` the action held before the window (its first tick's action for a
            window at an episode's start); a delayed actuator still applies it at first.
    """

    starts: np.ndarray
    actions: np.ndarray
    targets: np.ndarray
    episode: np.ndarray
    before: np.ndarray | None = None

    @property
    def length(self) -> int:
        return self.actions.shape[1]

    def __len__(self) -> int:
        return len(self.starts)


def make_windows(trajectories: Sequence[Trajectory], length: int, stride: int | None = None,
                 starts_ok: Sequence[np.ndarray] | None = None) -> list[Windows]:
    """Cut trajectories into windows of ``length`` ticks, at least ``stride`` ticks apart
    (default: ``length``, no overlap).

    ``starts_ok`` (one ``(T,)`` bool mask per trajectory, see :func:`free_starts`) restricts
    where a window may start; a trajectory with no allowed start falls back to its first tick.
    A trajectory shorter than ``length`` is one window of its own length. Windows are grouped
    by length (one group per distinct length, longest first).
    """
    if length < 1:
        raise TwinloopError(f"window length must be >= 1 tick, got {length}")
    stride = length if stride is None else stride
    if stride < 1:
        raise TwinloopError(f"window stride must be >= 1 tick, got {stride}")
    if starts_ok is not None and len(starts_ok) != len(trajectories):
        raise TwinloopError(f"starts_ok has {len(starts_ok)} masks for {len(trajectories)} trajectories")
    groups: dict[int, list[tuple]] = {}
    for i, tr in enumerate(trajectories):
        L = min(length, tr.ticks)
        ok = np.ones(tr.ticks, bool) if starts_ok is None else np.asarray(starts_ok[i], bool)
        ok = ok[: tr.ticks - L + 1]
        starts, k = [], 0
        while k <= tr.ticks - L:
            if ok[k]:
                starts.append(k)
                k += stride
            else:
                k += 1
        for s in starts or [0]:
            groups.setdefault(L, []).append((tr.states[s], tr.actions[s : s + L], tr.states[s + 1 : s + L + 1],
                                             tr.index, tr.actions[max(s - 1, 0)]))
    return [
        Windows(
            np.stack([g[0] for g in rows]), np.stack([g[1] for g in rows]),
            np.stack([g[2] for g in rows]), np.array([g[3] for g in rows]), np.stack([g[4] for g in rows]),
        )
        for _, rows in sorted(groups.items(), reverse=True)
    ]


def free_starts(model: mujoco.MjModel, states: np.ndarray, clearance: float) -> np.ndarray:
    """``(T+1,)`` True where no two *moving* bodies are within ``clearance`` (m) of contact.

    A window started mid-contact from a noisy state begins with a spurious penetration (or gap)
    of the order of the noise, and the contact spring turns that into a large, parameter-
    dependent kick. Starting windows only where moving bodies are apart and letting the twin
    simulate each contact from its onset avoids that bias. Contacts with the static world
    (floor, walls) do not count: their geometry carries no measurement noise.
    """
    import copy

    m = copy.copy(model)  # a private copy: the margin change must not leak into shared models
    m.geom_margin[:] = np.maximum(m.geom_margin, clearance)  # report contacts within the clearance
    d = mujoco.MjData(m)
    moving = m.body_weldid[m.geom_bodyid] != 0  # per geom: not welded to the world
    out = np.ones(len(states), bool)
    for k, s in enumerate(states):
        d.qpos[:] = s[: m.nq]
        d.qvel[:] = s[m.nq : m.nq + m.nv]
        mujoco.mj_forward(m, d)
        if d.ncon:
            g = d.contact.geom[: d.ncon]
            near = moving[g[:, 0]] & moving[g[:, 1]] & (d.contact.dist[: d.ncon] < clearance)
            out[k] = not near.any()
    return out


def quiet_starts(free: np.ndarray, ticks: int) -> np.ndarray:
    """``(T+1,)`` True where ``free`` (see :func:`free_starts`) held at this tick boundary and the
    ``ticks`` before it (fewer at an episode's start, which is the world's own reset).

    A contact between moving bodies leaves the state the world does not observe disturbed
    after it ends (block-push: a pushed block hops up to 2 mm off the table at up to 0.2 m/s),
    and a window restarts that state at the constant ``state_from_obs`` gives it. Measured on
    block-push's excitation data: at starts whose previous tick boundary was in contact the
    block's true height is off by 0.10 mm and its vertical speed by 0.02 m/s on average; one
    tick later, by 0.005-0.02 mm and <= 0.004 m/s. No replay from the noisy observations predicts
    the disturbed state better than the constant does, so windows start after it has settled.
    """
    free = np.asarray(free, bool)
    if ticks < 0:
        raise TwinloopError(f"quiet ticks must be >= 0, got {ticks}")
    out = free.copy()
    for k in range(1, ticks + 1):
        out[k:] &= free[:-k]
    return out


def state_units(model: mujoco.MjModel, position: float, angle: float, velocity: float,
                angular_velocity: float) -> tuple[np.ndarray, np.ndarray]:
    """``(nstate,)`` one value per twin state component by its kind: slide positions and a free
    body's position get ``position``, hinge angles and quaternion parts (a free body's or a ball
    joint's) ``angle``, linear velocities ``velocity``, angular ones ``angular_velocity``;
    actuator activations get 1. And the ``(nstate,)`` hinge-angle mask (angles that wrap)."""
    n, nq = model.nq + model.nv + model.na, model.nq
    out = np.ones(n)
    hinge = np.zeros(n, bool)
    for j in range(model.njnt):
        t = mujoco.mjtJoint(model.jnt_type[j])  # a raw int is never `in` a tuple of enum members
        qa, va = int(model.jnt_qposadr[j]), nq + int(model.jnt_dofadr[j])
        if t == mujoco.mjtJoint.mjJNT_FREE:
            out[qa : qa + 3], out[qa + 3 : qa + 7] = position, angle
            out[va : va + 3], out[va + 3 : va + 6] = velocity, angular_velocity
        elif t == mujoco.mjtJoint.mjJNT_BALL:
            out[qa : qa + 4], out[va : va + 3] = angle, angular_velocity
        else:
            is_angle = t == mujoco.mjtJoint.mjJNT_HINGE
            out[qa], hinge[qa] = (angle if is_angle else position), is_angle
            out[va] = angular_velocity if is_angle else velocity
    return out, hinge


def noise_units(model: mujoco.MjModel, position: float, angle: float, velocity: float) -> np.ndarray:
    """``(nstate,)`` noise std of each twin state component from a sensor's ``position`` (m),
    ``angle`` (rad) and ``velocity`` (m/s and rad/s) noise: as :func:`state_units` gives them
    for slides and hinges, and for free and ball joints too (which it leaves mostly at 1): a free
    body's position at ``position``, its quaternion parts at ``angle`` (a rotation of ``angle``
    moves them by at most about that much), its velocities at ``velocity``."""
    units = state_units(model, position, angle, velocity, velocity)[0]
    for j in range(model.njnt):
        t = model.jnt_type[j]
        qa, va = int(model.jnt_qposadr[j]), model.nq + int(model.jnt_dofadr[j])
        if t == mujoco.mjtJoint.mjJNT_FREE:
            units[qa : qa + 3], units[qa + 3 : qa + 7], units[va : va + 6] = position, angle, velocity
        elif t == mujoco.mjtJoint.mjJNT_BALL:
            units[qa : qa + 4], units[va : va + 3] = angle, velocity
    return units


def split_episodes(trajectories: Sequence[Trajectory], holdout_fraction: float, seed: int = 0):
    """``(train, holdout)`` by episode index (segments of one episode stay together)."""
    if not 0 <= holdout_fraction < 1:
        raise TwinloopError(f"holdout_fraction must be in [0, 1), got {holdout_fraction}")
    ids = sorted({t.index for t in trajectories})
    n_hold = int(round(holdout_fraction * len(ids)))
    if holdout_fraction > 0 and len(ids) >= 2:
        n_hold = min(max(n_hold, 1), len(ids) - 1)
    else:
        n_hold = 0
    held = set(np.random.default_rng(seed).permutation(ids)[:n_hold].tolist())
    return [t for t in trajectories if t.index not in held], [t for t in trajectories if t.index in held]


@dataclass(frozen=True)
class StateError:
    """Weighted, masked state error between predicted and recorded twin states.

    Attributes:
        scale: ``(nstate,)`` unit of error per component (m, rad, m/s, rad/s).
        mask: ``(nstate,)`` components that are compared.
        hinge: ``(nstate,)`` components that are angles (wrapped before comparing).
    """

    scale: np.ndarray
    mask: np.ndarray
    hinge: np.ndarray

    @classmethod
    def for_task(cls, task: Task, trajectories: Sequence[Trajectory], pos_scale: float = 1e-3,
                 angle_scale: float = 5e-2, vel_scale: float = 2e-2, use_velocity: bool = True) -> StateError:
        """Scales per component kind; compare what varies in the recorded data."""
        m = task.model
        for name, v in (("pos_scale", pos_scale), ("angle_scale", angle_scale), ("vel_scale", vel_scale)):
            if not v > 0:
                raise TwinloopError(f"{name} must be > 0, got {v}")
        scale, hinge = state_units(m, pos_scale, angle_scale, vel_scale, vel_scale / pos_scale * angle_scale)
        all_states = np.concatenate([t.states for t in trajectories])
        # a component that never changes is not measured (e.g. set to 0 by state_from_obs)
        mask = np.ptp(all_states, axis=0) > 0
        mask[m.nq + m.nv :] = False  # actuator activations are not observed
        if not use_velocity:
            mask[m.nq :] = False
        if not mask.any():
            raise TwinloopError("no state component varies in the recorded data; nothing to compare")
        return cls(scale, mask, hinge)

    def in_units(self, units: np.ndarray) -> StateError:
        """The same error with ``(nstate,)`` ``units`` (state units, e.g. each component's noise
        std, see :func:`noise_units`) as the unit of every component; one whose unit is not
        positive keeps its present one."""
        units = as_array(units, "error units", self.scale.shape)
        return StateError(np.where(units > 0, units, self.scale), self.mask, self.hinge)

    @property
    def size(self) -> int:
        return int(self.mask.sum())

    def __call__(self, predicted: np.ndarray, recorded: np.ndarray) -> np.ndarray:
        """``(..., nstate)`` states -> ``(..., size)`` weighted residuals."""
        d = predicted - recorded
        d = np.where(self.hinge, np.arctan2(np.sin(d), np.cos(d)), d)
        return (d / self.scale)[..., self.mask]


def twin_substeps(task: Task, twin) -> int:
    """The twin's physics steps per control tick: ``task.control_period / twin.dt`` (a twin
    coarser than the scene takes fewer steps per tick than ``task.substeps``)."""
    n = task.control_period / twin.dt
    if abs(n - round(n)) > 1e-6 * max(n, 1.0) or round(n) < 1:
        raise TwinloopError(f"the twin's timestep {twin.dt:g} s does not divide task {task.name!r}'s control "
                            f"period {task.control_period:g} s")
    return int(round(n))


def window_controls(windows: Windows, substeps: int, delay: float = 0) -> np.ndarray:
    """``(B, L * substeps, nu)`` controls per physics step: each action held for its tick,
    reaching the actuators ``delay`` physics steps late (the action before the window fills in;
    a fractional delay blends the two neighbouring whole shifts)."""
    ctrl = np.repeat(windows.actions, substeps, axis=1)
    if delay <= 0:
        return ctrl
    if delay >= ctrl.shape[1]:
        raise TwinloopError(f"delay of {delay} steps is longer than the window ({ctrl.shape[1]} steps)")
    before = windows.actions[:, 0] if windows.before is None else windows.before
    return delay_controls(ctrl, delay, before)


def window_rollout_states(twin, windows: Windows, substeps: int, params: np.ndarray | None,
                          delay: float = 0) -> tuple[np.ndarray, np.ndarray]:
    """Replay every window under every particle (actions delayed by ``delay`` physics steps).

    Returns:
        ``(P, B, L, nstate)`` predicted states after each tick and ``(P, B)`` ok flags.
    """
    r = twin.rollout_many(windows.starts, window_controls(windows, substeps, delay), params, sensors=False)
    m = twin.model
    q = r.qpos[:, :, substeps::substeps]
    v = r.qvel[:, :, substeps::substeps]
    act = np.zeros((*q.shape[:3], m.na))
    return np.concatenate([q, v, act], axis=-1), r.ok


def record_trajectory(world, policy: Callable[[np.ndarray, int], np.ndarray], seed: int, ticks: int,
                      index: int | None = None) -> Trajectory:
    """Run ``policy(obs, tick) -> action`` in ``world`` for ``ticks`` control ticks and record
    the twin states (from the observations, so with the world's noise) and actions."""
    task = world.task
    obs = world.reset(seed)
    states, actions = [], []
    for k in range(ticks):
        a = np.asarray(policy(obs, k), dtype=float)
        states.append(task.state_from_obs(obs))
        actions.append(a)
        obs, _ = world.step(a)
    states.append(task.state_from_obs(obs))
    return Trajectory(np.array(states), np.array(actions), seed if index is None else index)


__all__ = ["StateError", "Trajectory", "Windows", "as_trajectories", "free_starts", "make_windows", "quiet_starts",
           "noise_units", "record_trajectory", "split_episodes", "state_units", "twin_substeps", "window_controls",
           "window_rollout_states"]
