"""Scripted base proposers of the planar pushing tasks: the point-pushing heuristic a person
writes in an afternoon (beside the tasks that use it; :mod:`twinloop.policies` exports it).

Each tick the script picks one *push* from a short menu of contact points on the block's
outline (each with the inward face normal ``n``) and plays it out over the chunk: go around
the block to a stand-off point behind the contact, approach, then push along ``n``.

A push at contact ``r`` (from the block's centroid) along ``n`` moves a block sliding on its
floor roughly along the generalized direction ``u = (n, (r x n) / r_g)`` (translation,
rotation times the radius of gyration ``r_g``). The script wants the generalized
displacement ``D = (goal centroid - centroid, w * r_g * yaw error)`` (``w = yaw_weight`` = 2:
turn first, since turning a T late costs long detours) and picks the contact that
maximises ``D . u / |u|`` (with a bonus for the contact it used last tick, so it does not
dither), pushing for ``D . u / |u|`` metres. Nothing in it knows the friction, the mass
or the pusher's lag beyond a fixed lead: it is tuned against the nominal physics only.

``propose(obs, state) -> (H, nu)`` targets per control tick, ``H = round(1 s / period)``;
``sample(obs, state, n, rng) -> (n, H, nu)`` varies the contact (one of the best few, shifted
along its face), the lead and adds smooth target noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from twinloop.errors import TwinloopError, as_array
from twinloop.tasks.base import Task
from twinloop.tasks.planar import cross, rotate


@dataclass(frozen=True)
class ScriptedConfig:
    """Knobs of the scripted pusher (metres, seconds).

    Attributes:
        travel_speed: pusher speed while repositioning (m/s).
        push_speed: pusher speed while pushing (m/s).
        lag: how far (s) the PD stage trails a moving target; targets run this far ahead.
        lead: how far the target runs ahead of the contact while pushing (m), to overcome
            the PD stage's lag under friction.
        min_push: shortest push (m), so a nearly finished block still moves.
        standoff: clearance behind the contact point before the approach (m).
        clearance: gap kept from the block while going around it (m).
        in_position: lateral / depth tolerance to start pushing (m).
        hysteresis: score bonus of last tick's contact, relative to ``|D|``.
        yaw_weight: weight of the yaw error against the position error in ``D``.
        noise: std of smooth target noise in ``sample`` (m).
        jitter: std of the contact shift along its face in ``sample`` (m).
        top_k: ``sample`` draws its contact from the ``top_k`` best.
    """

    travel_speed: float = 0.25
    push_speed: float = 0.10
    lag: float = 0.2
    lead: float = 0.006
    min_push: float = 0.003
    standoff: float = 0.02
    clearance: float = 0.012
    in_position: float = 0.008
    hysteresis: float = 0.15
    yaw_weight: float = 2.0
    noise: float = 0.004
    jitter: float = 0.006
    top_k: int = 3

    def __post_init__(self):
        for k in ("travel_speed", "push_speed", "standoff", "clearance", "in_position"):
            if not getattr(self, k) > 0:
                raise TwinloopError(f"ScriptedConfig.{k} must be > 0, got {getattr(self, k)}")
        if self.top_k < 1:
            raise TwinloopError(f"ScriptedConfig.top_k must be >= 1, got {self.top_k}")


class PointPusher:
    """Shared machinery; a subclass gives the contact menu and the block's geometry.

    Subclass attributes: ``contacts (M, 2)`` and ``normals (M, 2)`` (block frame, inward),
    ``faces (M, 2)`` unit tangents for jitter, ``centroid (2,)``, ``gyration``, ``radius``
    (of a circle about the centroid containing the block), ``pusher_radius``.
    """

    contacts: np.ndarray
    normals: np.ndarray
    centroid: np.ndarray
    gyration: float
    radius: float
    pusher_radius: float

    def __init__(self, task: Task, config: ScriptedConfig | None = None):
        self.task = task
        self.config = config or ScriptedConfig()
        self.dt = task.control_period
        self.H = max(1, int(round(1.0 / task.control_period)))
        self.faces = np.stack([-self.normals[:, 1], self.normals[:, 0]], axis=1)
        # the pusher's x, y targets are the task's first two actions
        self.low, self.high = task.action_low[:2], task.action_high[:2]
        self._last: int | None = None

    # -- task hooks -------------------------------------------------------------------------

    def pose(self, state: np.ndarray) -> np.ndarray:
        """Block ``(x, y, yaw)`` from a twin state."""
        return np.array([state[2], state[3], state[5]])

    def pusher(self, state: np.ndarray) -> np.ndarray:
        """Pusher ``(x, y)`` from a twin state."""
        return np.asarray(state[0:2], dtype=float)

    def yaw_error(self, yaw: float) -> float:
        raise NotImplementedError

    def goal_centroid(self) -> np.ndarray:
        raise NotImplementedError

    def clear_of_block(self, pose: np.ndarray, points: np.ndarray) -> np.ndarray:
        """``(n,)`` True where the pusher at ``points (n, 2)`` keeps ``clearance`` off the block."""
        raise NotImplementedError

    # -- protocol ----------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        self._last = None

    def propose(self, obs, state) -> np.ndarray:
        """``(H, 2)`` pusher targets for the next H control ticks."""
        s = as_array(state, "state", (self.task.nstate,))
        choice = self._rank(s)[0]
        self._last = int(choice)
        return self._chunk(s, int(choice), 0.0, self.config.lead)

    def sample(self, obs, state, n: int, rng: np.random.Generator) -> np.ndarray:
        """``(n, H, 2)`` variants: another of the best contacts, shifted along its face, a
        different lead, and smooth target noise (offset + drift over the chunk)."""
        if n < 1:
            raise TwinloopError(f"sample needs n >= 1, got {n}")
        s = as_array(state, "state", (self.task.nstate,))
        cfg = self.config
        ranked = self._rank(s)[: cfg.top_k]
        out = np.empty((n, self.H, 2))
        ramp = np.linspace(0.0, 1.0, self.H)[:, None]
        for i in range(n):
            c = int(ranked[rng.integers(len(ranked))])
            chunk = self._chunk(s, c, rng.normal(0.0, cfg.jitter), cfg.lead * rng.uniform(0.5, 2.0))
            chunk += rng.normal(0.0, cfg.noise, 2) + ramp * rng.normal(0.0, cfg.noise, 2)
            out[i] = np.clip(chunk, self.low, self.high)
        return out

    # -- the script --------------------------------------------------------------------------

    def _wanted(self, pose: np.ndarray) -> np.ndarray:
        c = pose[:2] + rotate(self.centroid, pose[2])
        dp = self.goal_centroid() - c
        return np.array([dp[0], dp[1], self.config.yaw_weight * self.gyration * self.yaw_error(pose[2])])

    def _pushes(self, pose: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """World contact points, inward normals and unit generalized directions ``(M, 3)``."""
        pts = pose[:2] + rotate(self.contacts, pose[2])
        nrm = rotate(self.normals, pose[2])
        r = pts - (pose[:2] + rotate(self.centroid, pose[2]))
        u = np.column_stack([nrm, cross(r, nrm) / self.gyration])
        return pts, nrm, u / np.linalg.norm(u, axis=1, keepdims=True)

    def _rank(self, state: np.ndarray) -> np.ndarray:
        pose = self.pose(state)
        D = self._wanted(pose)
        _, _, u = self._pushes(pose)
        score = u @ D
        if self._last is not None:
            score[self._last] += self.config.hysteresis * np.linalg.norm(D)
        return np.argsort(-score)

    def _chunk(self, state: np.ndarray, i: int, shift: float, lead: float) -> np.ndarray:
        cfg = self.config
        pose, p = self.pose(state), self.pusher(state)
        pts, nrm, u = self._pushes(pose)
        n = nrm[i]
        contact = pts[i] + shift * rotate(self.faces[i], pose[2]) - n * self.pusher_radius
        push = float(np.clip(u[i] @ self._wanted(pose), cfg.min_push, cfg.push_speed * self.dt * self.H))
        rel = p - contact
        depth, lateral = float(rel @ n), float(abs(cross(n, rel)))
        if lateral < cfg.in_position and -cfg.standoff - cfg.in_position < depth < cfg.in_position:
            path, speeds = [p, contact + n * (push + lead)], [cfg.push_speed]
        else:
            pre = contact - n * cfg.standoff
            path = [p, *self._detour(pose, p, pre), pre, contact, contact + n * (push + lead)]
            speeds = [cfg.travel_speed] * (len(path) - 3) + [cfg.push_speed] * 2
        return np.clip(self._walk(path, speeds), self.low, self.high)

    def _detour(self, pose: np.ndarray, p: np.ndarray, goal: np.ndarray) -> list[np.ndarray]:
        """Waypoints around the block (an arc about its centroid) if the straight way hits it."""
        seg = p + np.linspace(0.0, 1.0, 16)[:, None] * (goal - p)
        if self.clear_of_block(pose, seg).all():
            return []
        c = pose[:2] + rotate(self.centroid, pose[2])
        return arc(c, self.radius + self.pusher_radius + self.config.clearance, p, goal)

    def _walk(self, path: list[np.ndarray], speeds: list[float]) -> np.ndarray:
        return walk(path, speeds, self.H, self.dt, self.config.lag)


def arc(centre, radius: float, start, end) -> list[np.ndarray]:
    """Waypoints ``(2,)`` on the circle of ``radius`` about ``centre`` from the direction of
    ``start`` to that of ``end`` the short way round, at most 30 degrees apart."""
    c = np.asarray(centre, float)
    a0 = np.arctan2(*(np.asarray(start, float) - c)[::-1])
    a1 = np.arctan2(*(np.asarray(end, float) - c)[::-1])
    da = np.arctan2(np.sin(a1 - a0), np.cos(a1 - a0))
    steps = max(1, int(np.ceil(abs(da) / (np.pi / 6))))
    return [c + radius * np.array([np.cos(a), np.sin(a)]) for a in a0 + da * np.linspace(0, 1, steps + 1)]


def walk(path, speeds, ticks: int, dt: float, lag: float) -> np.ndarray:
    """``(ticks, d)`` targets reached at each of the next ``ticks`` control ticks (``dt`` s each)
    moving along ``path`` (waypoints ``(d,)``, the first where the tool is now) at ``speeds``
    (m/s, one per segment; the last repeats), holding the end.

    A servo trails a target moving at ``v`` by ``v * lag``, so the first target is ``dt + lag``
    seconds along the path.
    """
    out = np.empty((ticks, len(path[0])))
    k, pos, seg, t_left = 0, np.asarray(path[0], float), 1, dt + lag
    while k < ticks:
        if seg >= len(path):
            out[k:] = pos
            break
        tgt = np.asarray(path[seg], float)
        v = speeds[min(seg - 1, len(speeds) - 1)]
        gap = float(np.linalg.norm(tgt - pos))
        if gap <= v * t_left:
            pos, t_left, seg = tgt, t_left - gap / v, seg + 1
            continue
        pos = pos + (tgt - pos) * (v * t_left / gap)
        out[k] = pos
        k, t_left = k + 1, dt
    return out


def pusher_excitation(task: Task, seed: int, kind: str = "excite", *, reach: float,
                      period: int = 10, spread: float = 0.8) -> Callable[[np.ndarray, int], np.ndarray]:
    """A scripted excitation for the planar pusher tasks (pusher at ``qpos[0:2]``, block at
    ``qpos[2:4]``): ``f(obs, tick) -> action``.

    ``excite``: every ``period`` ticks pick a new direction (roughly toward the table's middle)
    and speed; approach behind the block (3 ticks), push through it (5), back off (2): speed-ups,
    pushes and free slides that separate friction from mass (``reach``: how far behind the
    block's centre the approach starts, m; ``spread``: the push directions are uniform within
    this many radians of the direction from the block to the table's middle: a smaller one keeps
    the block nearer the middle, e.g. inside a camera's view). ``constant``: one push along +x at
    constant speed, which only fixes their product (a poorly excited set).
    """
    if kind not in ("excite", "constant"):
        raise TwinloopError(f"unknown excitation {kind!r}; choose excite or constant")
    rng = np.random.default_rng([seed, 7])
    mem: dict = {}

    def f(obs, k):
        s = task.state_from_obs(obs)
        pusher, block = s[0:2], s[2:4]
        if kind == "constant":
            return np.clip([pusher[0] + 0.02, block[1]], task.action_low, task.action_high)
        if k % period == 0:
            ang = np.arctan2(-block[1], -block[0]) + rng.uniform(-spread, spread)
            mem["d"] = np.array([np.cos(ang), np.sin(ang)])
            mem["speed"] = rng.uniform(0.05, 0.15)
        d, ph = mem["d"], (k % period) / period
        if ph < 0.3:
            tgt = block - d * reach
        elif ph < 0.8:
            tgt = block + d * mem["speed"]
        else:
            tgt = pusher - d * 0.03
        return np.clip(tgt, task.action_low, task.action_high)

    return f
