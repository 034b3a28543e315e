"""The live view's page process: the viser server and the drawing, apart from the control loop.

:class:`~twinloop.viz.live.LiveView` starts :func:`serve` in a process of its own (at a lower
scheduling priority), so that building the page's messages and serving them never holds the
control process's interpreter lock nor competes with its threads at equal priority. The two
speak over one connection (a local socket, authenticated):

- to the page: ``("start", args)`` once (:func:`serve`'s arguments after the connection),
  then ``("tick", snapshot, seq)`` (a :class:`~twinloop.viz.live.TickSnapshot` whose
  history holds only the entries not sent before, from index ``history_from``),
  ``("settings", values)``, ``("stop", None)``;
- from the page: ``("ready", (port, why_not))`` (``why_not``: why the page's frame cap could
  not be applied, else empty) or ``("failed", message)`` once, then ``("drawn", seq)``
  after each tick drawn (the control side sends the next tick only then: ticks published
  meanwhile are dropped there, never queued), ``("tune", (name, value))`` for a planner control
  moved on the page, and ``("error", message)`` for a drawing error.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
from multiprocessing.connection import Client
from pathlib import Path

from twinloop import plugins
from twinloop.tasks import make_task
from twinloop.viz import panels
from twinloop.viz.frames import FRAME_CAP, Served
from twinloop.viz.scene import SceneMirror, light_plainly, load_viser, look_from_above

#: seconds between redraws of the plots and the status line (the scene follows every tick drawn)
TEXT_PERIOD = 0.25


class PageTuning:
    """The page's side of :class:`~twinloop.viz.tuning.Tuning`: a control moved on the page is
    sent to the control process, which applies it at its next tick."""

    def __init__(self, send):
        self.send = send
        self.message = ""  # the control side's last refusal, carried by each tick

    def request(self, name: str, value) -> None:
        self.send("tune", (name, value))


class Page:
    """The viser server of one task's live view, drawing the ticks it receives; its page draws
    at most ``max_fps`` frames a second (``None``: as many as viser's page does)."""

    def __init__(self, conn, task, host: str, port: int, max_rate: float, max_fps: float | None = FRAME_CAP):
        viser = load_viser()
        self.conn, self.task = conn, task
        self.lock = threading.Lock()  # the page's controls send from viser's thread
        self.served = Served(viser, max_fps, host=host, port=port, label=f"twinloop {task.name}", verbose=False)
        self.server = self.served.server
        self.tuning = PageTuning(self.send)
        self.mirror = SceneMirror(self.server.scene, task.model)
        light_plainly(self.server)
        look_from_above(self.server, task.model)
        self.panel = panels.TickPanel(self.server, task, self.tuning)
        self.min_period = 1.0 / max_rate
        self.history = None  # the episode's history, rebuilt from the ticks' new entries
        self.episode = None
        self.stale = None  # a tick whose plots and status line are not drawn yet
        self.text_at, self.text_episode = 0.0, None

    def send(self, kind: str, payload) -> None:
        with self.lock:
            self.conn.send((kind, payload))

    def run(self) -> None:
        """Draw ticks as they come until told to stop or the control process goes away."""
        while True:
            wait = max(0.0, self.text_at + TEXT_PERIOD - time.monotonic()) if self.stale is not None else 1.0
            if not self.conn.poll(wait):
                if self.stale is not None:  # no new tick for a while: bring the plots up to date
                    self._draw(self.stale, scene=False)
                continue
            kind, payload, *seq = self.conn.recv()
            if kind == "stop":
                return
            if kind == "settings":
                self.panel.show_settings(payload)
            elif kind == "tick":
                t0 = time.monotonic()
                self._draw(self._merge(payload), scene=True)
                time.sleep(max(0.0, self.min_period - (time.monotonic() - t0)))
                self.send("drawn", seq[0])

    def _merge(self, snap):
        """``snap`` with its episode's whole history (it carries only the entries not sent yet)."""
        if snap.episode != self.episode:
            self.episode, self.history = snap.episode, type(snap.history)()
        for name, values in vars(snap.history).items():
            mine = getattr(self.history, name)
            del mine[snap.history_from:]
            mine.extend(values)
        snap.history = self.history
        self.tuning.message = snap.tuning
        return snap

    def _draw(self, snap, scene: bool) -> None:
        now = time.monotonic()
        text = not scene or now - self.text_at >= TEXT_PERIOD or snap.episode != self.text_episode
        try:
            with self.server.atomic():
                if scene:
                    self.mirror.update(snap.qpos)
                    self.panel.draw(snap, self.mirror, text=text)
                else:
                    self.panel.draw_text(snap)
        except Exception as exc:  # noqa: BLE001 - a drawing error is reported, never raised into control
            self.send("error", f"{type(exc).__name__}: {exc}")
        if text:
            self.text_at, self.text_episode, self.stale = now, snap.episode, None
        else:
            self.stale = snap


def serve(conn, task, source: str | None, host: str, port: int, max_rate: float, nice: int,
          max_fps: float | None = FRAME_CAP) -> None:
    """The page process's main: serve ``task``'s live view on ``host:port`` (its page drawing at
    most ``max_fps`` frames a second) and draw the ticks received over ``conn``, at scheduling
    priority ``nice`` (added to the current).
    ``task`` is a task's name or the pickled task; ``source``, the file its class was loaded from
    (``None``: an importable module)."""
    if nice:
        try:
            os.nice(nice)
        except OSError:  # not allowed here: the page runs at the control process's priority
            pass
    try:
        if source is not None:  # the task's class comes from a file: load it as the run did
            plugins.module_from_file(Path(source), "task")
        task = make_task(task) if isinstance(task, str) else pickle.loads(task)
        page = Page(conn, task, host, port, max_rate, max_fps)
    except Exception as exc:  # noqa: BLE001 - reported to the control process, which raises it
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", (page.server.get_port(), page.served.why_not)))
    try:
        page.run()
    except (EOFError, OSError):  # the control process went away
        pass
    finally:
        page.served.stop()


def main() -> None:
    """``python -m twinloop.viz.page PORT`` (the key on standard input): connect to the control
    process listening on ``127.0.0.1:PORT`` and serve the page it asks for."""
    key = bytes.fromhex(sys.stdin.readline().strip())
    conn = Client(("127.0.0.1", int(sys.argv[1])), authkey=key)
    kind, args = conn.recv()
    if kind == "start":
        serve(conn, *args)


if __name__ == "__main__":
    main()
