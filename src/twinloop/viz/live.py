"""The live view: a page in the browser (served by viser) that shows a run as it happens.

Two halves, in two processes:

- :class:`ViewHook`, a tick hook on the control thread, keeps what each tick did (the state,
  the candidates' traced points, which plan was sent and why, the costs, the gap) in a
  :class:`TickSnapshot` and hands it over by replacing one reference: it never waits and
  never queues, so a slow page cannot delay a tick.
- :class:`LiveView` starts the page's process (:mod:`twinloop.viz.page`: the viser server and
  the drawing, at a lower scheduling priority) and a thread that sends it the latest snapshot
  whenever it has drawn the one before (ticks published meanwhile are dropped; each snapshot
  carries only the history entries the page has not had). The page draws the scene's bodies at
  the tick's state, the candidate rollouts as ghost traces (the plan sent in red, the base
  proposal in green, the other candidates faint blue), the cost and success over time, the gap
  monitor's score against its threshold, and the tick's verdict. The page's planner controls
  come back over the same connection and are applied at the next tick (:mod:`twinloop.viz.tuning`).
"""

from __future__ import annotations

import pickle
import secrets
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, fields, replace
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

import numpy as np

from twinloop.control.parts import TickHook
from twinloop.errors import TwinloopError, number
from twinloop.plugins import USER_MODULE
from twinloop.viz.frames import FRAME_CAP
from twinloop.viz.scene import load_viser
from twinloop.viz.tuning import Tuning, planner_settings

#: points kept along each candidate's rollout
TRACE_POINTS = 11
#: seconds the page process may take to start serving (it imports twinloop, viser and MuJoCo)
PAGE_START_S = 120.0


@dataclass
class History:
    """One episode's per-tick values, appended on the control thread (read on the drawing one)."""

    t: list = field(default_factory=list)  # s, episode time
    cost: list = field(default_factory=list)  # the sent plan's predicted cost
    prior_cost: list = field(default_factory=list)  # the base proposal's
    gap: list = field(default_factory=list)  # the gap monitor's score
    qpos: list = field(default_factory=list)  # (nq,) the state's positions, for success


@dataclass
class TickSnapshot:
    """What the page draws of one tick (every array a copy: the twin reuses its buffers).

    Attributes:
        episode: the controller and the episode's seed.
        tick: control ticks taken in this episode.
        qpos: ``(nq,)`` positions of the state the tick planned from.
        roll_qpos, roll_sensors: ``(K, L, nq)``, ``(K, L, nsensordata)`` the last iteration's
            candidate rollouts (first parameter particle) at ``L`` points along the horizon,
            or ``None`` (no refinement this tick).
        costs: ``(K,)`` their costs.
        chosen: the row of the plan sent among them (``None``: not among them), base: the
            base proposal's row (``None``: no proposal).
        verdict: which plan was sent and why.
        history: the episode's values so far.
        threshold: the gap monitor's threshold (``nan``: no monitor).
    """

    episode: str
    tick: int
    qpos: np.ndarray
    roll_qpos: np.ndarray | None
    roll_sensors: np.ndarray | None
    costs: np.ndarray | None
    chosen: int | None
    base: int | None
    verdict: str
    history: History
    threshold: float = float("nan")
    history_from: int = 0  # on the way to the page: the index of ``history``'s first entry
    tuning: str = ""  # on the way to the page: the last refused planner setting


def _verdict(tick) -> str:
    if tick.fallback:
        return f"fallback: {tick.reason}"
    if tick.accept:
        return tick.accept
    return "refined" if tick.result is not None else "base proposal alone"


