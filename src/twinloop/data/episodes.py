"""Episodes: recorded frame by frame, stored as one Parquet table each, read back as arrays.
Dataset folders: :mod:`twinloop.data.dataset`; foreign LeRobot Parquet: :mod:`twinloop.data.lerobot`.

Columns (LeRobot names first, twinloop's under ``twin.`` / ``world.`` / ``refine.``):

==================  =============  =====================================================
column              type           meaning
==================  =============  =====================================================
observation.state   list<float64>  the world's observation (``obs_names`` in info.json)
action              list<float64>  the action sent
timestamp           float64        seconds since the episode started
frame_index         int64          0..T-1
episode_index       int64
index               int64          frame index over the whole dataset (set on write)
task_index          int64
next.reward         float64        ``-cost``
next.done           bool           true on the last frame of a finished episode
next.success        bool           the episode's success, on its last frame
cost                float64        the task's cost of this frame (``nan`` if not given)
twin.qpos/qvel      list<float64>  twin state estimated from obs (absent if not recorded)
world.qpos/qvel     list<float64>  hidden true state of a simulated world (absent if none)
refine.*            see below      cost, prior_cost, seconds (float64), iterations, samples
                                   (candidates evaluated), n_unstable (int64), fallback (bool)
                                   of the control tick
refine.optimizer_info  string      JSON object: what the optimizer reported that tick
                                   (e.g. a language model's calls, tokens, seconds, and
                                   why its plans were not used); ``{}`` when nothing
refine.accept       string         which plan was sent and why (``refined``, ``base:
                                   advantage ... < twin error ...``): only from a
                                   controller with an acceptance rule (absent otherwise)
refine.plan         list<float64>  the refined plan's per-tick actions ``(H, nu)``,
                                   flattened: the chunk a distilled policy imitates
                                   (absent if not recorded)
==================  =============  =====================================================

Optional vector columns that were never given are left out rather than stored as nulls:
LeRobot's loaders turn every column into a tensor and cannot hold a null vector. Reading
back gives ``None`` for them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import pyarrow as pa

from twinloop.errors import TwinloopError, as_array, number
from twinloop.io import json_default

OBS, ACTION, TIMESTAMP = "observation.state", "action", "timestamp"
FRAME, EPISODE, INDEX, TASK = "frame_index", "episode_index", "index", "task_index"
REWARD, DONE, SUCCESS, COST = "next.reward", "next.done", "next.success", "cost"
TWIN_QPOS, TWIN_QVEL, WORLD_QPOS, WORLD_QVEL = "twin.qpos", "twin.qvel", "world.qpos", "world.qvel"
#: refine.<name> columns and their types (from :class:`twinloop.control.TickInfo`)
REFINE_FIELDS: dict[str, type] = {"cost": float, "prior_cost": float, "iterations": int, "samples": int,
                                  "seconds": float, "fallback": bool, "n_unstable": int}
OPTIMIZER_INFO = "refine.optimizer_info"  # TickInfo.optimizer_info as JSON text
#: TickInfo.accept (which plan was sent and why), where an acceptance rule decided
ACCEPT = "refine.accept"
PLAN = "refine.plan"  # the tick's refined plan, (H, nu) actions flattened
REQUIRED = (OBS, ACTION, TIMESTAMP, FRAME, EPISODE, INDEX, TASK, REWARD, DONE, SUCCESS, COST)

#: our fields -> column names in a twinloop dataset
TWINLOOP_COLUMNS = {"obs": OBS, "action": ACTION, "timestamp": TIMESTAMP, "episode_index": EPISODE,
                    "task_index": TASK, "qpos": TWIN_QPOS, "qvel": TWIN_QVEL, "world_qpos": WORLD_QPOS,
                    "world_qvel": WORLD_QVEL, "cost": COST, "success": SUCCESS, "plan": PLAN}
def _dumps(obj, what: str, indent: int | None = None) -> str:
    try:
        return json.dumps(obj, indent=indent, default=json_default, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TwinloopError(f"{what} cannot be stored as JSON: {exc}") from exc


# -- recording ---------------------------------------------------------------------------------


def _index(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, Integral) or x < 0:
        raise TwinloopError(f"{name} must be a non-negative integer, got {x!r}")
    return int(x)


class EpisodeRecorder:
    """Collects one episode frame by frame; :meth:`to_table` gives its Parquet table.

    Args:
        episode_index: index of the episode in its dataset.
        task_index: index into the dataset's ``meta/tasks.jsonl``.
        nq, nv: sizes of the twin's qpos and qvel, needed only to split a flat
            ``[qpos, qvel, act]`` ``twin_state`` (see :meth:`for_task`).
    """

    def __init__(self, episode_index: int, task_index: int = 0, *, nq: int | None = None,
                 nv: int | None = None):
        self.episode_index = _index(episode_index, "episode_index")
        self.task_index = _index(task_index, "task_index")
        self.nq = None if nq is None else _index(nq, "nq")
        self.nv = None if nv is None else _index(nv, "nv")
        self._t: list[float] = []
        self._cost: list[float] = []
        self._vec: dict[str, list[np.ndarray]] = {}  # column -> per-frame vectors
        self._refine: dict[str, list] = {k: [] for k in REFINE_FIELDS}
        self._optimizer_info: list[str] = []
        self._accept: list[str] = []
        self._success: bool | None = None
        self.task: str | None = None  # the task and scene recorded on (see for_task), if known
        self.scene: str | None = None

    @classmethod
    def for_task(cls, task, episode_index: int, task_index: int = 0) -> EpisodeRecorder:
        """A recorder that splits ``twin_state`` with ``task.model``'s nq and nv."""
        model = getattr(task, "model", None)
        if not hasattr(model, "nq"):
            raise TwinloopError(f"for_task takes a Task (with a model), got {type(task).__name__}")
        rec = cls(episode_index, task_index, nq=model.nq, nv=model.nv)
        rec.task, rec.scene = recorded_on(task).values()
        return rec

    def __len__(self) -> int:
        return len(self._t)

    @property
    def plan_size(self) -> int | None:
        """Values per frame of the recorded plans (``H * nu``), or ``None`` while none are."""
        rows = self._vec.get(PLAN)
        return rows[0].size if rows else None

    def add(self, timestamp: float, obs, action, *, twin_state=None, world_qpos=None,
            world_qvel=None, cost: float = math.nan, tick=None, plan=None) -> None:
        """Record one control tick.

        Args:
            timestamp: seconds since the episode started.
            obs: ``(n_obs,)`` observation the action was computed from.
            action: ``(nu,)`` action sent.
            twin_state: twin state estimated from ``obs``: a flat ``[qpos, qvel, act]`` vector
                (needs ``nq``/``nv``) or a ``(qpos, qvel)`` pair; give it every frame or never.
            world_qpos, world_qvel: the world's hidden true state, when it has one.
            cost: the task's cost of this frame (``nan`` or ``None`` if unknown).
            tick: the controller's :class:`~twinloop.control.TickInfo` (or ``None``).
            plan: ``(H, nu)`` per-tick actions of the refined plan (the label a distilled
                policy imitates); give it every frame or never.
        """
        if self._success is not None:
            raise TwinloopError(f"episode {self.episode_index} is finished; start a new EpisodeRecorder")
        frame = len(self._t)
        t = number(timestamp, f"timestamp at frame {frame}")
        if frame and not t > self._t[-1]:
            raise TwinloopError(f"timestamps must increase: {t:g} s at frame {frame} follows {self._t[-1]:g} s")
        qpos, qvel = self._split_state(twin_state, frame)
        if plan is not None:
            plan = as_array(plan, f"plan at frame {frame}", (None, None), finite=False).ravel()
        values = {OBS: obs, ACTION: action, TWIN_QPOS: qpos, TWIN_QVEL: qvel,
                  WORLD_QPOS: world_qpos, WORLD_QVEL: world_qvel, PLAN: plan}
        names = {OBS: "obs", ACTION: "action", TWIN_QPOS: "twin_state", TWIN_QVEL: "twin_state",
                 WORLD_QPOS: "world_qpos", WORLD_QVEL: "world_qvel", PLAN: "plan"}
        checked = {}
        for col, v in values.items():  # check everything before storing anything
            name = names[col]
            before = col in self._vec
            if frame > 0 and (v is not None) != before:
                raise TwinloopError(f"{name} is {'given' if v is not None else 'missing'} at frame {frame} but was "
                                    f"{'given' if before else 'missing'} at frame 0; give it at every frame or never")
            if v is None:
                continue
            arr = as_array(v, name, (None,), finite=False)
            if frame > 0 and arr.shape != self._vec[col][0].shape:
                raise TwinloopError(f"{name} has length {arr.size} at frame {frame} but {self._vec[col][0].size} at frame 0")
            checked[col] = arr
        refine = self._tick_values(tick, frame)
        opt_info = "{}" if tick is None else _dumps(tick.optimizer_info, f"optimizer_info at frame {frame}")
        if cost is not None and (isinstance(cost, (bool, np.bool_)) or not isinstance(cost, Real)):
            raise TwinloopError(f"cost must be a number, got {cost!r} at frame {frame}")
        c = math.nan if cost is None else float(cost)  # NaN: unknown
        self._t.append(t)
        self._cost.append(c)
        for col, arr in checked.items():
            self._vec.setdefault(col, []).append(arr.copy())
        for k, v in refine.items():
            self._refine[k].append(v)
        self._optimizer_info.append(opt_info)
        self._accept.append(str(getattr(tick, "accept", "") or ""))

    def _split_state(self, state, frame: int):
        if state is None:
            return None, None
        if isinstance(state, tuple) and len(state) == 2 and all(np.ndim(p) == 1 for p in state):
            return state
        s = as_array(state, "twin_state", (None,), finite=False)
        if self.nq is None or self.nv is None:
            raise TwinloopError("twin_state is a flat [qpos, qvel, act] vector; give the recorder nq and nv "
                                "(EpisodeRecorder.for_task(task, ...)) or pass twin_state=(qpos, qvel)")
        if s.size < self.nq + self.nv:
            raise TwinloopError(f"twin_state has length {s.size} at frame {frame}, expected >= nq + nv = {self.nq + self.nv}")
        return s[: self.nq], s[self.nq : self.nq + self.nv]

    @staticmethod
    def _tick_values(tick, frame: int) -> dict:
        if tick is None:  # no controller information: unknown costs/time, nothing refined
            return {"cost": math.nan, "prior_cost": math.nan, "iterations": 0, "samples": 0, "seconds": math.nan,
                    "fallback": False, "n_unstable": 0}
        out = {}
        for k, typ in REFINE_FIELDS.items():
            if not hasattr(tick, k):
                raise TwinloopError(f"tick at frame {frame} has no field {k!r}; pass a twinloop.control.TickInfo")
            v = getattr(tick, k)
            if typ is int:
                out[k] = number(v, f"tick.{k} at frame {frame}", integer=True)
            elif typ is bool:
                out[k] = bool(v)
            elif v is None:
                out[k] = math.nan
            elif isinstance(v, (bool, np.bool_)) or not isinstance(v, Real):  # costs may be NaN: unknown
                raise TwinloopError(f"tick.{k} at frame {frame} must be a number, got {v!r}")
            else:
                out[k] = float(v)
        return out

    def finish(self, success: bool) -> None:
        """End the episode: ``next.done`` (and ``next.success = success``) on the last frame."""
        if not self._t:
            raise TwinloopError(f"episode {self.episode_index} has no frames to finish")
        if not isinstance(success, (bool, np.bool_)):
            raise TwinloopError(f"success must be a bool, got {success!r}")
        self._success = bool(success)

    def to_table(self) -> pa.Table:
        """The episode as a ``pyarrow.Table`` with the columns in the module docstring."""
        T = len(self._t)
        if T == 0:
            raise TwinloopError(f"episode {self.episode_index} has no frames")
        done = np.zeros(T, bool)
        success = np.zeros(T, bool)
        if self._success is not None:
            done[-1] = True
            success[-1] = self._success
        cost = np.asarray(self._cost, np.float64)
        cols: dict[str, pa.Array] = {
            OBS: _list_array(np.stack(self._vec[OBS])),
            ACTION: _list_array(np.stack(self._vec[ACTION])),
            TIMESTAMP: pa.array(np.asarray(self._t, np.float64)),
            FRAME: pa.array(np.arange(T, dtype=np.int64)),
            EPISODE: pa.array(np.full(T, self.episode_index, np.int64)),
            INDEX: pa.array(np.arange(T, dtype=np.int64)),
            TASK: pa.array(np.full(T, self.task_index, np.int64)),
            REWARD: pa.array(-cost),
            DONE: pa.array(done),
            SUCCESS: pa.array(success),
            COST: pa.array(cost),
        }
        for col in (TWIN_QPOS, TWIN_QVEL, WORLD_QPOS, WORLD_QVEL, PLAN):
            if col in self._vec:
                cols[col] = _list_array(np.stack(self._vec[col]))
        for k, typ in REFINE_FIELDS.items():
            dtype = {float: np.float64, int: np.int64, bool: np.bool_}[typ]
            cols[f"refine.{k}"] = pa.array(np.asarray(self._refine[k], dtype))
        cols[OPTIMIZER_INFO] = pa.array(self._optimizer_info, pa.string())
        if any(self._accept):  # only a controller with an acceptance rule says
            cols[ACCEPT] = pa.array(self._accept, pa.string())
        return pa.table(cols)


