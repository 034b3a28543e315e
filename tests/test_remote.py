"""A world in another process: the serve-world protocol, its limits, a lost server, and a
round trip through a server started from a second virtual environment."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.data.dataset import Dataset
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.run.experiment import run_episode, run_episodes
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import RealtimeWorld, ShiftedWorld, SimWorld, World
from twinloop.worlds.remote import (
    MAX_ELEMENTS,
    PROTOCOL,
    ProtocolError,
    RemoteWorld,
    WorldLost,
    WorldServer,
    decode,
    encode,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def task():
    return make_task("push-t")


@pytest.fixture
def served(task):
    """A server thread in this process; yields ``(server, address)``."""
    servers = []

    def start(world=None, **kw):
        server = WorldServer(world or SimWorld(task), **kw)
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        servers.append((server, thread))
        return server, server.address

    yield start
    for server, thread in servers:
        server.stop()
        thread.join(timeout=5)
        server.close()


def base_controller(task):
    ref = Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi"), RefinerConfig(num_samples=8, horizon=0.5))
    return Controller(ref, task.default_proposer(), refine=False)


def raw_request(address, header, arrays=None, timeout=2.0):
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    try:
        sock.send_multipart(encode({"protocol": PROTOCOL, "seq": 1, **header}, arrays))
        if not sock.poll(int(1000 * timeout)):
            return None
        return decode(sock.recv_multipart())[0]
    finally:
        sock.close()


def serve_world_process(python: str, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """``twinloop serve-world`` in a subprocess of ``python``; returns it and its address."""
    proc = subprocess.Popen([python, "-m", "twinloop", "serve-world", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
    deadline = time.monotonic() + 120
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "listening on" in line:
            return proc, line.split("listening on", 1)[1].strip()
    proc.kill()
    raise AssertionError("serve-world did not start:\n" + "".join(lines))


# -- the protocol ---------------------------------------------------------------------------


def test_remote_world_gives_the_same_episode_as_in_process(task, served):
    _, address = served(ShiftedWorld(task, severity=2, seed=0))
    ctl = base_controller(task)
    remote = run_episode(RemoteWorld(address, timeout=5), ctl, 4, max_ticks=25, record=False)
    local = run_episode(ShiftedWorld(task, severity=2, seed=0), ctl, 4, max_ticks=25, record=False)
    np.testing.assert_array_equal(remote.qpos, local.qpos)
    assert remote.ticks == local.ticks and remote.final_error == local.final_error


def test_hello_names_the_world_task_and_server(task, served):
    _, address = served()
    w = RemoteWorld(address)
    assert w.task.name == "push-t" and w.period == pytest.approx(task.control_period)
    assert w.server["world"]["world"] == "nominal" and w.server["server"]["prefix"] == sys.prefix
    assert not w.realtime


def test_unknown_messages_are_refused_with_a_clear_error(served):
    _, address = served()
    reply = raw_request(address, {"op": "teleport"})
    assert reply["ok"] is False and "unknown message op 'teleport'" in reply["error"] and "step" in reply["error"]
    reply = raw_request(address, {"op": "step", "protocol": "twinloop-world/99"})
    assert reply["ok"] is False and "not supported" in reply["error"]
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    sock.send_multipart([b"not json"])
    assert sock.poll(2000)
    header, _ = decode(sock.recv_multipart())
    sock.close()
    assert header["ok"] is False and "JSON" in header["error"]


def test_arrays_must_match_their_description_and_limits():
    frames = encode({"protocol": PROTOCOL, "op": "step"}, {"action": np.zeros(2)})
    with pytest.raises(ProtocolError, match="does not match"):
        decode([frames[0], frames[1][:8]])
    with pytest.raises(ProtocolError, match="frames follow"):
        decode(frames[:1])
    big = encode({"protocol": PROTOCOL, "op": "step"}, {"action": np.zeros(MAX_ELEMENTS + 1)})
    with pytest.raises(ProtocolError, match="at most"):
        decode(big)


def test_oversized_messages_are_dropped_and_the_client_says_so(served):
    _, address = served(max_message=4096)
    w = RemoteWorld(address, timeout=1.0)
    with pytest.raises(WorldLost, match="no answer"):
        w._request("step", arrays={"action": np.zeros(10_000)})


def test_a_server_beyond_loopback_needs_a_token(task, served):
    with pytest.raises(TwinloopError, match="token"):
        WorldServer(SimWorld(task), host="0.0.0.0")
    _, address = served(token="s3cret")
    with pytest.raises(TwinloopError, match="bad or missing token"):
        RemoteWorld(address)
    assert RemoteWorld(address, token="s3cret").task.name == "push-t"


def test_realtime_ops_need_a_realtime_world(served):
    _, address = served()
    w = RemoteWorld(address)
    w.reset(0)
    with pytest.raises(TwinloopError, match="needs a real-time world"):
        w.observe()


def test_a_served_realtime_world_keeps_time_and_takes_sent_actions(task, served):
    _, address = served(RealtimeWorld(SimWorld(task, period=0.02)))
    w = RemoteWorld(address)
    assert w.realtime
    obs = w.reset(0)
    a = task.hold_action(task.state_from_obs(obs))
    w.send(a)
    time.sleep(0.2)
    _, info = w.observe()
    assert info["tick"] >= 3 and info["period"] == pytest.approx(0.02)
    assert w.stats()["ticks"] >= 3


def test_a_served_realtime_world_holds_when_its_client_falls_silent(task, served):
    server, address = served(RealtimeWorld(SimWorld(task, period=0.02)), hold_after=0.3)
    w = RemoteWorld(address)
    obs = w.reset(0)
    hold = task.hold_action(task.state_from_obs(obs))
    away = np.clip(hold + 0.05, task.action_low, task.action_high)
    w.send(away)
    time.sleep(1.5)  # silent: the watchdog gives the hold action after 0.3 s
    fresh = [r for r in server.world.log if r.fresh]
    assert np.allclose(fresh[0].action, away)
    last = np.array(fresh[-1].action)
    assert not np.allclose(last, away)  # the watchdog sent the hold action: where the pusher stood,
    assert np.all(last >= np.minimum(hold, away) - 1e-3) and np.all(last <= np.maximum(hold, away) + 1e-3)  # on its way


# -- a lost server --------------------------------------------------------------------------


def test_a_killed_server_is_detected_within_the_bound_and_motion_stops(task):
    proc, address = serve_world_process(sys.executable, "--task", "push-t", "--world", "nominal")
    try:
        w = RemoteWorld(address, timeout=1.0)
        obs = w.reset(0)
        a = task.hold_action(task.state_from_obs(obs))
        for _ in range(3):
            w.step(a)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        t0 = time.monotonic()
        with pytest.raises(WorldLost, match="dead or stalled"):
            w.step(a)
        assert time.monotonic() - t0 < 5.0  # the bound is 1 s; generous for a loaded machine
        t0 = time.monotonic()
        with pytest.raises(WorldLost, match="nothing is sent until reconnect"):
            w.step(a)
        assert time.monotonic() - t0 < 0.5  # refused here, without waiting on the network
    finally:
        proc.kill()
        proc.wait(timeout=10)
    port = address.rsplit(":", 1)[1]
    proc2 = subprocess.Popen([sys.executable, "-m", "twinloop", "serve-world", "--port", port, "--task", "push-t",
                              "--world", "nominal"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        for _ in range(60):  # until the new server answers
            try:
                w.reconnect()
                break
            except WorldLost:
                time.sleep(0.5)
        np.testing.assert_allclose(w.reset(0), obs)
    finally:
        proc2.kill()
        proc2.wait(timeout=10)


class DiesAfter(World):
    """A world that is lost after ``n`` steps (as a RemoteWorld whose server died)."""

    def __init__(self, task, n):
        self.inner, self.task, self.n, self.period = SimWorld(task), task, n, task.control_period

    def reset(self, seed):
        self.k = 0
        return self.inner.reset(seed)

    def info(self):
        return self.inner.info()

    def step(self, action):
        self.k += 1
        if self.k > self.n:
            raise WorldLost("the world at tcp://test is lost: no answer")
        return self.inner.step(action)


def test_nothing_recorded_is_lost_when_the_world_dies_mid_episode(task, tmp_path):
    ds = Dataset.create(tmp_path / "ds", {"fps": 10, "twinloop": {"task": task.name}})
    with pytest.raises(WorldLost) as err:
        run_episodes(DiesAfter(task, 7), base_controller(task), [0, 1], dataset=ds)
    assert err.value.episode.ticks == 8
    eps = Dataset(tmp_path / "ds").episodes()
    assert len(eps) == 1 and len(eps[0]) == 8  # the 8 ticks acted on, the last one unanswered
    assert eps[0].success is not True


# -- across Python environments -------------------------------------------------------------


def second_python() -> str | None:
    path = os.environ.get("TWINLOOP_SECOND_PYTHON") or str(ROOT / ".ci-venv2" / "bin" / "python")
    return path if Path(path).is_file() else None


@pytest.mark.skipif(second_python() is None and not os.environ.get("TWINLOOP_REQUIRE_SECOND_VENV"),
                    reason="no second virtual environment: create one with `python3 -m venv .ci-venv2 && "
                           ".ci-venv2/bin/pip install -e '.[remote,gym]'` (.ci/run does)")
def test_serve_world_from_a_second_venv_returns_the_same_episode(task):
    python = second_python()
    assert python is not None, "TWINLOOP_REQUIRE_SECOND_VENV is set but the second venv is missing"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # its own packages only
    proc, address = serve_world_process(python, "--task", "push-t", "--world", "shifted", "--severity", "2",
                                        "--seed", "0", env=env)
    try:
        w = RemoteWorld(address, timeout=10)
        assert Path(w.server["server"]["prefix"]).resolve() != Path(sys.prefix).resolve()
        ref = Refiner(task, make_twin("mujoco", task.model), make_optimizer("mppi"), RefinerConfig(num_samples=8, horizon=0.5))
        ctl = Controller(ref, task.default_proposer())
        remote = run_episode(w, ctl, 5, max_ticks=15, record=False)
        local = run_episode(ShiftedWorld(task, severity=2, seed=0), ctl, 5, max_ticks=15, record=False)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    np.testing.assert_array_equal(remote.qpos, local.qpos)
    assert remote.final_error == local.final_error
