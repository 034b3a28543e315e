"""A recorded dataset in the live view's page: scrub through an episode's ticks, the world's
states drawn solid and the twin's open-loop replay of the same actions drawn translucent over
them, so the gap is where the two part (``twinloop view DATASET``).

The twin's replay starts from the episode's first recorded state (the world's true state when
the dataset has it, else the twin state estimated from the observation) and applies the
recorded actions, each held for its control tick, at the task's nominal parameters and scene
timestep: what the twin predicts without ever seeing the world again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from twinloop.data.dataset import Dataset
from twinloop.data.episodes import check_recorded_on
from twinloop.errors import TwinloopError
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.viz.live import check_port
from twinloop.viz.scene import SceneMirror, light_plainly, load_viser, look_from_above

#: opacity of the twin's replay over the world's states
TWIN_OPACITY = 0.4


def open_dataset(root: str | Path, task: str | None = None):
    """``(dataset, task)``: the dataset at ``root`` and the task its episodes were recorded on
    (``task``, when given, must be that one; a dataset that names none needs it)."""
    if not Path(root).is_dir():
        raise TwinloopError(f"no dataset folder at {root}")
    ds = Dataset(root)
    if not len(ds):
        raise TwinloopError(f"dataset {root} holds no episodes")
    recorded = ds.info.get("twinloop", {}).get("task")
    name = task or recorded
    if name is None:
        raise TwinloopError(f"dataset {root} does not say which task it was recorded on: pass --task")
    t = make_task(name)
    if recorded is not None and task is not None and recorded != t.name:
        raise TwinloopError(f"dataset {root} was recorded on task {recorded!r}, not {t.name!r}: view it with "
                            f"--task {recorded} (or without --task)")
    check_recorded_on(t, [ds.read(ds.indices[0], verify=False)], f"dataset {root}")
    return ds, t


def world_qpos(ep) -> np.ndarray:
    """``(T, nq)`` the world's positions of an episode (its true state, else the twin's estimate)."""
    q = ep.world_qpos if ep.world_qpos is not None else ep.qpos
    if q is None:
        raise TwinloopError(f"episode {ep.episode_index} records no positions (world.qpos or twin.qpos)")
    return np.asarray(q, dtype=float)


def twin_replay(task, ep, twin=None) -> np.ndarray:
    """``(T, nq)`` the twin's positions at each recorded frame, replaying the episode's actions
    open loop from its first state (non-finite where the replay went unstable)."""
    m = task.model
    q = world_qpos(ep)
    v = ep.world_qvel if ep.world_qvel is not None else ep.qvel
    v = np.zeros((len(q), m.nv)) if v is None else np.asarray(v, dtype=float)
    twin = twin or make_twin("mujoco", m, task.param_space())
    substeps = max(1, int(round(task.control_period / twin.dt)))
    start = np.zeros(task.nstate)
    start[: m.nq + m.nv] = np.concatenate([q[0], v[0]])
    actions = np.asarray(ep.actions, dtype=float)[: len(q) - 1]
    if not len(actions):
        return q[:1].copy()
    ctrl = np.repeat(actions, substeps, axis=0)[None]  # (1, T*substeps, nu)
    r = twin.rollout_many(start[None], ctrl, None, sensors=False)
    out = np.asarray(r.qpos[0, 0, ::substeps], dtype=float)
    if not r.ok[0, 0]:
        out[~np.isfinite(out).all(axis=1)] = np.nan
    return out[: len(q)]


class ReplayView:
    """A viser page replaying ``dataset`` (episodes of ``task``) with a tick slider, an episode
    choice, play/pause, and the gap between the world's states and the twin's replay."""

    def __init__(self, dataset: Dataset, task, host: str = "127.0.0.1", port: int = 8080):
        viser = load_viser()
        check_port(host, port)
        self.dataset, self.task, self.host = dataset, task, host
        self.server = viser.ViserServer(host=host, port=port, label=f"twinloop replay: {task.name}", verbose=False)
        self.world = SceneMirror(self.server.scene, task.model, "/world")
        self.twin = SceneMirror(self.server.scene, task.model, "/twin", opacity=TWIN_OPACITY)
        light_plainly(self.server)
        look_from_above(self.server, task.model)
        self._twin_engine = make_twin("mujoco", task.model, task.param_space())
        gui = self.server.gui
        gui.add_markdown(f"**{Path(dataset.root).name}**: {len(dataset)} episodes of {task.name}. Solid: the world's "
                         f"recorded states; translucent: the twin replaying the same actions open loop.")
        self.episode = gui.add_dropdown("episode", tuple(str(i) for i in dataset.indices))
        self.tick = gui.add_slider("tick", min=0, max=1, step=1, initial_value=0)
        self.play = gui.add_checkbox("play", False)
        self.status = gui.add_markdown("")
        self.gap_plot = gui.add_uplot(
            (np.zeros(0),) * 2, ({"label": "t (s)"}, {"label": "|world - twin| qpos (m, rad)", "stroke": "rgb(120,60,200)",
                                                       "width": 2}),
            title="gap: world vs twin replay over t (s)", aspect=2.0, scales={"x": {"time": False}})
        self.episode.on_update(lambda _e: self.load(int(self.episode.value)))
        self.tick.on_update(lambda _e: self.show(int(self.tick.value)))
        self._stop = threading.Event()
        self.load(dataset.indices[0])
        self._thread = threading.Thread(target=self._player, name="twinloop-replay", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.get_port()}"

    def load(self, index: int) -> None:
        """Show episode ``index`` from its first tick."""
        self.ep = self.dataset.read(index)
        self.q_world = world_qpos(self.ep)
        self.q_twin = twin_replay(self.task, self.ep, self._twin_engine)
        self.gap = np.linalg.norm(self.q_world - self.q_twin, axis=1)
        t = np.asarray(self.ep.timestamps, dtype=float)[: len(self.gap)]
        self.gap_plot.data = (t, self.gap)
        self.tick.max = max(len(self.q_world) - 1, 1)
        self.tick.value = 0
        self.show(0)

    def show(self, k: int) -> None:
        """Draw tick ``k`` of the loaded episode."""
        k = int(np.clip(k, 0, len(self.q_world) - 1))
        ep = self.ep
        with self.server.atomic():
            self.world.update(self.q_world[k])
            if np.isfinite(self.q_twin[k]).all():
                self.twin.update(self.q_twin[k])
        accept = ep.refine.get("accept")
        cost = "" if ep.costs is None else f" · cost {ep.costs[k]:.4g}"
        self.status.content = (f"episode {ep.episode_index} · tick {k} ({ep.timestamps[k]:.2f} s){cost} · "
                               f"gap {self.gap[k]:.3g}  \naction {np.round(ep.actions[k], 3).tolist()}"
                               + (f"  \n**sent:** {accept[k]}" if accept is not None and accept[k] else "")
                               + (f"  \noutcome: {'success' if ep.success else 'failure'}" if ep.success is not None
                                  else ""))

    def _player(self) -> None:
        while not self._stop.is_set():
            if self.play.value:
                nxt = int(self.tick.value) + 1
                self.tick.value = nxt if nxt <= self.tick.max else 0
                self.show(int(self.tick.value))
            self._stop.wait(self.task.control_period)

    def serve(self, seconds: float | None = None) -> None:
        """Keep serving until Ctrl-C (or ``seconds``)."""
        end = None if seconds is None else time.monotonic() + seconds
        try:
            while end is None or time.monotonic() < end:
                time.sleep(0.1 if end is None else min(0.1, max(end - time.monotonic(), 0)))
        except KeyboardInterrupt:
            pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.server.stop()