class ViewHook(TickHook):
    """Publishes each tick of a controller to a :class:`LiveView` (and applies the page's
    planner settings to a refining controller at the start of each tick)."""

    def __init__(self, view: LiveView, label: str):
        self.view, self.label = view, label
        self.tuned: list[dict] = []

    def bind(self, controller) -> None:
        self.controller = controller
        self.tunes = controller.refine_enabled
        watch = next((h for h in controller.hooks if hasattr(h, "monitor")), None)
        self.threshold = float(watch.monitor.threshold) if watch is not None else float("nan")
        if self.tunes:
            self.view.show_settings(planner_settings(controller.refiner))
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        self.episode = f"{self.label}, seed {seed}"
        self.history, self.k, self.tuned = History(), 0, []
        if self.tunes and seed is not None:
            self.view.tuning.apply(self.controller, 0, self.tuned, episode=True)

    def begin(self, state: np.ndarray) -> str:
        if self.tunes and self.k:
            n = len(self.tuned)
            self.view.tuning.apply(self.controller, self.k, self.tuned)
            if len(self.tuned) > n:  # another optimizer has other fields: the controls follow
                self.view.show_settings(planner_settings(self.controller.refiner))
        return ""

    def sent(self, state: np.ndarray, tick) -> None:
        task = self.controller.task
        q = np.array(state[: task.model.nq], dtype=float)
        h = self.history
        h.t.append(self.k * task.control_period)
        h.cost.append(float(tick.cost))
        h.prior_cost.append(float(tick.prior_cost))
        h.gap.append(float(tick.gap))
        h.qpos.append(q)
        self.k += 1
        rq = rs = costs = chosen = base = None
        res = tick.result
        if res is not None and res.rollouts is not None and res.costs is not None:
            r = res.rollouts
            L = r.qpos.shape[2]
            idx = np.unique(np.linspace(0, L - 1, min(L, TRACE_POINTS)).round().astype(int))
            rq, rs = r.qpos[0][:, idx], r.sensordata[0][:, idx]
            costs = np.array(res.costs, dtype=float)
            base = 1 if np.isfinite(res.prior_cost) else None
            if tick.accept.startswith("base") and base is not None:
                chosen = base
            elif np.isfinite(costs).any():
                chosen = int(np.argmin(np.where(np.isfinite(costs), costs, np.inf)))
        self.view.publish(TickSnapshot(self.episode, self.k, q, rq, rs, costs, chosen, base, _verdict(tick),
                                       self.history, self.threshold))

    def report(self) -> dict:
        """The planner settings changed from the page this episode (tick, setting, value)."""
        return {"tuned": list(self.tuned)} if self.tunes else {}


def check_port(host: str, port: int) -> None:
    """Refuse a port another program listens on (viser would move to the next free port, and the
    page would not be where the user looks)."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise TwinloopError(f"the live view cannot listen on {host}:{port}: {exc.strerror or exc}; pass another "
                                "--set experiment.view_port=PORT (0: any free port)") from exc


def start_page() -> tuple[subprocess.Popen, Connection]:
    """Start ``python -m twinloop.viz.page`` and connect to it: ``(process, connection)``. The two
    authenticate with a random key handed over on the page process's standard input."""
    key = secrets.token_bytes(32)
    with socket.create_server(("127.0.0.1", 0)) as srv:
        srv.settimeout(0.25)
        proc = subprocess.Popen([sys.executable, "-m", "twinloop.viz.page", str(srv.getsockname()[1])],
                                stdin=subprocess.PIPE)
        proc.stdin.write(key.hex().encode() + b"\n")
        proc.stdin.close()
        deadline = time.monotonic() + PAGE_START_S
        while True:
            try:
                sock, _ = srv.accept()
                break
            except TimeoutError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    raise TwinloopError(f"the live view's page process did not start (exit code {proc.poll()})") from None
    sock.settimeout(None)
    conn = Connection(sock.detach())
    deliver_challenge(conn, key)
    answer_challenge(conn, key)
    return proc, conn


def _for_page(task) -> tuple[str | bytes, str | None]:
    """``task`` as the page process takes it: a name, or the pickled task and, for a task class
    loaded from a file (``file.py:Class``), that file (the page process loads it first)."""
    if isinstance(task, str):
        return task, None
    try:
        blob = pickle.dumps(task)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TwinloopError(f"the live view's page process cannot take this task ({exc}): pass a registered "
                            "task or its name") from exc
    module = type(task).__module__
    return blob, getattr(sys.modules[module], "__file__", None) if module.startswith(USER_MODULE) else None