def _list_array(x: np.ndarray) -> pa.ListArray:
    """``(T, n)`` float array -> list<float64> column (NaN stays NaN, not null)."""
    T, n = x.shape
    offsets = pa.array(np.arange(T + 1, dtype=np.int32) * n)
    return pa.ListArray.from_arrays(offsets, pa.array(np.ascontiguousarray(x, np.float64).ravel()))


# -- reading -----------------------------------------------------------------------------------


@dataclass
class Episode:
    """One episode read back as NumPy arrays (T frames).

    Attributes:
        episode_index: index in its dataset.
        obs: ``(T, n_obs)`` observations.
        actions: ``(T, nu)`` actions sent.
        timestamps: ``(T,)`` seconds since the start.
        qpos, qvel: ``(T, nq)``, ``(T, nv)`` twin state estimated from obs, or ``None``.
        world_qpos, world_qvel: hidden true state of a simulated world, or ``None``.
        costs: ``(T,)`` task cost per frame (``nan`` where unknown).
        success: the episode's outcome (``None`` when the source does not say).
        refine: ``refine.*`` columns by name (``(T,)`` arrays; ``optimizer_info`` is a list of
            T dicts, ``accept`` of T strings; empty for foreign data).
        task_index: index of the task.
        plans: ``(T, H, nu)`` refined plans (``refine.plan``), or ``None``.
        task: the name of the task it was recorded on, or ``None`` when its source does not
            say (foreign data, datasets written before episodes carried it).
        scene: the fingerprint of that task's scene
            (:func:`~twinloop.twin.base.scene_fingerprint`), or ``None`` likewise.
    """

    episode_index: int
    obs: np.ndarray
    actions: np.ndarray
    timestamps: np.ndarray
    qpos: np.ndarray | None = None
    qvel: np.ndarray | None = None
    world_qpos: np.ndarray | None = None
    world_qvel: np.ndarray | None = None
    costs: np.ndarray | None = None
    success: bool | None = None
    refine: dict[str, np.ndarray | list[dict]] = field(default_factory=dict)
    task_index: int = 0
    plans: np.ndarray | None = None
    task: str | None = None
    scene: str | None = None

    def __len__(self) -> int:
        return len(self.timestamps)


