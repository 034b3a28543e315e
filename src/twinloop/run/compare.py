"""Base proposer vs refined controller on the same seeds: the experiment behind `demo` and `run`.

Writes to ``cfg.out``::

    summary.json            shared schema (task, world, seed, episodes, results[...])
    comparison.png          success with 95% Wilson intervals, final error
    refined_episode.mp4     one refined episode, candidate rollouts drawn as ghost traces
    episodes/<controller>/  every episode, LeRobot-style Parquet dataset
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.errors import TwinloopError, choose
from twinloop.io import write_json
from twinloop.plan import LLMConfig, make_optimizer
from twinloop.policies import PROPOSERS, make_proposer
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import WORLDS, make_world


@dataclass(frozen=True)
class RunConfig:
    """Every choice of a comparison run (the CLI mirrors these fields).

    Attributes:
        task: a registered task (``twinloop.tasks.TASKS``).
        optimizer: a registered optimizer (``twinloop.plan.OPTIMIZERS``), or ``llm+<one of
            them>`` (``llm``: ``llm+mppi``): guided by a language model, needs ``iterations >= 2``.
        backend: a twin backend (``twinloop.twin.BACKENDS``).
        num_samples: K candidates per refine iteration.
        horizon: planning horizon (s).
        iterations: refine iterations per control tick.
        world: a registered world (``twinloop.worlds.WORLDS``): ``shifted`` (hidden physics,
            noise, delay) | ``nominal`` (the twin itself).
        severity: ShiftedWorld severity (0-3).
        proposer: ``scripted`` (the task's own) | ``none`` (refinement from scratch; no
            baseline row); see ``twinloop.policies.PROPOSERS``.
        episodes: episodes per controller.
        seed: seeds the world's hidden physics and, with the episode index, each episode.
        max_ticks: episode length (default: the task's).
        out: output folder.
        video: render one refined episode with ghost rollouts.
        record: write every episode to ``out/episodes``.
        refiner: extra :class:`~twinloop.control.RefinerConfig` fields.
        llm: the language model of an ``llm+...`` optimizer.
    """

    task: str = "push-t"
    optimizer: str = "mppi"
    backend: str = "mujoco"
    num_samples: int = 64
    horizon: float = 1.0
    iterations: int = 1
    world: str = "shifted"
    severity: int = 2
    proposer: str = "scripted"
    episodes: int = 20
    seed: int = 0
    max_ticks: int | None = None
    out: str = "twinloop-out"
    video: bool = True
    record: bool = True
    refiner: dict = field(default_factory=dict)  # extra RefinerConfig fields
    llm: LLMConfig = field(default_factory=LLMConfig)

    def __post_init__(self):
        choose("world", self.world, tuple(WORLDS))
        choose("proposer", self.proposer, tuple(PROPOSERS))
        if self.optimizer.startswith("llm") and self.iterations < 2:
            raise TwinloopError(f"optimizer {self.optimizer!r} adds the model's plans to the next iteration's "
                                f"batch: it needs iterations >= 2, got {self.iterations}")
        if self.episodes < 1:
            raise TwinloopError(f"episodes must be >= 1, got {self.episodes}")
        if not 0 <= self.severity <= 3:
            raise TwinloopError(f"severity must be 0-3, got {self.severity}")


def build(cfg: RunConfig, keep_rollouts: bool = False):
    """(task, world, proposer, refiner) for a config."""
    task = make_task(cfg.task)
    world = make_world(task, cfg.world, severity=cfg.severity, seed=cfg.seed)
    proposer = make_proposer(task, cfg.proposer)
    twin = make_twin(cfg.backend, task.model, task.param_space())
    rcfg = RefinerConfig(num_samples=cfg.num_samples, horizon=cfg.horizon, iterations=cfg.iterations,
                         seed=cfg.seed, **cfg.refiner)
    refiner = Refiner(task, twin, make_optimizer(cfg.optimizer, llm=cfg.llm), rcfg, keep_rollouts=keep_rollouts)
    return task, world, proposer, refiner


def episode_seeds(cfg: RunConfig) -> list[int]:
    return [cfg.seed * 100_000 + i for i in range(cfg.episodes)]


def ghost_traces(task, max_candidates: int = 32) -> Callable:
    """``f(tick_info) -> Ghosts`` for videos: the paths of the task's trace points
    (``task.trace_points``) in the tick's candidate rollouts (first particle), the lowest-cost
    ones highlighted and the chosen plan marked."""
    from twinloop.viz.video import ghosts_from_rollouts

    def f(tick):
        res = tick.result
        if res is None or res.rollouts is None:
            return None
        r = res.rollouts
        points = task.trace_points(r.qpos[0], r.sensordata[0])
        if points.shape[-2] == 0:
            return None
        chosen = int(np.argmin(np.where(np.isfinite(res.costs), res.costs, np.inf)))
        return ghosts_from_rollouts(points, res.costs, chosen=chosen, max_candidates=max_candidates)

    return f


def run_comparison(cfg: RunConfig, progress=None, log: Callable[[str], None] = print) -> dict:
    """Run base (proposer alone) and refined controllers on the same seeds; write the outputs.

    ``progress(label, done, total)`` is called after each episode (for progress bars).
    """
    from twinloop.run.experiment import run_episode, summarize

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    task, world, proposer, refiner = build(cfg)
    seeds = episode_seeds(cfg)
    controllers = []
    if proposer is not None:
        controllers.append(("base", Controller(refiner, proposer, refine=False)))
    controllers.append(("refined", Controller(refiner, proposer, refine=True)))
    results = []
    all_eps = {}
    t_start = time.perf_counter()
    for name, ctl in controllers:
        ds = _dataset(out / "episodes" / name, cfg, task, world, name) if cfg.record else None
        eps = []
        for i, s in enumerate(seeds):
            r = run_episode(world, ctl, s, max_ticks=cfg.max_ticks, episode_index=i, record=ds is not None)
            if ds is not None:
                ds.write(r.recorder)
            r.recorder = None
            eps.append(r)
            if progress is not None:
                progress(name, i + 1, len(seeds))
        all_eps[name] = eps
        results.append(summarize(name, eps))
    summary = {
        "task": task.name,
        "world": world.describe(),
        "seed": cfg.seed,
        "episodes": cfg.episodes,
        "config": asdict(cfg),
        "wall_time_s": time.perf_counter() - t_start,
        "results": results,
        "per_episode": {k: [{"seed": e.seed, "success": e.success, "final_error": e.final_error,
                             "ticks": e.ticks} for e in v] for k, v in all_eps.items()},
    }
    write_json(out / "summary.json", summary)
    try:
        from twinloop.viz.plots import plot_comparison

        plot_comparison(summary, out / "comparison.png")
    except ImportError:  # pragma: no cover
        log("plotting unavailable (matplotlib missing)")
    if cfg.video:
        from twinloop.viz.video import RenderingUnavailable

        try:
            summary["video"] = str(render_refined_episode(cfg, all_eps.get("refined", []), out / "refined_episode.mp4"))
            write_json(out / "summary.json", summary)
        except RenderingUnavailable as exc:  # the results are written; only the video is missing
            log(f"no video: {exc}")
    return summary


def render_refined_episode(cfg: RunConfig, episodes, path: Path) -> Path:
    """Re-run one refined episode keeping the candidate rollouts, and render it with ghosts.

    Picks the first successful episode (the first one if none succeeded); the same seed gives
    the same episode, so this is the episode reported in the table.
    """
    from twinloop.run.experiment import run_episode
    from twinloop.viz.video import render_episode

    task, world, proposer, refiner = build(cfg, keep_rollouts=True)
    pick = next((e for e in episodes if e.success), episodes[0] if episodes else None)
    seed = pick.seed if pick is not None else episode_seeds(cfg)[0]
    ctl = Controller(refiner, proposer, refine=True)
    r = run_episode(world, ctl, seed, max_ticks=cfg.max_ticks, record=False, ghosts=ghost_traces(task))
    return render_episode(task, world.model, r.qpos, path, ghosts=r.ghosts, camera=task.camera,
                          fps=int(round(1 / task.control_period)))


def _dataset(root: Path, cfg: RunConfig, task, world, name: str):
    """A fresh dataset for this run's episodes (a previous run's in the same folder is replaced)."""
    import shutil

    from twinloop.data.episodes import Dataset

    if root.exists():
        shutil.rmtree(root)

    info = {
        "fps": 1.0 / task.control_period,
        "twinloop": {
            "task": task.name,
            "controller": name,
            "world": world.describe(),
            "seed": cfg.seed,
            "obs_names": list(task.obs_names),
            "param_names": task.param_space().names,
            "config": asdict(cfg),
        },
    }
    return Dataset.create(root, info)
