"""A world in another process: ``twinloop serve-world`` and its client, :class:`RemoteWorld`.

The server holds any world (a twinloop world, a gymnasium env, either wrapped in a
:class:`~twinloop.worlds.realtime.RealtimeWorld`) and answers requests over ZeroMQ (REQ/REP);
the client is a :class:`~twinloop.worlds.base.World`, so every loop runs on it unchanged. The
two may live in different Python environments: the messages carry only JSON and raw float64.

Protocol ``twinloop-world/1``. A message is a ZeroMQ multipart message::

    frame 0     header: UTF-8 JSON object (at most MAX_HEADER bytes)
    frame 1..n  raw little-endian float64 arrays, C order, described by header["arrays"]

Request header: ``{"protocol": "twinloop-world/1", "op": OP, "seq": n, "token": str | null,
"args": {...}, "arrays": [{"name": str, "shape": [int, ...]}, ...]}``. Reply header:
``{"protocol", "seq", "ok": true, "result": {...}, "arrays": [...]}`` or
``{"protocol", "seq", "ok": false, "error": "message"}``. Ops:

==========  =====================  =============================================================
op          request                reply
==========  =====================  =============================================================
hello                              result: world (describe), task, nu, obs_names, period,
                                   realtime, server (python, prefix, twinloop, mujoco, numpy)
ping                               result: {} (round-trip latency)
reset       args: seed             arrays: obs; result: info (arrays as ``info.<key>``)
step        arrays: action         arrays: obs; result: info (a real-time world: sends the action
                                   and waits for its next observation)
send        arrays: action         result: {} (real-time worlds only: applied at the next tick)
observe                            arrays: obs; result: info (real-time worlds only)
info                               result: info
stats                              result: the real-time world's tick statistics
==========  =====================  =============================================================

Info values that are float arrays travel as arrays named ``info.<key>``; other values as JSON
(numbers, strings, booleans, lists; anything else as its ``repr``).

Security: the server binds 127.0.0.1 unless told otherwise, and refuses to bind another
address without a shared token, which every request must then carry. ZeroMQ drops any frame
above ``max_message`` bytes (``MAXMSGSIZE``), and the server checks the header's size, the
number and sizes of arrays against the frames, and refuses unknown ops, unknown protocol
versions and malformed messages with an error reply that says what was wrong.

Reliability: every request waits at most ``timeout`` seconds. A server that does not answer in
time is *lost*: the client closes its socket, sends nothing more (no motion) until
:meth:`RemoteWorld.reconnect` succeeds, and raises :class:`WorldLost` saying so. A served
real-time world whose client falls silent for ``hold_after`` seconds is given the task's hold
action. Episodes cut short keep their recorded frames (see ``run_episodes``).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import platform
import sys
import time
from collections.abc import Callable

import mujoco
import numpy as np
import zmq

from twinloop.errors import TwinloopError, as_array
from twinloop.worlds.base import World
from twinloop.worlds.realtime import RealtimeWorld

PROTOCOL = "twinloop-world/1"
MAX_HEADER = 64 * 1024           # bytes
MAX_ARRAYS = 32
MAX_ELEMENTS = 1 << 20           # float64 per array (8 MiB)
MAX_MESSAGE = 16 * 1024 * 1024   # bytes per frame, enforced by ZeroMQ on the server
OPS = ("hello", "ping", "reset", "step", "send", "observe", "info", "stats")


class WorldLost(TwinloopError):
    """The remote world did not answer in time (dead or stalled); nothing more was sent.
    ``reason``: why, in a few words."""

    reason: str = "no answer"


class ProtocolError(TwinloopError):
    """A message that does not follow ``twinloop-world/1``."""


# -- messages -----------------------------------------------------------------------------------


def _jsonable(x):
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return repr(x)


def encode(header: dict, arrays: dict[str, np.ndarray] | None = None) -> list[bytes]:
    """``header`` + float64 arrays -> multipart frames."""
    arrays = arrays or {}
    frames, spec = [], []
    for name, a in arrays.items():
        a = np.ascontiguousarray(a, dtype="<f8")
        spec.append({"name": name, "shape": list(a.shape)})
        frames.append(a.tobytes())
    head = json.dumps({**header, "arrays": spec}, default=_jsonable, allow_nan=True).encode()
    return [head, *frames]


def decode(frames: list[bytes]) -> tuple[dict, dict[str, np.ndarray]]:
    """Multipart frames -> ``(header, arrays)``, checked against the protocol's limits."""
    if not frames:
        raise ProtocolError("empty message")
    if len(frames[0]) > MAX_HEADER:
        raise ProtocolError(f"header of {len(frames[0])} bytes exceeds {MAX_HEADER}")
    try:
        header = json.loads(frames[0].decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"header is not UTF-8 JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ProtocolError("header must be a JSON object")
    if header.get("protocol") != PROTOCOL:
        raise ProtocolError(f"protocol {header.get('protocol')!r} is not supported; this side speaks {PROTOCOL}")
    spec = header.get("arrays", [])
    if not isinstance(spec, list) or len(spec) > MAX_ARRAYS or len(spec) != len(frames) - 1:
        raise ProtocolError(f"header describes {len(spec) if isinstance(spec, list) else '?'} arrays but "
                            f"{len(frames) - 1} frames follow (at most {MAX_ARRAYS})")
    arrays = {}
    for s, buf in zip(spec, frames[1:], strict=True):
        try:
            name, shape = str(s["name"]), tuple(int(n) for n in s["shape"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"bad array description {s!r}") from exc
        n = int(np.prod(shape)) if shape else 1
        if any(d < 0 for d in shape) or n > MAX_ELEMENTS or len(buf) != 8 * n:
            raise ProtocolError(f"array {name!r}: shape {shape} does not match {len(buf)} bytes (at most {MAX_ELEMENTS} values)")
        arrays[name] = np.frombuffer(buf, dtype="<f8").reshape(shape).astype(float)
    return header, arrays


def split_info(info: dict) -> tuple[dict, dict[str, np.ndarray]]:
    """Info -> (JSON part, float arrays as ``info.<key>``)."""
    plain, arrays = {}, {}
    for k, v in info.items():
        if isinstance(v, np.ndarray) and v.dtype.kind in "fiub" and v.size <= MAX_ELEMENTS:
            arrays[f"info.{k}"] = v.astype(float)
        else:
            plain[k] = v
    return plain, arrays


def join_info(plain: dict, arrays: dict[str, np.ndarray]) -> dict:
    return {**plain, **{k[5:]: v for k, v in arrays.items() if k.startswith("info.")}}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- server -------------------------------------------------------------------------------------


class WorldServer:
    """Serves one world over ZeroMQ (REP). See the module docstring for the protocol.

    Args:
        world: the world to serve.
        host: interface to bind (default 127.0.0.1).
        port: TCP port (0: any free port; see :attr:`address`).
        token: shared secret every request must carry; required unless ``host`` is loopback.
        max_message: largest inbound frame in bytes (ZeroMQ drops larger ones).
        hold_after: a served real-time world whose client is silent this long (s) gets the
            task's hold action.
    """

    def __init__(self, world: World, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 max_message: int = MAX_MESSAGE, hold_after: float = 1.0):
        if not isinstance(world, World):
            raise TwinloopError(f"world must be a World, got {type(world).__name__}")
        if not is_loopback(host) and not token:
            raise TwinloopError(f"serving on {host!r} (not loopback) needs a shared token: give --token or TWINLOOP_TOKEN")
        if not (isinstance(port, int) and 0 <= port < 65536):
            raise TwinloopError(f"port must be an integer in [0, 65535], got {port!r}")
        self.world, self.token = world, token or None
        self.hold_after = float(hold_after)
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.MAXMSGSIZE, int(max_message))
        self._sock.setsockopt(zmq.LINGER, 0)
        try:
            if port:
                self._sock.bind(f"tcp://{host}:{port}")
            else:
                self._sock.bind_to_random_port(f"tcp://{host}")
        except zmq.ZMQError as exc:
            self._sock.close()
            raise TwinloopError(f"cannot bind tcp://{host}:{port}: {exc}") from exc
        self.address = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.requests = 0
        self._running = False
        self._last_request = time.monotonic()
        self._holding = False

    def serve(self, log: Callable[[str], None] | None = None, max_requests: int | None = None) -> None:
        """Answer requests until :meth:`stop` (or ``max_requests``)."""
        self._running = True
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while self._running and (max_requests is None or self.requests < max_requests):
            if not poller.poll(100):
                self._watchdog(log)
                continue
            frames = self._sock.recv_multipart()
            self.requests += 1
            self._last_request = time.monotonic()
            self._holding = False
            self._sock.send_multipart(self.handle(frames))

    def stop(self) -> None:
        self._running = False

    def close(self) -> None:
        self._running = False
        self._sock.close()
        self._ctx.term()

    def _watchdog(self, log) -> None:
        w = self.world
        if (isinstance(w, RealtimeWorld) and not self._holding and w.running
                and time.monotonic() - self._last_request > self.hold_after):
            obs, _ = w.observe()
            w.send(w.task.hold_action(w.task.state_from_obs(obs)))
            self._holding = True
            if log is not None:
                log(f"client silent for {self.hold_after:g} s: holding")

    def handle(self, frames: list[bytes]) -> list[bytes]:
        """One request -> one reply (never raises: errors become error replies)."""
        seq = None
        try:
            header, arrays = decode(frames)
            seq = header.get("seq")
            if self.token is not None and not hmac.compare_digest(str(header.get("token") or ""), self.token):
                raise ProtocolError("bad or missing token")
            op = header.get("op")
            if op not in OPS:
                raise ProtocolError(f"unknown message op {op!r}; this server understands: {', '.join(OPS)}")
            result, out = getattr(self, f"_op_{op}")(header.get("args") or {}, arrays)
            return encode({"protocol": PROTOCOL, "seq": seq, "ok": True, "result": result}, out)
        except Exception as exc:  # the client gets the message; the server keeps serving
            msg = str(exc) if isinstance(exc, TwinloopError) else f"{type(exc).__name__}: {exc}"
            return encode({"protocol": PROTOCOL, "seq": seq, "ok": False, "error": msg})

    def _realtime(self, op: str) -> RealtimeWorld:
        if not isinstance(self.world, RealtimeWorld):
            raise TwinloopError(f"op {op!r} needs a real-time world; this server's world is not (serve it with --realtime)")
        return self.world

    def _op_hello(self, args, arrays):
        w = self.world
        task = w.task
        return {"world": w.describe(), "task": None if task is None else task.name,
                "nu": None if task is None else task.nu,
                "obs_names": None if task is None else list(task.obs_names),
                "period": float(w.period), "realtime": isinstance(w, RealtimeWorld),
                "server": {"python": platform.python_version(), "prefix": sys.prefix,
                           "twinloop": _version(), "mujoco": mujoco.__version__, "numpy": np.__version__}}, {}

    def _op_ping(self, args, arrays):
        return {}, {}

    def _obs_reply(self, obs, info):
        plain, arr = split_info(info)
        return {"info": plain}, {"obs": np.asarray(obs, float), **arr}

    def _op_reset(self, args, arrays):
        seed = args.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TwinloopError(f"reset needs an integer seed, got {seed!r}")
        obs = self.world.reset(seed)
        return self._obs_reply(obs, self.world.info())

    def _action(self, arrays):
        if "action" not in arrays:
            raise TwinloopError("this op needs an array named 'action'")
        return arrays["action"]

    def _op_step(self, args, arrays):
        return self._obs_reply(*self.world.step(self._action(arrays)))

    def _op_send(self, args, arrays):
        self._realtime("send").send(self._action(arrays), args.get("based_on"))
        return {}, {}

    def _op_observe(self, args, arrays):
        return self._obs_reply(*self._realtime("observe").observe())

    def _op_info(self, args, arrays):
        plain, arr = split_info(self.world.info())
        return {"info": plain}, arr

    def _op_stats(self, args, arrays):
        return self._realtime("stats").stats(), {}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("twinloop")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


# -- client -------------------------------------------------------------------------------------


def remote_address(address) -> str:
    """``tcp://HOST:PORT`` from ``HOST:PORT`` or ``tcp://HOST:PORT``, or a clear error (a
    missing or bad port is named here, not by ZeroMQ)."""
    if not isinstance(address, str) or not address.strip():
        raise TwinloopError(f"a remote world needs an address HOST:PORT, got {address!r}")
    scheme, sep, rest = address.strip().rpartition("://")
    if sep and scheme != "tcp":
        raise TwinloopError(f"remote world address {address!r}: only tcp:// is served (twinloop serve-world)")
    host, colon, port = rest.rpartition(":")
    if not colon or not host:
        raise TwinloopError(f"remote world address {address!r} has no port: give HOST:PORT, e.g. remote:{rest or 'localhost'}:5555 "
                            "(the port twinloop serve-world prints)")
    if not (port.isdigit() and 0 < int(port) < 65536):
        raise TwinloopError(f"remote world address {address!r}: port must be an integer 1..65535, got {port!r}")
    return f"tcp://{host}:{int(port)}"


class RemoteWorld(World):
    """Client of a served world (``twinloop serve-world``); a :class:`World` like any other.

    Args:
        address: ``tcp://host:port`` (or ``host:port``).
        task: the task the controller acts on (default: the served world's, by name).
        token: the server's shared token, if it has one.
        timeout: seconds to wait for any reply before the world is declared lost.

    Attributes:
        server: what the server said in its hello (world, task, period, versions ...).
        lost: why the world was declared lost (``""`` while connected).
    """

    name = "remote"
    remote = True

    def __init__(self, address: str, task=None, token: str | None = None, timeout: float = 5.0):
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise TwinloopError(f"timeout must be > 0 s, got {timeout!r}")
        self.address = remote_address(address)
        self.token, self.timeout = token, float(timeout)
        self._ctx = zmq.Context.instance()
        self._sock = None
        self._seq = 0
        self.lost = ""
        self._info: dict = {"time": 0.0, "tick": 0}
        self.server = self._connect()
        if task is None:
            from twinloop.tasks import make_task

            if self.server.get("task") is None:
                raise TwinloopError(f"the world at {self.address} serves no task; give task=")
            task = make_task(self.server["task"])
        elif self.server.get("task") not in (None, task.name):
            raise TwinloopError(f"the world at {self.address} serves task {self.server['task']!r}, not {task.name!r}")
        self.task = task
        self.period = float(self.server["period"])
        self.realtime = bool(self.server["realtime"])

    def _connect(self) -> dict:
        self._sock = self._ctx.socket(zmq.REQ)
        self._sock.setsockopt(zmq.LINGER, 0)
        try:
            self._sock.connect(self.address)
        except zmq.ZMQError as exc:
            self._close_socket()
            raise TwinloopError(f"cannot connect to a world at {self.address}: {exc}; give remote:HOST:PORT") from None
        self.lost = ""
        try:
            result, _ = self._request("hello")
        except WorldLost as exc:
            raise WorldLost(f"no world server answers at {self.address} (waited {self.timeout:g} s): start one there "
                            f"with `twinloop serve-world --task TASK --port {self.address.rsplit(':', 1)[-1]}`, or "
                            f"check the host and port ({exc.reason})") from None
        return result

    def reconnect(self) -> dict:
        """A fresh connection (after :class:`WorldLost`); returns the server's hello."""
        self._close_socket()
        self.server = self._connect()
        return self.server

    def _close_socket(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def _request(self, op: str, args: dict | None = None, arrays: dict | None = None) -> tuple[dict, dict]:
        if self.lost:
            raise WorldLost(f"the world at {self.address} is lost ({self.lost}); nothing is sent until reconnect()")
        self._seq += 1
        header = {"protocol": PROTOCOL, "op": op, "seq": self._seq, "token": self.token, "args": args or {}}
        t0 = time.monotonic()
        try:
            self._sock.send_multipart(encode(header, arrays), flags=zmq.NOBLOCK)
            ready = self._sock.poll(int(1000 * self.timeout), zmq.POLLIN)
        except zmq.ZMQError as exc:
            ready, reason = 0, f"{type(exc).__name__}: {exc}"
        else:
            reason = f"no answer to {op!r} within {self.timeout:g} s: dead or stalled"
        if not ready:
            self._close_socket()  # a REQ socket without its reply is stuck: drop it
            self.lost = reason
            exc = WorldLost(f"the world at {self.address} is lost: {reason} (after {time.monotonic() - t0:.2f} s). "
                            "No further actions are sent: restart its server (twinloop serve-world) and run again "
                            "(from Python: RemoteWorld.reconnect() once it is back)")
            exc.reason = reason
            raise exc
        reply, out = decode(self._sock.recv_multipart())
        if reply.get("seq") != self._seq:
            raise ProtocolError(f"reply to request {reply.get('seq')} arrived for request {self._seq}")
        if not reply.get("ok"):
            raise TwinloopError(f"world server at {self.address} refused {op!r}: {reply.get('error')}")
        return reply.get("result") or {}, out

    def _obs(self, result: dict, arrays: dict) -> tuple[np.ndarray, dict]:
        self._info = join_info(result.get("info", {}), arrays)
        return arrays["obs"], self._info

    def ping(self) -> None:
        self._request("ping")

    def reset(self, seed: int) -> np.ndarray:
        return self._obs(*self._request("reset", {"seed": int(seed)}))[0]

    def step(self, action) -> tuple[np.ndarray, dict]:
        a = as_array(action, "action", (self.task.nu,))
        return self._obs(*self._request("step", arrays={"action": a}))

    def send(self, action, based_on: float | None = None) -> None:
        """Real-time served worlds: queue ``action`` for the next tick (non-blocking there)."""
        a = as_array(action, "action", (self.task.nu,))
        self._request("send", {"based_on": based_on}, {"action": a})

    def observe(self) -> tuple[np.ndarray, dict]:
        """Real-time served worlds: the latest observation."""
        return self._obs(*self._request("observe"))

    def stats(self) -> dict:
        """Real-time served worlds: the tick statistics."""
        return self._request("stats")[0]

    def info(self) -> dict:
        return self._info

    def describe(self) -> dict:
        return {"world": self.name, "address": self.address, "served": self.server.get("world"),
                "server": self.server.get("server")}

    def close(self) -> None:
        self._close_socket()