def recorded_on(task) -> dict:
    """What a dataset's ``info`` says about the task its episodes are recorded on: ``task``
    (its name) and ``scene`` (its scene's fingerprint), which every consumer compares."""
    from twinloop.twin.base import scene_fingerprint

    return {"task": task.name, "scene": scene_fingerprint(task.model)}


def check_recorded_on(task, episodes, what: str = "episodes") -> None:
    """Raise unless every episode that names its task and scene names ``task``'s (episodes that
    name none, e.g. foreign data or older datasets, pass: nothing to compare)."""
    want = recorded_on(task)
    for i, ep in enumerate(episodes):
        name, scene = getattr(ep, "task", None), getattr(ep, "scene", None)
        index = getattr(ep, "episode_index", getattr(ep, "index", i))
        if isinstance(name, str) and name and name != want["task"]:
            raise TwinloopError(f"{what}: episode {index} was recorded on task {name!r}, not {want['task']!r}; "
                                f"use episodes of task {want['task']!r} or the task {name!r}")
        if isinstance(scene, str) and scene and scene != want["scene"]:
            raise TwinloopError(f"{what}: episode {index} was recorded on another scene of task {want['task']!r} "
                                f"(scene {scene} vs {want['scene']}: different bodies, joints or options such as "
                                "contact pairs); use the task options it was recorded with")