class LiveView:
    """A viser server, in a process of its own, showing ``task``'s scene and the ticks its hooks
    publish.

    Args:
        task: the task whose scene is drawn (a :class:`~twinloop.tasks.Task`, pickled into the
            page process, or a registered task's name).
        host, port: where the page is served (``port=0``: any free port; :attr:`url` says).
        max_rate: most page updates per second.
        nice: how much lower the page process's scheduling priority is than this process's
            (0: the same); the page's drawing then yields the cores to control when they are busy.
        max_fps: most frames a second the page draws in the browser (``None``: viser's own,
            as many as the browser can while updates arrive; :mod:`twinloop.viz.frames`).
    """

    def __init__(self, task, host: str = "127.0.0.1", port: int = 8080, max_rate: float = 30.0, nice: int = 10,
                 max_fps: float | None = FRAME_CAP):
        load_viser()  # a missing viser is said here, not in the page process
        port = number(port, "view_port", low=0, high=65535, integer=True)
        rate = number(max_rate, "max_rate (Hz)", low=0, low_open=True)
        fps = None if max_fps is None else number(max_fps, "max_fps (frames/s)", low=0, low_open=True)
        check_port(host, port)
        self.host, self.tuning = host, Tuning()
        start = (*_for_page(task), host, port, rate, int(nice), fps)
        # a fresh interpreter, not a fork (the twin runs threads) nor multiprocessing's spawn (which
        # re-runs the caller's main script, so a script without a main guard would start twice)
        self._lock = threading.Lock()  # the connection's sends: the sending thread's and show_settings'
        self.process, self._conn = start_page()
        self._send("start", start)
        self.port, self.frame_cap_missing = self._wait_ready()
        self._latest: TickSnapshot | None = None
        self._drawn: TickSnapshot | None = None
        self._sent: dict[int, TickSnapshot] = {}
        self._history_sent: tuple[str | None, int] = (None, 0)
        self._wake, self._free, self._stop = threading.Event(), threading.Event(), threading.Event()
        self._free.set()
        self.published = self.drawn = 0
        self.draw_times: list[float] = []
        self.error = ""
        self._threads = [threading.Thread(target=f, name=f"twinloop-view-{f.__name__.strip('_')}", daemon=True)
                         for f in (self._send_loop, self._receive_loop)]
        for t in self._threads:
            t.start()

    def _wait_ready(self) -> tuple[int, str]:
        deadline = time.monotonic() + PAGE_START_S
        while not self._conn.poll(0.25):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise TwinloopError(f"the live view's page process ended before serving (exit code "
                                    f"{self.process.poll()})")
        try:
            kind, payload = self._conn.recv()
        except EOFError:
            kind, payload = "failed", f"its process ended (exit code {self.process.poll()})"
        if kind != "ready":
            self.process.wait(timeout=5)
            raise TwinloopError(f"the live view cannot start: {payload}")
        port, why_not = payload
        return int(port), why_not

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def hook(self, label: str) -> ViewHook:
        """A tick hook publishing a controller's ticks here, its episodes named ``label``."""
        return ViewHook(self, label)

    def show_settings(self, values: dict) -> None:
        self._send("settings", values)

    def publish(self, snap: TickSnapshot) -> None:
        """Hand a tick to the page (replaces any not sent yet; never waits)."""
        self._latest = snap
        self.published += 1
        self._wake.set()

    def _send(self, kind: str, payload, *rest) -> bool:
        try:
            with self._lock:
                self._conn.send((kind, payload, *rest))
            return True
        except (OSError, ValueError):  # the page process is gone: control goes on without it
            return False

    def _send_loop(self) -> None:
        """Send the latest tick whenever the page has drawn the one before (one tick in flight)."""
        seq = 0
        while not self._stop.is_set():
            if not (self._wake.wait(0.2) and self._free.wait(0.2)):
                continue
            self._wake.clear()
            snap = self._latest
            if snap is None or self._stop.is_set():
                continue
            seq += 1
            self._sent = {seq: snap}
            self._free.clear()
            if not self._send("tick", self._wire(snap), seq):
                return

    def _wire(self, snap: TickSnapshot) -> TickSnapshot:
        """``snap`` carrying only the history entries the page has not had yet."""
        episode, start = self._history_sent
        start = start if episode == snap.episode else 0
        h = snap.history
        n = min(len(h.t), len(h.cost), len(h.prior_cost), len(h.gap), len(h.qpos))
        start = min(start, n)
        self._history_sent = (snap.episode, n)
        tail = History(*(getattr(h, f.name)[start:n] for f in fields(History)))
        return replace(snap, history=tail, history_from=start, tuning=self.tuning.message)

    def _receive_loop(self) -> None:
        while True:
            try:
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                self._free.set()
                return
            if kind == "drawn":
                self._drawn = self._sent.get(payload, self._drawn)
                self.drawn += 1
                self.draw_times.append(time.perf_counter())
                self._free.set()
            elif kind == "tune":
                try:
                    self.tuning.request(*payload)
                except TwinloopError as exc:
                    self.tuning.message = str(exc)
            elif kind == "error":
                self.error = payload

    def update_rate(self) -> float:
        """Page updates per second over the page's updates so far (``nan``: < 2)."""
        t = self.draw_times
        return (len(t) - 1) / (t[-1] - t[0]) if len(t) >= 2 and t[-1] > t[0] else float("nan")

    def close(self) -> None:
        """Stop drawing and serving (the page shows that it lost the server)."""
        self._stop.set()
        self._wake.set()
        self._send("stop", None)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        self._conn.close()
        for t in self._threads:
            t.join(timeout=5)


def open_view(task, host: str, port: int, max_rate: float = 30.0, nice: int = 10,
              max_fps: float | None = FRAME_CAP) -> LiveView:
    """A :class:`LiveView` of ``task`` on ``host:port`` (at most ``max_rate`` page updates a
    second, its process ``nice`` steps below this one's priority, its page drawing at most
    ``max_fps`` frames a second); a :class:`TwinloopError` names a port in use or a missing viser."""
    try:
        return LiveView(task, host, port, max_rate, nice, max_fps)
    except OSError as exc:
        raise TwinloopError(f"the live view cannot start on {host}:{port}: {exc}") from exc
