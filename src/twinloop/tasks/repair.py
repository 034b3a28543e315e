"""A grasp task's local repair (:class:`PlaceRepair`: re-grasp or place a misplaced point near
its goal) and the controller part that offers it: a candidate source, carried on under a
commit margin once sent (then also a tick hook; see :mod:`twinloop.control.parts`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from twinloop.errors import TwinloopError, as_array, number

if TYPE_CHECKING:
    from twinloop.tasks.deformable import GraspTask


def sample_keys(task: GraspTask, keys: list, ticks: int, lag: float, arm: int = 0) -> np.ndarray:
    """``(ticks, 4)`` actions from keys ``(time s, (3,) gripper target m, grasp 0-1)``: targets
    interpolated linearly between keys at the tick times, ``lag`` ahead (where the PD stage
    should be then), the grasp command of the last key reached; clipped to the action bounds of
    gripper ``arm`` (its four actions: ``4 arm .. 4 arm + 3``)."""
    times = np.array([k[0] for k in keys])
    xyz = np.array([k[1] for k in keys])
    grasp = np.array([k[2] for k in keys])
    at = task.control_period * np.arange(1, ticks + 1) + lag
    out = np.column_stack([*(np.interp(at, times, xyz[:, i]) for i in range(3)),
                           grasp[np.searchsorted(times, at, side="right") - 1]])
    arm_actions = slice(4 * arm, 4 * arm + 4)
    return np.clip(out, task.action_low[arm_actions], task.action_high[arm_actions])


@dataclass(frozen=True)
class RepairConfig:
    """Knobs of :class:`PlaceRepair` (metres, seconds).

    Attributes:
        reach: the repair is offered only while the grasped point lies within this horizontal
            distance of its goal (a local correction; the tasks' points start 33-42 cm away).
        regrasp_reach: the same for a re-grasp (the point let go), ``None``: ``reach``. A
            wider one re-grasps a point dropped far off, while a place (the point still held,
            as the base carries it from its start) stays within ``reach``; pushes too.
        heights: how high the point is lifted over the midpoint of its way (at most the
            distance to go), one candidate each (m).
        overshoot: fractions of the shape's mean horizontal residual (the scored points' mean
            offset from their goals) added to the target, one candidate each: 0 places the
            point on its goal, 1 drags it past by the residual, pulling the rest along.
        travel_speed: gripper speed (m/s), flying and carrying.
        hover: height above the point to descend from (m).
        pinch: gripper height above the point when grasping and placing (m).
        back_off: how far the gripper rises after the release (m).
        lag: how far (s) the PD stage trails its target; targets run this far ahead.
        place: also offered while the point is still held (carry it on from where it is and
            let go on the goal); off: only once it has been let go (a re-grasp).
        push: how many other scored points to offer a push for, the farthest from their goals
            first (0: none). The grasp pulls one point; the others move only under the finger:
            a push flies open to a spot ``behind`` the point (on its far side from its goal),
            down onto the table, slides through the point to its goal and rises ``back_off``.
            Offered while the grasped point is let go, for a point more than ``tolerance``
            and at most ``reach`` from its goal (towel: a lower layer turned under a corner
            laid on its goal, which no place of the corner turns back).
        behind: where a push starts, this far behind the point (m).
        commit: carry a repair on once the refiner sent it (``None``: off): the refined
            controller offers the rest of it first each tick and keeps sending the cheapest
            repair unless a plan costs less by more than this fraction of its cost
            (:class:`CommittedRepair`; a repair takes longer than the horizon,
            and rated over its first second it loses to plans that make no progress).
    """

    reach: float = 0.12
    heights: tuple[float, ...] = (0.02, 0.05)
    overshoot: tuple[float, ...] = (0.0, 1.0)
    travel_speed: float = 0.4
    hover: float = 0.03
    pinch: float = 0.01
    back_off: float = 0.05
    lag: float = 0.05
    place: bool = True
    push: int = 0
    behind: float = 0.015
    commit: float | None = None
    regrasp_reach: float | None = None

    def __post_init__(self):
        number(self.push, "RepairConfig.push", low=0, integer=True)
        if self.commit is not None:
            number(self.commit, "RepairConfig.commit", low=0.0)
        if self.regrasp_reach is not None:
            number(self.regrasp_reach, "RepairConfig.regrasp_reach", low=0.0, low_open=True)
        for name in ("reach", "travel_speed", "hover", "pinch", "back_off", "behind"):
            number(getattr(self, name), f"RepairConfig.{name}", low=0.0, low_open=True)
        number(self.lag, "RepairConfig.lag", low=0.0, high=1.0, high_open=True)
        if not self.heights or not self.overshoot:
            raise TwinloopError(f"RepairConfig needs at least one height and one overshoot, got {self.heights!r}, "
                                f"{self.overshoot!r}")
        for h in self.heights:
            number(h, "RepairConfig.heights (each)", low=0.0)
        for f in self.overshoot:
            number(f, "RepairConfig.overshoot (each)")


class PlaceRepair:
    """A local repair of a grasp task: candidate action chunks that re-grasp the grasped point
    where it now lies (or, while it is still held, go on from there), carry it to its goal,
    release it and back off.

    ``candidates(state, ticks) -> (n, ticks, 4)``: one chunk per carry height and overshoot
    (:class:`RepairConfig`), gripper targets and grasp commands per control tick (each target
    ``lag`` ahead, as :class:`SwingScript`'s), read from the estimated state; ``n = 0`` when
    the point lies farther than ``reach`` from its goal (``regrasp_reach`` once let go; the
    repair cannot do the task from its start) or the task's error is within tolerance with the point let go (a shape within
    tolerance whose point is still held is offered the place: let go there; once let go, a
    gripper still near is not re-grasping: an offer then pinched a finished towel again and
    again). The refiner rehearses them beside its own samples and sends one only where the
    twin rates it cheapest.

    Args:
        task: the task.
        point: index of the grasped point among ``task.points``.
        goal: ``(3,)`` where that point belongs.
        config: :class:`RepairConfig`.
    """

    def __init__(self, task: GraspTask, point: int, goal, config: RepairConfig | None = None):
        self.task, self.config = task, config or RepairConfig()
        if not isinstance(self.config, RepairConfig):
            raise TwinloopError(f"config must be a RepairConfig, got {type(self.config).__name__}")
        self.point, self.goal = int(point), as_array(goal, "goal", (3,))

    @property
    def commit(self) -> float | None:
        """The controller's commit margin (:attr:`RepairConfig.commit`)."""
        return self.config.commit

    def candidates(self, state, ticks: int) -> np.ndarray:
        """``(n, ticks, 4)`` repair chunks from twin ``state`` (see the class docstring)."""
        t, cfg = self.task, self.config
        s = as_array(state, "state", (t.nstate,))
        ticks = number(ticks, "ticks", low=1, integer=True)
        m = t.model
        grip, act = s[0:3], float(s[m.nq + m.nv])
        q = s[: m.nq]
        pts = t.keypoint_positions(q)
        p = pts[self.point]
        held = act > 0.5 and np.linalg.norm(grip - p) < t.capture_radius
        done = float(t.error(q)) <= t.tolerance and not held  # let go within tolerance: backing off is not a repair
        off = np.linalg.norm((p - self.goal)[:2])
        reach = cfg.reach if held or cfg.regrasp_reach is None else cfg.regrasp_reach
        if off > reach or done or (held and not cfg.place):
            return np.empty((0, ticks, t.nu))
        residual = (t.goal - pts[t._err]).mean(axis=0) * [1.0, 1.0, 0.0]
        if held:  # place: carry on from here
            start = [(0.0, grip, 1.0)]
        else:  # over the point, down, close (one tick for the grasp to build up)
            above, at = p + [0, 0, cfg.hover], p + [0, 0, cfg.pinch]
            t1 = np.linalg.norm(above - grip) / cfg.travel_speed
            t0 = t1 + (cfg.hover - cfg.pinch) / cfg.travel_speed + t.control_period
            start = [(0.0, grip, 0.0), (t1, above, 0.0), (t0 - t.control_period, at, 1.0), (t0, at, 1.0)]
        out = []
        for f in cfg.overshoot:
            target = self.goal + f * residual + [0, 0, cfg.pinch]
            for h in cfg.heights:
                keys = start + self._carry(start[-1][1], target, h, start[-1][0])
                out.append(sample_keys(t, keys, ticks, cfg.lag))
        if cfg.push and not held and off <= cfg.reach:
            out += [sample_keys(t, self._push(grip, pts[i], t.goal[j]), ticks, cfg.lag) for i, j in self._pushed(pts)]
        return np.stack(out)

    def _pushed(self, pts: np.ndarray) -> list[tuple[int, int]]:
        """``(point, goal row)`` of the points to push: the ``push`` farthest from their goals
        (horizontally) among the scored ones but the grasped, within ``(tolerance, reach]``."""
        t, cfg = self.task, self.config
        rows = [j for j, i in enumerate(t._err) if i != self.point]
        off = np.linalg.norm((t.goal[rows] - pts[t._err[rows]])[:, :2], axis=1)
        keep = [(off[r], t._err[j], j) for r, j in enumerate(rows) if t.tolerance < off[r] <= cfg.reach]
        return [(i, j) for _, i, j in sorted(keep, reverse=True)[: cfg.push]]

    def _push(self, grip: np.ndarray, p: np.ndarray, goal: np.ndarray) -> list:
        """Keys of a push of the point at ``p`` to ``goal`` (see :class:`RepairConfig`): the
        grasp open throughout; a finger already down behind the point slides on from there."""
        t, cfg = self.task, self.config
        low = t.action_low[2]
        u = (goal - p) * [1.0, 1.0, 0.0]
        u /= np.linalg.norm(u)
        start = np.array([*(p - cfg.behind * u)[:2], low])
        end = np.array([*goal[:2], low])
        keys = [(0.0, grip, 0.0)]
        if np.linalg.norm((grip - start)[:2]) > cfg.hover or grip[2] > low + cfg.hover:  # fly over, then down
            above = start + [0, 0, cfg.hover]
            keys.append((np.linalg.norm(above - grip) / cfg.travel_speed, above, 0.0))
        t0 = keys[-1][0] + np.linalg.norm(start - keys[-1][1]) / cfg.travel_speed
        t1 = t0 + np.linalg.norm(end - start) / (cfg.travel_speed / 2)
        return keys + [(t0, start, 0.0), (t1, end, 0.0), (t1 + cfg.back_off / cfg.travel_speed, end + [0, 0, cfg.back_off], 0.0)]

    def _carry(self, frm: np.ndarray, to: np.ndarray, height: float, t0: float) -> list:
        """Keys ``(time, target, grasp)``: up ``height`` (at most the distance to go: a point
        already there is not lifted) over the midpoint, down onto ``to``, held there until the
        tick that starts there (the stage trails its target), opened there for another control
        period (the grasp's activation decays over about 0.1 s: a finger leaving at once drags
        the point up), then back off upward. A point held on its target is let go at once: a
        plan that always waits one more tick is re-planned into never letting go."""
        cfg, dt = self.config, self.task.control_period
        mid = (frm + to) / 2 + [0, 0, min(height, float(np.linalg.norm(to - frm)))]
        t1 = t0 + np.linalg.norm(mid - frm) / cfg.travel_speed
        t2 = t1 + np.linalg.norm(to - mid) / cfg.travel_speed
        up = to + [0, 0, cfg.back_off]
        return [(t1, mid, 1.0), (t2, to, 1.0), (t2 + dt, to, 0.0), (t2 + 2 * dt, to, 0.0),
                (t2 + 2 * dt + cfg.back_off / cfg.travel_speed, up, 0.0)]