def _matrix(table: pa.Table, col: str, where: str) -> np.ndarray:
    """A numeric column (scalars or equal-length lists) as a ``(T, n)`` float64 array."""
    arr = table.column(col).combine_chunks()
    if arr.null_count:
        raise TwinloopError(f"{where}: column {col!r} has {arr.null_count} null rows")
    typ = arr.type
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        lengths = arr.value_lengths().to_numpy(zero_copy_only=False)
        if len(lengths) and np.any(lengths != lengths[0]):
            raise TwinloopError(f"{where}: column {col!r} has rows of different lengths "
                                f"({int(lengths.min())}..{int(lengths.max())})")
        try:
            flat = arr.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
        except (TypeError, ValueError, pa.ArrowException) as exc:
            raise TwinloopError(f"{where}: column {col!r} ({typ}) is not a list of numbers") from exc
        return flat.reshape(len(arr), int(lengths[0]) if len(lengths) else 0)
    if pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ):
        return arr.to_numpy(zero_copy_only=False).astype(np.float64)[:, None]
    raise TwinloopError(f"{where}: column {col!r} has type {typ}; expected numbers or lists of numbers")


def _scalar(table: pa.Table, col: str, where: str, dtype=np.float64) -> np.ndarray:
    m = _matrix(table, col, where)
    if m.shape[1] != 1:
        raise TwinloopError(f"{where}: column {col!r} holds vectors of length {m.shape[1]}, expected scalars")
    v = m[:, 0]
    if np.issubdtype(dtype, np.integer) and not (np.isfinite(v).all() and (v == np.round(v)).all()):
        bad = v[~(np.isfinite(v) & (v == np.round(v)))][0]
        raise TwinloopError(f"{where}: column {col!r} must hold integers, got {bad}")
    return v.astype(dtype)


