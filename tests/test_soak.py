"""Soak: a served world and its client run 10,000 ticks through injected delays, dropped
replies and a server restart; every tick the client recorded is in the dataset, which
`twinloop dataset check` verifies.

Faults are injected on the server, seeded: a *delay* answers a step late but within the
client's timeout (nothing is lost, nothing to recover); a *dropped reply* is sent after the
client has given up (the client declares the world lost); a *restart* stops the server and
binds a new one, with a fresh world, on the same port after the client's timeout. After a
loss the client reconnects and starts the next episode; the cut episode's frames are kept.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from twinloop.cli import app
from twinloop.data import Dataset, check, recorded_on
from twinloop.run.experiment import run_episodes
from twinloop.worlds import SimWorld

zmq = pytest.importorskip("zmq")
from twinloop.worlds.remote import RemoteWorld, WorldLost, WorldServer  # noqa: E402

TICKS, MAX_TICKS, TIMEOUT = 10_000, 100, 0.5
P_DELAY, P_DROP, RESTART_AT = 0.01, 0.0006, 5_000


class FaultyServer(WorldServer):
    """A world server that answers some steps late, some too late, and restarts once."""

    def __init__(self, world, faults: dict, rng: np.random.Generator, **kw):
        super().__init__(world, **kw)
        self.faults, self.rng = faults, rng

    def handle(self, frames):
        reply = super().handle(frames)
        if json.loads(frames[0]).get("op") != "step":
            return reply
        self.faults["steps"] += 1
        u = self.rng.random()
        if self.faults["steps"] == RESTART_AT:
            self.faults["restart"] += 1
            self.stop()  # this reply still goes out; the next request finds no server
        elif u < P_DROP:
            self.faults["drop"] += 1
            time.sleep(2 * TIMEOUT)  # the client has given up: this reply is lost
        elif u < P_DROP + P_DELAY:
            self.faults["delay"] += 1
            time.sleep(0.02)  # well within the client's timeout
        return reply


def _serve(task, port_box: list, faults: dict, done: threading.Event) -> None:
    rng = np.random.default_rng(7)
    port = 0
    while not done.is_set():
        server = FaultyServer(SimWorld(task), faults, rng, port=port)
        port = int(server.address.rsplit(":", 1)[1])
        port_box.append(port)
        server.serve()
        server.close()
        if not done.is_set():
            time.sleep(2 * TIMEOUT)  # down for longer than the client waits


class Excite:
    """A cheap seeded controller (the task's excitation policy): the soak tests the transport
    and the recording, not the planner."""

    n_fallbacks, last = 0, None

    def __init__(self, task):
        self.task, self.policy, self.k = task, None, 0

    def reset(self, seed):
        self.policy, self.k = self.task.excitation(seed), 0

    def act(self, obs, info=None):
        self.k += 1
        return self.policy(obs, self.k - 1)

    def stop(self):
        pass


def _reconnect(world: RemoteWorld) -> None:
    for _ in range(100):
        try:
            world.reconnect()
            return
        except WorldLost:
            time.sleep(0.05)
    raise AssertionError("the world server did not come back")


def test_ten_thousand_ticks_through_delays_drops_and_a_restart_lose_nothing(block_push, tmp_path):
    faults = {"steps": 0, "delay": 0, "drop": 0, "restart": 0}
    done, port_box = threading.Event(), []
    thread = threading.Thread(target=_serve, args=(block_push, port_box, faults, done), daemon=True)
    thread.start()
    while not port_box:
        time.sleep(0.01)
    world = RemoteWorld(f"127.0.0.1:{port_box[0]}", task=block_push, timeout=TIMEOUT)
    controller = Excite(block_push)
    ds = Dataset.create(tmp_path / "soak", {"fps": 10, **recorded_on(block_push)})
    recorded, lost, seed = 0, 0, 0
    try:
        while recorded < TICKS:
            try:
                (r,) = run_episodes(world, controller, [seed], dataset=ds, max_ticks=MAX_TICKS)
                recorded += r.ticks
            except WorldLost as exc:  # lost at reset: nothing recorded yet, no episode
                cut = getattr(exc, "episode", None)
                recorded += 0 if cut is None else len(cut.recorder)
                seed -= cut is None  # no episode written: its seed is tried again
                lost += 1
                _reconnect(world)
            seed += 1
    finally:
        done.set()
        world.close()
    thread.join(timeout=10)
    res = check(tmp_path / "soak")
    assert res.ok, res.problems
    assert res.frames == recorded and res.episodes == seed and res.verified == seed
    assert faults["restart"] == 1 and faults["drop"] >= 2 and faults["delay"] >= 50
    # every loss was recovered (the loop went on); a stall of a loaded machine may add one
    assert faults["drop"] + faults["restart"] <= lost <= faults["drop"] + faults["restart"] + 2
    cli = CliRunner().invoke(app, ["dataset", "check", str(tmp_path / "soak")])
    assert cli.exit_code == 0 and "all verified" in cli.output, cli.output
    print(f"\nsoak: {recorded} ticks in {seed} episodes recorded and verified; faults: {faults['delay']} delays, "
          f"{faults['drop']} dropped replies, {faults['restart']} restart; {lost} losses, all recovered")
