"""Round-trip latency of ``twinloop serve-world``, and what a killed server does to a client.

Starts ``twinloop serve-world`` (push-t, nominal world) in a subprocess (``--python`` picks
the interpreter: another virtual environment, e.g. ``.ci-venv2/bin/python``), then measures
from this process, over ``--n`` requests each:

- ``ping``: the protocol alone (header encode, REQ/REP over loopback TCP, decode);
- ``step``: a world step (20 physics steps of push-t) plus its observation and info;
- ``in-process step``: the same step without a server, for comparison.

Then it kills the server mid-episode (SIGKILL) and reports how long the client took to say
so (``RemoteWorld(timeout=...)``), that the next step is refused at once without sending
anything, and that a restarted server on the same port is reached with ``reconnect()``.

    python benchmarks/remote_latency.py [--n 2000] [--python .ci-venv2/bin/python]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

import numpy as np

from twinloop.tasks import make_task
from twinloop.worlds import SimWorld
from twinloop.worlds.remote import RemoteWorld, WorldLost


def start(python: str, port: str = "0") -> tuple[subprocess.Popen, str]:
    env = {k: v for k, v in os.environ.items() if python == sys.executable or k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.Popen([python, "-m", "twinloop", "serve-world", "--task", "push-t", "--world", "nominal",
                             "--port", port], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        if "listening on" in line:
            return proc, line.split("listening on", 1)[1].strip()
    raise RuntimeError("serve-world did not start")


def stats(ms: list[float]) -> str:
    a = np.array(ms)
    return f"median {np.median(a):.3f} ms, p99 {np.percentile(a, 99):.3f} ms, max {a.max():.3f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the server")
    ap.add_argument("--timeout", type=float, default=1.0, help="client timeout (s): the detection bound")
    a = ap.parse_args()
    task = make_task("push-t")
    proc, address = start(a.python)
    try:
        w = RemoteWorld(address, timeout=a.timeout)
        print(f"server: python {w.server['server']['python']} at {w.server['server']['prefix']}, "
              f"mujoco {w.server['server']['mujoco']}; client: {sys.prefix}")
        obs = w.reset(0)
        hold = task.hold_action(task.state_from_obs(obs))
        ping, step = [], []
        for _ in range(a.n):
            t0 = time.perf_counter()
            w.ping()
            ping.append(1000 * (time.perf_counter() - t0))
        for i in range(a.n):
            if i % 100 == 0:
                w.reset(i)
            t0 = time.perf_counter()
            w.step(hold)
            step.append(1000 * (time.perf_counter() - t0))
        local, sim = [], SimWorld(task)
        for i in range(a.n):
            if i % 100 == 0:
                sim.reset(i)
            t0 = time.perf_counter()
            sim.step(hold)
            local.append(1000 * (time.perf_counter() - t0))
        print(f"ping ({a.n}):             {stats(ping)}")
        print(f"step ({a.n}):             {stats(step)}")
        print(f"in-process step ({a.n}):  {stats(local)}")
        # a server killed mid-episode
        w.reset(1)
        for _ in range(5):
            w.step(hold)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t0 = time.perf_counter()
        try:
            w.step(hold)
        except WorldLost as exc:
            print(f"killed server: step raised WorldLost after {time.perf_counter() - t0:.3f} s "
                  f"(timeout {a.timeout:g} s): {exc}")
        t0 = time.perf_counter()
        try:
            w.step(hold)
        except WorldLost as exc:
            print(f"next step refused after {1000 * (time.perf_counter() - t0):.3f} ms, nothing sent: {exc}")
        proc, _ = start(a.python, address.rsplit(":", 1)[1])
        t0 = time.perf_counter()
        w.reconnect()
        w.reset(0)
        print(f"restarted server reached by reconnect() in {time.perf_counter() - t0:.3f} s")
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
