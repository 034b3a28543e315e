"""Episodes and datasets on disk: one Parquet file per episode, LeRobot v2.1 layout.

A dataset folder::

    meta/info.json                 features (dtype, shape, names), fps, totals, `twinloop` block
    meta/episodes.jsonl            one line per episode: episode_index, tasks, length, success
    meta/episodes_stats.jsonl      per-episode min/max/mean/std/count of every numeric feature
    meta/tasks.jsonl               task_index -> task string
    data/chunk-000/episode_000000.parquet

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
refine.*            see below      cost, prior_cost, seconds (float64), iterations,
                                   n_unstable (int64), fallback (bool) of the control tick
refine.optimizer_info  string      JSON object: what the optimizer reported that tick
                                   (e.g. a language model's calls, tokens, seconds, and
                                   why its plans were not used); ``{}`` when nothing
==================  =============  =====================================================

Optional vector columns that were never given are left out rather than stored as nulls:
LeRobot's loaders turn every column into a tensor and cannot hold a null vector. Reading
back gives ``None`` for them.

Every file is written atomically (temp file in the same folder, then ``os.replace``), data
before metadata, so a crash leaves either the old dataset or the new one plus, at worst, an
unlisted episode file that readers ignore (they follow ``meta/episodes.jsonl``).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twinloop.errors import TwinloopError, as_array
from twinloop.io import atomic_write

OBS, ACTION, TIMESTAMP = "observation.state", "action", "timestamp"
FRAME, EPISODE, INDEX, TASK = "frame_index", "episode_index", "index", "task_index"
REWARD, DONE, SUCCESS, COST = "next.reward", "next.done", "next.success", "cost"
TWIN_QPOS, TWIN_QVEL, WORLD_QPOS, WORLD_QVEL = "twin.qpos", "twin.qvel", "world.qpos", "world.qvel"
#: refine.<name> columns and their types (from :class:`twinloop.control.TickInfo`)
REFINE_FIELDS: dict[str, type] = {"cost": float, "prior_cost": float, "iterations": int,
                                  "seconds": float, "fallback": bool, "n_unstable": int}
OPTIMIZER_INFO = "refine.optimizer_info"  # TickInfo.optimizer_info as JSON text
REQUIRED = (OBS, ACTION, TIMESTAMP, FRAME, EPISODE, INDEX, TASK, REWARD, DONE, SUCCESS, COST)

CODEBASE_VERSION = "v2.1"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
_LEROBOT_KEYS = ("fps", "robot_type", "chunks_size")

#: our fields -> column names in a twinloop dataset
TWINLOOP_COLUMNS = {"obs": OBS, "action": ACTION, "timestamp": TIMESTAMP, "episode_index": EPISODE,
                    "task_index": TASK, "qpos": TWIN_QPOS, "qvel": TWIN_QVEL, "world_qpos": WORLD_QPOS,
                    "world_qvel": WORLD_QVEL, "cost": COST, "success": SUCCESS}
#: default column names assumed by :func:`load_lerobot` (each used only if present, except obs/action)
LEROBOT_COLUMNS = {"obs": OBS, "action": ACTION, "timestamp": TIMESTAMP, "episode_index": EPISODE,
                   "task_index": TASK, "reward": REWARD, "success": SUCCESS}
FIELDS = ("obs", "action", "timestamp", "episode_index", "task_index", "qpos", "qvel",
          "world_qpos", "world_qvel", "cost", "reward", "success")




def _json_default(x):
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"{type(x).__name__} is not JSON serializable")


def _dumps(obj, what: str, indent: int | None = None) -> str:
    try:
        return json.dumps(obj, indent=indent, default=_json_default, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TwinloopError(f"{what} cannot be stored as JSON: {exc}") from exc


def _write_text(path: Path, text: str) -> None:
    with atomic_write(path) as tmp:
        tmp.write_text(text)


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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
        self._success: bool | None = None

    @classmethod
    def for_task(cls, task, episode_index: int, task_index: int = 0) -> EpisodeRecorder:
        """A recorder that splits ``twin_state`` with ``task.model``'s nq and nv."""
        return cls(episode_index, task_index, nq=task.model.nq, nv=task.model.nv)

    def __len__(self) -> int:
        return len(self._t)

    def add(self, timestamp: float, obs, action, *, twin_state=None, world_qpos=None,
            world_qvel=None, cost: float = math.nan, tick=None) -> None:
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
        """
        if self._success is not None:
            raise TwinloopError(f"episode {self.episode_index} is finished; start a new EpisodeRecorder")
        frame = len(self._t)
        t = float(timestamp)
        if not math.isfinite(t):
            raise TwinloopError(f"timestamp must be finite, got {timestamp!r} at frame {frame}")
        qpos, qvel = self._split_state(twin_state, frame)
        values = {OBS: obs, ACTION: action, TWIN_QPOS: qpos, TWIN_QVEL: qvel,
                  WORLD_QPOS: world_qpos, WORLD_QVEL: world_qvel}
        names = {OBS: "obs", ACTION: "action", TWIN_QPOS: "twin_state", TWIN_QVEL: "twin_state",
                 WORLD_QPOS: "world_qpos", WORLD_QVEL: "world_qvel"}
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
        try:
            c = math.nan if cost is None else float(cost)
        except (TypeError, ValueError) as exc:
            raise TwinloopError(f"cost must be a number, got {cost!r} at frame {frame}") from exc
        self._t.append(t)
        self._cost.append(c)
        for col, arr in checked.items():
            self._vec.setdefault(col, []).append(arr.copy())
        for k, v in refine.items():
            self._refine[k].append(v)
        self._optimizer_info.append(opt_info)

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
            return {"cost": math.nan, "prior_cost": math.nan, "iterations": 0, "seconds": math.nan,
                    "fallback": False, "n_unstable": 0}
        out = {}
        for k, typ in REFINE_FIELDS.items():
            if not hasattr(tick, k):
                raise TwinloopError(f"tick at frame {frame} has no field {k!r}; pass a twinloop.control.TickInfo")
            out[k] = typ(getattr(tick, k))
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
        for col in (TWIN_QPOS, TWIN_QVEL, WORLD_QPOS, WORLD_QVEL):
            if col in self._vec:
                cols[col] = _list_array(np.stack(self._vec[col]))
        for k, typ in REFINE_FIELDS.items():
            dtype = {float: np.float64, int: np.int64, bool: np.bool_}[typ]
            cols[f"refine.{k}"] = pa.array(np.asarray(self._refine[k], dtype))
        cols[OPTIMIZER_INFO] = pa.array(self._optimizer_info, pa.string())
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
            T dicts; empty for foreign data).
        task_index: index of the task.
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

    def __len__(self) -> int:
        return len(self.timestamps)


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
    return m[:, 0].astype(dtype)


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
        if OPTIMIZER_INFO in has:
            ref["optimizer_info"] = [json.loads(t) for t in table.column(OPTIMIZER_INFO).to_pylist()]
    return Episode(episode_index=episode_index, obs=vec("obs"), actions=vec("action"), timestamps=t,
                   qpos=vec("qpos"), qvel=vec("qvel"), world_qpos=vec("world_qpos"),
                   world_qvel=vec("world_qvel"), costs=costs, success=success, refine=ref,
                   task_index=task)


# -- dataset -----------------------------------------------------------------------------------


def _feature(typ: pa.DataType, n: int, names) -> dict:
    if pa.types.is_string(typ):  # LeRobot's text feature (no stats)
        return {"dtype": "string", "shape": [1], "names": None}
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        typ = typ.value_type
    else:
        n = 1
    dtype = "bool" if pa.types.is_boolean(typ) else str(typ.to_pandas_dtype().__name__)
    names = list(names) if names is not None and len(names) == n else None
    return {"dtype": dtype, "shape": [n], "names": names}


def _features(table: pa.Table, block: dict) -> dict:
    """LeRobot feature specs of an episode table (names from the ``twinloop`` block)."""
    names = {OBS: block.get("obs_names"), ACTION: block.get("action_names"),
             TWIN_QPOS: block.get("qpos_names"), TWIN_QVEL: block.get("qvel_names"),
             WORLD_QPOS: block.get("qpos_names"), WORLD_QVEL: block.get("qvel_names")}
    out = {}
    for f in table.schema:
        col = table.column(f.name)
        n = 1
        if pa.types.is_list(f.type) or pa.types.is_large_list(f.type) or pa.types.is_fixed_size_list(f.type):
            lengths = col.combine_chunks().value_lengths().to_numpy(zero_copy_only=False)
            n = int(lengths[0]) if len(lengths) else 0
        out[f.name] = _feature(f.type, n, names.get(f.name))
    return out


def _episode_stats(table: pa.Table, features: dict) -> dict:
    """LeRobot v2.1 per-episode stats (``nan``-aware; ``None`` where a value is all ``nan``)."""
    stats = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-nan columns (e.g. refine.cost)
        for name in features:
            if features[name]["dtype"] == "string":
                continue
            m = _matrix(table, name, "stats")
            fns = {"min": np.nanmin, "max": np.nanmax, "mean": np.nanmean, "std": np.nanstd}
            s = {k: [None if not math.isfinite(v) else float(v) for v in fn(m, axis=0)] for k, fn in fns.items()}
            s["count"] = [int(m.shape[0])]
            stats[name] = s
    return stats


class Dataset:
    """A folder of recorded episodes in LeRobot v2.1 layout (see the module docstring).

    Open an existing one with ``Dataset(root)``; make a new one with :meth:`create`. One
    process writes a dataset at a time.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        info_path = self.root / "meta" / "info.json"
        if not info_path.exists():
            raise TwinloopError(f"{self.root} is not a dataset (no meta/info.json); "
                                "make one with Dataset.create(root, info)")
        self._info = json.loads(info_path.read_text())
        self._episodes = {int(e["episode_index"]): e for e in _read_jsonl(self.root / "meta" / "episodes.jsonl")}
        self._stats = {int(e["episode_index"]): e for e in _read_jsonl(self.root / "meta" / "episodes_stats.jsonl")}

    @classmethod
    def create(cls, root: str | os.PathLike, info: Mapping, exist_ok: bool = False) -> Dataset:
        """Make an empty dataset at ``root``.

        Args:
            info: must hold ``fps`` (control ticks per second); may hold ``robot_type``,
                ``chunks_size`` and a ``twinloop`` dict. Every other key goes into the
                ``twinloop`` block too, e.g. ``task``, ``world``, ``seed``, ``controller``,
                ``obs_names``, ``action_names``, ``param_names``.
            exist_ok: open the dataset already at ``root`` instead of failing.
        """
        root = Path(root)
        if (root / "meta" / "info.json").exists():
            if exist_ok:
                return cls(root)
            raise TwinloopError(f"a dataset already exists at {root}; open it with Dataset(root)")
        if not isinstance(info, Mapping):
            raise TwinloopError(f"info must be a dict, got {type(info).__name__}")
        fps = info.get("fps")
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (math.isfinite(fps) and fps > 0):
            raise TwinloopError(f"info['fps'] must be a positive number (control ticks per second), got {fps!r}")
        block = dict(info.get("twinloop") or {})
        block.update({k: v for k, v in info.items() if k not in (*_LEROBOT_KEYS, "twinloop")})
        chunks = _index(info.get("chunks_size", CHUNKS_SIZE), "info['chunks_size']")
        if chunks < 1:
            raise TwinloopError("info['chunks_size'] must be >= 1")
        meta = {
            "codebase_version": CODEBASE_VERSION, "robot_type": info.get("robot_type", "twinloop"),
            "total_episodes": 0, "total_frames": 0, "total_tasks": 1, "total_videos": 0,
            "total_chunks": 0, "chunks_size": chunks, "fps": fps, "splits": {"train": "0:0"},
            "data_path": DATA_PATH, "video_path": None, "features": {}, "twinloop": block,
        }
        text = _dumps(meta, "info", indent=2)
        task = str(block.get("task", ""))
        _write_text(root / "meta" / "tasks.jsonl", _dumps({"task_index": 0, "task": task}, "task") + "\n")
        _write_text(root / "meta" / "episodes.jsonl", "")
        _write_text(root / "meta" / "episodes_stats.jsonl", "")
        _write_text(root / "meta" / "info.json", text)  # last: its presence marks a dataset
        return cls(root)

    @property
    def info(self) -> dict:
        """The contents of ``meta/info.json`` (do not mutate)."""
        return self._info

    @property
    def indices(self) -> list[int]:
        """Episode indices in the dataset, ascending."""
        return sorted(self._episodes)

    def __len__(self) -> int:
        return len(self._episodes)

    def path(self, episode_index: int) -> Path:
        chunk = episode_index // self._info["chunks_size"]
        return self.root / self._info["data_path"].format(episode_chunk=chunk, episode_index=episode_index)

    def write(self, episode: EpisodeRecorder | pa.Table) -> Path:
        """Add one episode (a recorder or its table); returns the Parquet file's path.

        The episode's columns must match the dataset's (set by its first episode).
        """
        table = episode.to_table() if isinstance(episode, EpisodeRecorder) else episode
        if not isinstance(table, pa.Table):
            raise TwinloopError(f"write takes an EpisodeRecorder or a pyarrow.Table, got {type(episode).__name__}")
        missing = [c for c in REQUIRED if c not in table.column_names]
        if missing:
            raise TwinloopError(f"episode table lacks column(s) {missing}")
        if table.num_rows == 0:
            raise TwinloopError("episode table has no rows")
        eps = np.unique(_scalar(table, EPISODE, "episode table", np.int64))
        if eps.size != 1:
            raise TwinloopError(f"an episode table must hold one episode_index, got {eps.tolist()}")
        ep = int(eps[0])
        if ep in self._episodes:
            raise TwinloopError(f"episode {ep} is already in {self.root}; episode indices must be unique")
        features = _features(table, self._info["twinloop"])
        old = self._info["features"]
        if old and old != features:
            diff = sorted(k for k in set(old) | set(features) if old.get(k) != features.get(k))
            raise TwinloopError(f"episode {ep} does not match the dataset's features; differing columns: {diff}")
        T = table.num_rows
        start = int(self._info["total_frames"])
        table = table.set_column(table.column_names.index(INDEX), INDEX, pa.array(np.arange(start, start + T, dtype=np.int64)))
        path = self.path(ep)
        with atomic_write(path) as tmp:
            pq.write_table(table, tmp)
        entry = {"episode_index": ep, "tasks": [str(self._info["twinloop"].get("task", ""))], "length": T,
                 "success": bool(_scalar(table, SUCCESS, "episode table", np.bool_).any())}
        episodes = {**self._episodes, ep: entry}
        stats = {**self._stats, ep: {"episode_index": ep, "stats": _episode_stats(table, features)}}
        info = {**self._info, "features": features, "total_episodes": len(episodes),
                "total_frames": start + T, "splits": {"train": f"0:{len(episodes)}"},
                "total_chunks": len({i // self._info["chunks_size"] for i in episodes})}
        _write_text(self.root / "meta" / "episodes_stats.jsonl",
                    "".join(_dumps(stats[i], "stats") + "\n" for i in sorted(stats)))
        _write_text(self.root / "meta" / "episodes.jsonl",
                    "".join(_dumps(episodes[i], "episode") + "\n" for i in sorted(episodes)))
        _write_text(self.root / "meta" / "info.json", _dumps(info, "info", indent=2))
        self._episodes, self._stats, self._info = episodes, stats, info
        return path

    def read(self, episode_index: int) -> Episode:
        """The episode with this index."""
        if episode_index not in self._episodes:
            raise TwinloopError(f"no episode {episode_index} in {self.root} (has {len(self)}: {self.indices[:10]}...)")
        path = self.path(episode_index)
        table = pq.read_table(path)
        return _episode_from_table(table, TWINLOOP_COLUMNS, str(path), episode_index=episode_index,
                                   refine=True)

    def episodes(self) -> list[Episode]:
        """All episodes, by ascending index."""
        return [self.read(i) for i in self.indices]

    def split(self, holdout_fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
        """Split episode indices into ``(train, holdout)`` (never splits an episode).

        ``round(holdout_fraction * len)`` episodes are held out (at least one if the fraction
        is positive), chosen by a seeded permutation; both lists are sorted.
        """
        if not 0 <= holdout_fraction < 1:
            raise TwinloopError(f"holdout_fraction must be in [0, 1), got {holdout_fraction}")
        idx = np.array(self.indices, dtype=np.int64)
        n_hold = int(round(holdout_fraction * idx.size))
        if holdout_fraction > 0:
            n_hold = max(n_hold, 1)
        if n_hold >= idx.size and idx.size:
            raise TwinloopError(f"holdout_fraction {holdout_fraction} leaves no training episodes of {idx.size}")
        perm = np.random.default_rng(seed).permutation(idx)
        return sorted(int(i) for i in perm[n_hold:]), sorted(int(i) for i in perm[:n_hold])


# -- foreign LeRobot data ----------------------------------------------------------------------


def _parquet_files(source) -> list[Path]:
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if p.is_dir():
            files = sorted((p / "data").rglob("*.parquet")) if (p / "data").is_dir() else sorted(p.rglob("*.parquet"))
            files = [f for f in files if not f.name.startswith(".")]  # temp files of atomic writes
            if not files:
                raise TwinloopError(f"no .parquet files under {p}")
            return files
        paths = [p]
    elif isinstance(source, Sequence):
        paths = [Path(s) for s in source]
        if not paths:
            raise TwinloopError("no parquet files given")
    else:
        raise TwinloopError(f"source must be a folder, a parquet file or a list of them, got {type(source).__name__}")
    for f in paths:
        if not f.is_file():
            raise TwinloopError(f"no such parquet file: {f}")
    return paths


def load_lerobot(source, column_map: Mapping[str, str | None] | None = None, *,
                 fps: float | None = None) -> list[Episode]:
    """Episodes from LeRobot-format Parquet that twinloop did not write.

    Args:
        source: a dataset folder (reads ``data/**/*.parquet``), a Parquet file, or a list.
        column_map: our field -> their column name, over :data:`LEROBOT_COLUMNS`'s defaults
            (``None`` removes a default). Fields: ``obs``, ``action`` (required), ``timestamp``,
            ``episode_index``, ``task_index``, ``qpos``, ``qvel``, ``world_qpos``,
            ``world_qvel``, ``cost``, ``reward`` (cost = -reward), ``success``. A column you
            map must exist; a default one is used only if present.
        fps: frames per second, used for timestamps when there is no timestamp column.

    Returns:
        Episodes by ascending ``episode_index`` (files without one are an episode each, in
        file order). Frames keep their stored order.
    """
    user = dict(column_map or {})
    unknown = sorted(set(user) - set(FIELDS))
    if unknown:
        raise TwinloopError(f"unknown field(s) {unknown} in column_map; fields are: {', '.join(FIELDS)}")
    for k, v in user.items():
        if v is not None and not isinstance(v, str):
            raise TwinloopError(f"column_map[{k!r}] must be a column name (str), got {v!r}")
    cols = {**LEROBOT_COLUMNS, **user}
    cols = {k: v for k, v in cols.items() if v is not None}
    for f in ("obs", "action"):
        if f not in cols:
            raise TwinloopError(f"column_map must name the {f!r} column")
    groups: dict[int, list[pa.Table]] = {}
    where: dict[int, str] = {}
    for path in _parquet_files(source):
        have = set(pq.read_schema(path).names)
        for f, c in cols.items():
            if (f in user or f in ("obs", "action")) and c not in have:
                raise TwinloopError(f"{path}: column {c!r} (mapped from {f!r}) not found; "
                                    f"columns are: {', '.join(sorted(have))}")
        table = pq.read_table(path, columns=sorted({c for c in cols.values() if c in have}))
        if cols.get("episode_index") in have:
            ep_col = _scalar(table, cols["episode_index"], str(path), np.int64)
            for ep in dict.fromkeys(ep_col.tolist()):
                groups.setdefault(ep, []).append(table.filter(pa.array(ep_col == ep)))
                where.setdefault(ep, str(path))
        else:
            ep = max(groups, default=-1) + 1
            groups[ep] = [table]
            where[ep] = str(path)
    return [_episode_from_table(pa.concat_tables(groups[ep]), cols, where[ep], episode_index=ep, fps=fps)
            for ep in sorted(groups)]
