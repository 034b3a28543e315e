"""Where episodes run: serially in this process (the default) or as Ray tasks on a cluster.

A sweep is a list of :class:`EpisodeBatch` es. A batch says how to build its world and
controller (a picklable factory, so a Ray worker can build its own) and which seeds to run.
Every episode is seeded by its own seed (world reset, noise, the refiner's sampling), so where
it runs does not change what happens: both executors return the same episodes, and hand them to
the caller in the same order (batch by batch, seed by seed), so datasets written from them are
identical too::

    executor = make_executor("ray", address=None)      # a local Ray instance; or "auto", "ray://host:10001"
    results = executor.run(batches, on_episode=write)  # [[EpisodeResult per seed] per batch]

Pointing at a cluster: start one (``ray start --head`` on one machine, ``ray start
--address=HEAD:6379`` on the others, each with the same Python, MuJoCo and twinloop installed:
``pip install 'twinloop[ray]'``), then pass ``--executor ray --address HEAD:6379`` (or
``auto`` on a cluster node). Without ``--address`` a local Ray instance with one worker per
core is started and stopped with the executor.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from twinloop.errors import TwinloopError, choose
from twinloop.run.experiment import EpisodeResult, run_episodes

EXECUTORS = ("serial", "ray")

#: ``on_episode(batch_index, result)``: called in the driver, in batch and seed order
OnEpisode = Callable[[int, EpisodeResult], None]


@dataclass(frozen=True)
class EpisodeBatch:
    """Episodes of one controller in one world.

    Attributes:
        build: ``build() -> (world, controller)``; must be picklable (a module-level function
            or a ``functools.partial`` of one over frozen configs) for the Ray executor.
        seeds: one episode per seed.
        first_index: episode index of the first seed (datasets number episodes by it).
        options: keyword arguments of :func:`~twinloop.run.experiment.run_episodes`
            (``max_ticks``, ``record``, ``stop_on_success``).
        stats: ``stats(world, controller) -> dict`` read after each episode where it ran, kept
            as the result's ``stats`` (e.g. a real-time world's deadline misses); picklable.
    """

    build: Callable
    seeds: tuple[int, ...]
    first_index: int = 0
    options: dict = field(default_factory=dict)
    stats: Callable | None = None

    def __post_init__(self):
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if not self.seeds:
            raise TwinloopError("an episode batch needs at least one seed")

    def split(self) -> list[EpisodeBatch]:
        """One batch per seed (for a scheduler that balances single episodes)."""
        return [replace(self, seeds=(s,), first_index=self.first_index + i) for i, s in enumerate(self.seeds)]


def run_batch(batch: EpisodeBatch, on_episode: Callable[[EpisodeResult], None] | None = None) -> list[EpisodeResult]:
    """Build the batch's world and controller here and run its episodes (the unit of work)."""
    world, controller = batch.build()

    def after(r: EpisodeResult) -> None:
        if batch.stats is not None:
            r.stats = batch.stats(world, controller)
        if on_episode is not None:
            on_episode(r)

    try:
        return run_episodes(world, controller, batch.seeds, first_index=batch.first_index, progress=after,
                            **batch.options)
    finally:
        world.close()


class Executor:
    """Runs episode batches; subclasses say where."""

    name = "executor"

    def run(self, batches: Sequence[EpisodeBatch], on_episode: OnEpisode | None = None) -> list[list[EpisodeResult]]:
        raise NotImplementedError

    def close(self) -> None:
        """Release workers (nothing for the serial executor)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SerialExecutor(Executor):
    """Every batch in this process, one after another (each episode handed over as it ends)."""

    name = "serial"

    def run(self, batches, on_episode=None):
        out = []
        for b, batch in enumerate(batches):
            cb = None if on_episode is None else (lambda r, b=b: on_episode(b, r))
            out.append(run_batch(batch, cb))
        return out


class RayExecutor(Executor):
    """Every episode as one Ray task; results are handed over in batch and seed order.

    Args:
        address: a running cluster (``"auto"``, ``"HOST:6379"``, ``"ray://HOST:10001"``); ``None``
            starts a local instance (``num_cpus`` workers, default: the machine's cores) that
            :meth:`close` stops.
        num_cpus: cores of a local instance.
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        try:
            import ray
        except ImportError as exc:
            raise TwinloopError(f"executor 'ray' needs the [ray] extra: pip install 'twinloop[ray]' ({exc})") from exc
        self.ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            kw = {"address": address} if address else {"num_cpus": num_cpus or os.cpu_count() or 1}
            # workers import twinloop from where this process does
            env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
            try:
                ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
                         runtime_env={"env_vars": env} if env else None, **kw)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise TwinloopError(f"cannot start or reach Ray (address {address!r}): {exc}") from exc
        self._task = ray.remote(num_cpus=1)(run_batch)

    def run(self, batches, on_episode=None):
        ray = self.ray
        units = [(b, unit) for b, batch in enumerate(batches) for unit in batch.split()]
        pending = {self._task.remote(unit): i for i, (_, unit) in enumerate(units)}
        done: dict[int, EpisodeResult] = {}
        handed = 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                done[pending.pop(ref)] = ray.get(ref)[0]
            # hand over the in-order prefix (datasets number frames in that order)
            while handed in done:
                if on_episode is not None:
                    on_episode(units[handed][0], done[handed])
                handed += 1
        out: list[list[EpisodeResult]] = [[] for _ in batches]
        for i, (b, _) in enumerate(units):
            out[b].append(done[i])
        return out

    def close(self) -> None:
        if self._owns and self.ray.is_initialized():
            self.ray.shutdown()


def make_executor(name: str = "serial", address: str | None = None, num_cpus: int | None = None) -> Executor:
    """An executor by name: ``serial`` (this process) or ``ray`` (local, or the cluster at ``address``)."""
    choose("executor", name, EXECUTORS)
    if name == "serial":
        if address:
            raise TwinloopError(f"address {address!r} needs executor 'ray'")
        return SerialExecutor()
    return RayExecutor(address, num_cpus)


__all__ = ["EXECUTORS", "EpisodeBatch", "Executor", "RayExecutor", "SerialExecutor", "make_executor", "run_batch"]