def _episode_from_table(table: pa.Table, cols: Mapping[str, str], where: str, *,
                        episode_index: int, fps: float | None = None, refine: bool = False) -> Episode:
    has = set(table.column_names)

    def vec(f):
        return _matrix(table, cols[f], where) if f in cols and cols[f] in has else None

    T = table.num_rows
    if "timestamp" in cols and cols["timestamp"] in has:
        t = _scalar(table, cols["timestamp"], where)
    elif fps:
        t = np.arange(T) / float(fps)
    else:
        raise TwinloopError(f"{where}: no timestamp column {cols.get('timestamp')!r}; map 'timestamp' "
                            "to a column or pass fps=")
    if "cost" in cols and cols["cost"] in has:
        costs = _scalar(table, cols["cost"], where)
    elif "reward" in cols and cols["reward"] in has:
        costs = -_scalar(table, cols["reward"], where)
    else:
        costs = np.full(T, np.nan)
    success = None
    if "success" in cols and cols["success"] in has:
        success = bool(_scalar(table, cols["success"], where).any())
    task = 0
    if "task_index" in cols and cols["task_index"] in has and T:
        task = int(_scalar(table, cols["task_index"], where, np.int64)[0])
    ref = {}
    if refine:
        for k, typ in REFINE_FIELDS.items():
            c = f"refine.{k}"
            if c in has:
                ref[k] = _scalar(table, c, where, {float: np.float64, int: np.int64, bool: np.bool_}[typ])
        if ACCEPT in has:
            ref["accept"] = [str(a) for a in table.column(ACCEPT).to_pylist()]
        if OPTIMIZER_INFO in has:
            try:
                ref["optimizer_info"] = [json.loads(t) for t in table.column(OPTIMIZER_INFO).to_pylist()]
            except (TypeError, json.JSONDecodeError) as exc:
                raise TwinloopError(f"{where}: column {OPTIMIZER_INFO!r} does not hold JSON text ({exc})") from exc
    actions, plans = vec("action"), vec("plan")
    if plans is not None:  # (T, H * nu) -> (T, H, nu)
        nu = actions.shape[1]
        if plans.shape[1] % max(nu, 1):
            raise TwinloopError(f"{where}: column {cols['plan']!r} holds {plans.shape[1]} values per row, "
                                f"not a multiple of the {nu} actions")
        plans = plans.reshape(len(plans), -1, nu)
    return Episode(episode_index=episode_index, obs=vec("obs"), actions=actions, timestamps=t,
                   qpos=vec("qpos"), qvel=vec("qvel"), world_qpos=vec("world_qpos"),
                   world_qvel=vec("world_qvel"), costs=costs, success=success, refine=ref,
                   task_index=task, plans=plans)
