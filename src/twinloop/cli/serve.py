"""`twinloop serve-world`: serve a world to controllers in other processes (see
:mod:`twinloop.worlds.remote` for the protocol)."""

from __future__ import annotations

import importlib

import typer

from twinloop.cli.common import console, guard, one_of
from twinloop.errors import TwinloopError
from twinloop.tasks import TASKS, make_task
from twinloop.worlds import WORLDS, GymWorld, RealtimeWorld, make_world, world_type


def _function(path: str):
    """``"package.module:function"`` -> the function."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise TwinloopError(f"--obs-map must look like package.module:function, got {path!r}")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise TwinloopError(f"cannot load --obs-map {path!r}: {exc}") from exc


@guard
def serve_world(
    task: str = typer.Option("", help=one_of(TASKS, "Task whose world is served (its maps for gym worlds):")),
    world: str = typer.Option("shifted", help=one_of(WORLDS)),
    severity: int = typer.Option(2, help="ShiftedWorld severity 0-3."),
    seed: int = typer.Option(0, help="Seed of the world's hidden physics."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind; anything but loopback needs --token."),
    port: int = typer.Option(5555, help="TCP port (0: any free port, printed at start)."),
    token: str = typer.Option("", envvar="TWINLOOP_TOKEN", help="Shared token every request must carry."),
    obs_map: str = typer.Option("", help="For gym:ENV_ID without --task: package.module:function mapping (raw obs, info) to the observation."),
    realtime: bool = typer.Option(False, help="Keep the world's own clock (clients send actions and observe)."),
    rate: float = typer.Option(0.0, help="Real-time ticks per second (0: 10 per control period for simulated worlds, the env's own rate otherwise)."),
):
    """Serve a world (a twinloop world, or any gymnasium env) over ZeroMQ until interrupted."""
    from twinloop.worlds.remote import WorldServer  # needs the [remote] extra (pyzmq)

    if task:
        t = make_task(task)
        fine = world_type(world).adjustable_period
        period = (1.0 / rate if rate else t.control_period / 10) if realtime and fine else None
        w = make_world(t, world, severity=severity, seed=seed, period=period)
    elif world.startswith("gym:"):
        w = GymWorld(world[4:], obs_from_env=_function(obs_map) if obs_map else None)
    else:
        raise TwinloopError(f"world {world!r} needs --task")
    if realtime:
        if w.task is None:
            raise TwinloopError("a real-time world needs --task (its hold action)")
        w = RealtimeWorld(w, rate=rate if rate and not world_type(world).adjustable_period else None)
    server = WorldServer(w, host=host, port=port, token=token or None)
    console.print(f"twinloop serve-world: listening on {server.address}", highlight=False, soft_wrap=True)
    try:
        server.serve(log=console.print)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        w.close()


COMMANDS = (serve_world,)