class RepairSource:
    """Offers a task's repair chunks (``repair.candidates(state, ticks) -> (n, ticks, nu)``, e.g.
    :class:`PlaceRepair`) each refined tick, the way a stochastic
    proposer's samples are offered: they join the first batch of any optimizer, rehearsed
    with their own per-tick detail under ``exact_prior``. The baseline never sees them.

    Args:
        repair: an object with ``candidates(state, ticks)``.
    """

    def __init__(self, repair):
        if not callable(getattr(repair, "candidates", None)):
            raise TwinloopError(f"repair {type(repair).__name__} has no candidates(state, ticks) method")
        self.repair = repair

    def offer(self, obs, state, ticks: int, rng=None) -> np.ndarray:
        """``(n, ticks, nu)`` repair chunks from twin ``state``."""
        return np.asarray(self.repair.candidates(state, ticks))


class CommittedRepair(RepairSource):
    """A repair carried through once sent, under a ``commit`` margin (e.g.
    ``RepairConfig.commit``): a candidate source and a tick hook.

    Its chunks are made as long as an episode and, after a tick that sent one, the rest of it
    (shifted a tick) is offered first among the next tick's repairs; while a repair is under
    way the cheapest repair offered is sent unless the refined plan costs less by more than
    ``commit`` times the refined plan's cost (a repair is longer than the horizon: rated over
    its first second it loses to plans that make no progress). The commit ends when the
    repair's chunk is spent (it no longer moves) or a plan beats it by the margin. It needs a
    controller that plans between an observation and its action (the synchronous one).

    Args:
        repair: an object with ``candidates(state, ticks)``.
        commit: the commit margin (a cost fraction >= 0).
    """

    def __init__(self, repair, commit: float):
        super().__init__(repair)
        self.commit = number(commit, "repair commit margin", low=0.0)
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        self._committed: np.ndarray | None = None  # (L, nu) the rest of the repair under way
        self._whole: list = []
        self._under_way = False

    def bind(self, controller) -> None:
        if not getattr(controller, "ticks_in_step", False):
            raise TwinloopError(f"a repair's commit margin ({self.commit}) carries a repair on tick by tick; the "
                                "asynchronous controller plans between ticks: use the synchronous Controller")
        self._max_ticks = controller.task.max_ticks
        self._spec = controller.refiner.spec

    def offer(self, obs, state, ticks: int, rng=None) -> np.ndarray:
        """This tick's repair chunks, as long as an episode: the rest of the repair under way
        first."""
        self._under_way = self._committed is not None
        whole = list(self.repair.candidates(state, max(ticks, self._max_ticks)))
        self._whole = whole if self._committed is None else [self._committed, *whole]
        return np.stack(self._whole) if self._whole else np.empty((0, ticks, 0))

    def decide(self, tick, batch) -> None:
        """The plan sent and its cost under the commit margin, and the rest of the repair sent,
        if one was, kept for the next tick."""
        self._committed = None
        if tick.fallback or tick.result is None:
            return
        rows = batch.of(self)
        offered = tick.result.offered_costs
        costs = np.array([]) if offered is None else offered[rows]
        if not np.isfinite(costs).any():
            return
        res, plans = tick.result, batch.plans[rows]
        j = int(np.nanargmin(np.where(np.isfinite(costs), costs, np.nan)))
        if costs[j] <= res.cost or (self._under_way and costs[j] - res.cost <= self.commit * abs(res.cost)):
            if costs[j] > res.cost:  # kept against a cheaper plan: send the repair's own chunk
                p = plans[j]
                tick.plan = replace(p, knots=np.clip(p.knots, self._spec.low, self._spec.high))
                tick.action, tick.cost = tick.plan.first_action(), float(costs[j])
            rest = np.concatenate([self._whole[j][1:], self._whole[j][-1:]])
            self._committed = rest if np.abs(rest - rest[-1]).max() > 0 else None


def repair_source(repair, commit: float | None = None) -> RepairSource:
    """The candidate source of ``repair``: committing (:class:`CommittedRepair`) with a
    ``commit`` margin (default: the repair's own ``commit`` attribute, if any)."""
    commit = getattr(repair, "commit", None) if commit is None else commit
    return RepairSource(repair) if commit is None else CommittedRepair(repair, commit)
