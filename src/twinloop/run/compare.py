"""Base proposer vs refined controller on the same seeds: the experiment behind `demo` and `run`.

Writes to ``cfg.experiment.out``::

    summary.json            shared schema (task, world, seed, episodes, results[...])
    comparison.png          success with 95% Wilson intervals, final error
    refined_episode.mp4     one refined episode, candidate rollouts drawn as ghost traces
    episodes/<controller>/  every episode, LeRobot-style Parquet dataset
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from twinloop.calib.monitor import ACTIONS
from twinloop.control import AsyncConfig, AsyncController
from twinloop.data.dataset import Dataset
from twinloop.data.episodes import recorded_on
from twinloop.errors import TwinloopError, choose, number
from twinloop.io import output_folder, write_json
from twinloop.policies import check_proposer
from twinloop.run.build import (  # noqa: F401 - the building half, importable from here as before
    build,
    calibrate_monitor,
    candidate_sources_of,
    controller_in_world,
    episode_seeds,
    monitor_config,
    monitor_seeds,
    monitor_world,
    planning_particles,
    refined_controller,
    refiner_twin,
    repair_options,
    world_seed,
)
from twinloop.run.config import composed, config_dict, sources_of
from twinloop.run.executor import EpisodeBatch, Executor, SerialExecutor
from twinloop.run.experiment import run_episode, summarize, write_partial
from twinloop.run.planning import planning_choice, planning_message
from twinloop.run.sections import CameraConfig, ExperimentConfig, GraspConfig, PlannerConfig
from twinloop.run.validation import check_validation, validate_planning_twin
from twinloop.tasks import task_defaults
from twinloop.viz.plots import plot_comparison
from twinloop.viz.video import (
    RenderingUnavailable,
    camera_beside,
    ghosts_from_rollouts,
    render_episode,
    render_frames,
    write_frames,
)
from twinloop.worlds import SEEDED_WORLDS, PerEpisodeWorld, RealtimeWorld, SimWorld
from twinloop.worlds.camera import CameraWorld

#: the flat names of the grasp section's fields (``RunConfig(repair=True, repair_push=2)``)
GRASP_NAMES = {"repair": "grasp.repair", "repair_push": "grasp.push", "repair_reach": "grasp.reach",
               "repair_regrasp_reach": "grasp.regrasp_reach", "repair_commit": "grasp.commit",
               "observer": "grasp.observer", "twin_resolution": "grasp.twin_resolution",
               "perception_shifts": "camera.shifts"}
#: what a run's controllers can see (``RunConfig.observe``)
OBSERVE = ("state", "rgb")


@composed(GRASP_NAMES)
@dataclass(frozen=True)
class RunConfig:
    """Every choice of a comparison run: base proposer vs refined controller on the same seeds.

    Flat construction reaches the sections' fields (``RunConfig(task="pivot", episodes=2)``);
    the command line names them by path (``--set planner.refiner.n_knots=3``).

    Attributes:
        planner: how the refined controller plans (:class:`~twinloop.run.sections.PlannerConfig`).
        experiment: task, world, episodes, seeds, outputs
            (:class:`~twinloop.run.sections.ExperimentConfig`).
        grasp: the grasp tasks' repair and observer (:class:`~twinloop.run.sections.GraspConfig`);
            ``None``: neither.
        proposer: the base policy: ``scripted`` (the task's own) | ``none`` (refinement from
            scratch; no baseline row); see ``twinloop.policies.PROPOSERS``.
        checkpoint: the policy file of proposer ``distilled`` (saved by ``twinloop distill``).
        proposal_samples: samples of a stochastic proposer (``distilled``, the planar tasks'
            scripts) offered to the refiner each tick besides its proposal: they join the first
            batch of any optimizer. At most ``planner.refiner.num_samples - 2``; 0: none.
        realtime: the world keeps its own clock and the refined controller plans
            asynchronously.
        rate: real-time world ticks per second (``None``: 10 per control period for a simulated
            world, a gymnasium or remote world's own step rate otherwise).
        async_control: the asynchronous controller's latency compensation and budget
            (:class:`~twinloop.control.AsyncConfig`).
        token: shared token of a ``remote:`` world.
        monitor: a live gap monitor on the refined controller and what its alarm does:
            ``flag`` | ``widen`` | ``refit`` | ``fallback`` | ``adapt`` (``None``: none). Its
            threshold is calibrated on ``monitor_episodes`` refined episodes recorded first in the
            nominal counterpart of the world (its noise, delay and engine); simulated worlds, not
            in real time.
        monitor_episodes: nominal episodes the monitor's threshold is calibrated on (at most 20000,
            on seeds ``seed * 100000 + 50000 + i``; the measured episodes then stay below 50000).
        observe: what the controllers see: ``state`` (the world's observation vector) | ``rgb``
            (camera images of a simulated world, under an appearance shift of the world's
            ``severity`` drawn by its seed, plus the robot's own joint state, read by
            ``perception``). Not in real time.
        camera: with ``observe='rgb'``, how the images are read: the perception checkpoint, the
            appearance shift, shifted copies (:class:`~twinloop.run.sections.CameraConfig`; flat:
            ``perception``, ``appearance``, ``perception_shifts``).

    The optimizer and noise a config leaves to its task are filled in when it is made, so a
    config (and the ``summary.json`` written from it) names the ones that run.
    """

    planner: PlannerConfig = field(default_factory=PlannerConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    grasp: GraspConfig | None = None
    proposer: str = "scripted"
    checkpoint: str | None = None
    proposal_samples: int = 0
    realtime: bool = False
    rate: float | None = None
    async_control: AsyncConfig = field(default_factory=AsyncConfig)
    token: str | None = field(default=None, repr=False)
    monitor: str | None = None
    monitor_episodes: int = 4
    observe: str = "state"
    camera: CameraConfig = field(default_factory=CameraConfig)

    def __post_init__(self):
        for name, kind in (("planner", PlannerConfig), ("experiment", ExperimentConfig), ("grasp", GraspConfig),
                           ("async_control", AsyncConfig), ("camera", CameraConfig)):
            v = getattr(self, name)
            if not isinstance(v, kind) and not (name == "grasp" and v is None):
                raise TwinloopError(f"{name} must be a {kind.__name__}, got {type(v).__name__}")
        object.__setattr__(self, "planner", self.planner.for_task(self.experiment.task))
        check_proposer(self.proposer)
        if self.rate is not None:
            object.__setattr__(self, "rate", number(self.rate, "rate (Hz)", low=0, low_open=True))
        # the incumbent and the prior take two of the first batch's candidates
        object.__setattr__(self, "proposal_samples", number(self.proposal_samples, "proposal_samples", low=0,
                                                            high=self.planner.refiner.num_samples - 2, integer=True))
        object.__setattr__(self, "monitor_episodes", number(self.monitor_episodes, "monitor_episodes", low=1,
                                                            integer=True))
        if self.monitor is not None:
            choose("monitor", self.monitor, ACTIONS)
        choose("observe", self.observe, OBSERVE)
        if self.perception is not None and self.observe != "rgb":
            raise TwinloopError(f"perception={self.perception!r} reads camera images: it needs observe='rgb' "
                                f"(got observe={self.observe!r})")
        if self.appearance is not None and self.observe != "rgb":
            raise TwinloopError(f"appearance={self.appearance} shifts camera images; it needs observe='rgb'")
        if self.realtime:
            self._check_realtime()
        self._check_validation()

    def _check_validation(self) -> None:
        e = self.experiment
        if self.monitor:  # the seed's block: measured episodes below 50000, the monitor's 50000-69999
            if e.first_episode + e.episodes > 50_000:
                raise TwinloopError(f"with a monitor, first_episode + episodes must be <= 50000 (the monitor's episode "
                                    f"seeds start there), got {e.first_episode} + {e.episodes}")
            if self.monitor_episodes > 20_000:
                raise TwinloopError(f"monitor_episodes must be <= 20000 (its episode seeds, seed * 100000 + 50000 + i, "
                                    f"stay below the validation's), got {self.monitor_episodes}")
        monitored = [e.seed * 100_000 + 50_000 + i for i in range(self.monitor_episodes)] if self.monitor else []
        check_validation(self, monitored)

    def _check_realtime(self) -> None:
        g = self.grasp or GraspConfig()
        for on, why in (
                (self.experiment.world_per_episode, "world_per_episode cannot run in real time (realtime=True): a "
                 "real-time world keeps one clock for the whole run"),
                (self.monitor is not None, f"monitor={self.monitor!r} watches the synchronous refined controller; it "
                 "cannot run in real time (realtime=True)"),
                (g.commit is not None, "repair_commit carries a repair on tick by tick; it cannot run in real time "
                 "(realtime=True)"),
                (self.observe == "rgb", "observe='rgb' renders the world's images between its steps; it cannot run "
                 "in real time (realtime=True)"),
                (g.observer, "observer=True predicts the last estimate one control tick ahead; the real-time "
                 "controller's ticks have no fixed period (realtime=True)"),
                (self.experiment.view, "view=True watches the synchronous controller's ticks; it cannot run in real "
                 "time (realtime=True)")):
            if on:
                raise TwinloopError(why)


def episode_stats(world, controller) -> dict:
    """What an episode reports besides its outcome (its per-episode row): a real-time world's
    deadline misses and the planner's cycles; a world distribution's draw (``world_seed``,
    ``world_params``); a monitor's ``alarms`` (tick, score, threshold, action) and ``refits``
    (the tick each took over, the estimate by parameter name); a simulated world's fastest body
    (``peak_body_speed`` in m/s, ``peak_body``: what ``Task.max_body_speed`` bounds)."""
    out = {}
    sim = world
    while isinstance(sim, (RealtimeWorld, PerEpisodeWorld, CameraWorld)):
        sim = sim.world
    if isinstance(sim, SimWorld):
        out.update(peak_body_speed=round(sim.peak_speed, 4), peak_body=sim.model.body(sim.peak_body).name)
    if isinstance(world, RealtimeWorld):
        out.update(world.stats(), **(controller.stats() if isinstance(controller, AsyncController) else {}))
    if isinstance(world, PerEpisodeWorld):
        out.update(world.drawn())
    out.update(controller.report())
    return out


def ghost_traces(task, max_candidates: int = 32) -> Callable:
    """``f(tick_info) -> Ghosts`` for videos: the paths of the task's trace points
    (``task.trace_points``) in the tick's candidate rollouts (first particle), the lowest-cost
    ones highlighted, the base proposal (the refiner's row 1) marked, and the plan sent marked:
    the lowest-cost candidate, or the base proposal where an acceptance rule sent it."""

    def f(tick):
        res = tick.result
        if res is None or res.rollouts is None:
            return None
        r = res.rollouts
        points = task.trace_points(r.qpos[0], r.sensordata[0])
        if points.shape[-2] == 0:
            return None
        base = 1 if np.isfinite(res.prior_cost) else None
        chosen = int(np.argmin(np.where(np.isfinite(res.costs), res.costs, np.inf)))
        if base is not None and tick.accept.startswith("base"):
            chosen = base
        return ghosts_from_rollouts(points, res.costs, chosen=chosen, max_candidates=max_candidates, base=base)

    return f


def world_ticks(cfg: RunConfig, task, world) -> int | None:
    """Episode length in the world's ticks (the task's, or ``cfg.experiment.max_ticks``, in control ticks)."""
    n = cfg.experiment.max_ticks or task.max_ticks
    return int(round(n * task.control_period / world.period))


def run_comparison(cfg: RunConfig, progress=None, log: Callable[[str], None] = print, mode: str = "new",
                   executor: Executor | None = None, sources: dict[str, str] | None = None) -> dict:
    """Run base (proposer alone) and refined controllers on the same seeds; write the outputs.

    ``progress(label, done, total)`` is called after each episode (for progress bars).
    ``mode``: ``new`` needs an absent or empty ``cfg.experiment.out``; ``overwrite`` replaces an
    earlier run there (see :func:`twinloop.io.output_folder`). ``executor``: where episodes run
    (default: serially here; the same results either way). An episode cut short by an error (a
    lost remote world) is written with what it recorded before the error propagates (in this
    process; a Ray worker's partial episode is lost with it). ``sources``: where each setting
    came from (:func:`~twinloop.run.config.configure`); ``None``: inferred from the values
    (:func:`~twinloop.run.config.sources_of`). ``summary.json`` records both.
    """
    asked, validation = cfg, None  # summary.json records the config as asked
    if cfg.planner.validate.episodes:  # the twin settled in closed loop first: the run then plans with the winner
        output_folder(cfg.experiment.out, mode)  # a bad --out fails before the validation's episodes
        cfg, validation = validate_planning_twin(cfg, log)
    task, world, proposer, refiner = build(cfg)  # the driver checks the twin and the output folder first
    view = None
    try:
        out = output_folder(cfg.experiment.out, mode)  # before the episodes: a bad --out fails now
        view = start_view(cfg, task, executor, log)
        planning = planning_choice(cfg, task, refiner.twin.param_space)[2]  # a posterior used, or why not
        if validation is not None:
            planning["reason"] = validation["reason"]
        if planning is not None:
            log(planning_message(planning))
        watch, monitor_info = None, None
        if cfg.monitor is not None:
            watch, monitor_info = calibrate_monitor(cfg, task, proposer, refiner, world.period, world)
            log(f"gap monitor ({cfg.monitor}): threshold {monitor_info['threshold']:.3g} from "
                f"{cfg.monitor_episodes} refined episodes in the nominal twin")
        names = (["base"] if proposer is not None else []) + ["refined"]
        t_start = time.perf_counter()
        all_eps = _run_episodes(cfg, task, world, names, out, watch, progress, executor, view)
    finally:
        world.close()  # a remote world's socket, a real-time world's clock
        if view is not None:
            view.close()
    summary = _summary(asked, task, world, refiner, all_eps, sources)
    summary["planning_twin"] = planning
    if validation is not None:
        summary["twin_validation"] = validation
    summary["wall_time_s"] = time.perf_counter() - t_start
    if monitor_info is not None:
        refined = all_eps["refined"]
        summary["monitor"] = {**monitor_info, "episodes_alarmed": sum(bool(e.stats["alarms"]) for e in refined),
                              "alarms": sum(len(e.stats["alarms"]) for e in refined)}
    write_json(out / "summary.json", summary)
    plot_comparison(summary, out / "comparison.png")
    if cfg.experiment.video and (cfg.realtime or not isinstance(world, (SimWorld, PerEpisodeWorld, CameraWorld))):
        log("no video: videos replay a simulated world in synchronous mode")
    elif cfg.experiment.video:
        try:
            summary["video"] = str(render_refined_episode(cfg, all_eps.get("refined", []), out / "refined_episode.mp4",
                                                          watch))
            write_json(out / "summary.json", summary)
        except RenderingUnavailable as exc:  # the results are written; only the video is missing
            log(f"no video: {exc}")
    return summary


def start_view(cfg: RunConfig, task, executor: Executor | None, log: Callable[[str], None]):
    """The run's live view (``cfg.experiment.view``), serving before any episode runs, or
    ``None``. It watches controllers in this process: the serial executor's."""
    e = cfg.experiment
    if not e.view:
        return None
    if executor is not None and not isinstance(executor, SerialExecutor):
        raise TwinloopError(f"view=True watches the controllers in this process; the {type(executor).__name__} runs "
                            "them elsewhere: use the serial executor")
    from twinloop.viz.live import open_view

    view = open_view(task, e.view_host, e.view_port)
    log(f"live view: {view.url}" + (f" ({view.frame_cap_missing})" if view.frame_cap_missing else ""))
    return view


def _run_episodes(cfg: RunConfig, task, world, names: list[str], out: Path, watch, progress,
                  executor: Executor | None, view=None) -> dict[str, list]:
    """Every controller's episodes (``{name: [EpisodeResult]}``), each written to its dataset as
    it arrives; an episode cut short by an error is written with what it recorded."""
    seeds = episode_seeds(cfg)
    record = cfg.experiment.record
    datasets = {n: _dataset(out / "episodes" / n, cfg, task, world, n) for n in names} if record else {}
    n_ticks = world_ticks(cfg, task, world)
    batches = [EpisodeBatch(partial(controller_in_world, cfg, n, watch, view), seeds,
                            options={"max_ticks": n_ticks, "record": record}, stats=episode_stats)
               for n in names]
    counts = dict.fromkeys(names, 0)
    current = [0]

    def on_episode(b: int, r) -> None:
        name = names[b]
        if r.recorder is not None:  # written as it arrives: a failure later loses no episode
            datasets[name].write(r.recorder)
            r.recorder = None
        counts[name] += 1
        current[0] = b + (counts[name] == len(seeds))
        if progress is not None:
            progress(name, counts[name], len(seeds))

    try:
        runs = (executor or SerialExecutor()).run(batches, on_episode)
    except BaseException as exc:  # Ctrl-C too: the frames it recorded are kept
        write_partial(datasets.get(names[min(current[0], len(names) - 1)]), exc)
        raise
    return dict(zip(names, runs, strict=True))


def _summary(cfg: RunConfig, task, world, refiner, all_eps: dict, sources: dict | None) -> dict:
    """``summary.json``'s shared schema for a comparison's episodes."""
    one_world_seed = world_seed(cfg) if cfg.experiment.world in SEEDED_WORLDS else None  # a row's world_seed otherwise
    results = []
    for name, eps in all_eps.items():
        results.append(summarize(name, eps))
        if cfg.realtime:
            results[-1]["realtime"] = realtime_summary([e.stats for e in eps])
    extra = ("world_params", "alarms", "refits", "rejected_refits", "accept", "twin_cost_error", "peak_body_speed",
             "peak_body", "tuned")
    return {
        "task": task.name,
        "error_unit": getattr(task, "error_unit", ""),  # the unit of every final error below
        "world": world.describe(),
        "seed": cfg.experiment.seed,
        "episodes": cfg.experiment.episodes,
        "config": config_dict(cfg),
        "config_sources": sources or sources_of(cfg, task_defaults(cfg.experiment.task)),
        "wall_time_s": None,
        "results": results,
        # what the refined controller plans with (null: the nominal twin)
        "planning_params": None if refiner.params is None else
        [dict(zip(refiner.twin.param_space.names, map(float, p))) for p in refiner.params],
        "world_per_episode": cfg.experiment.world_per_episode,
        "per_episode": {k: [{"seed": e.seed, "world_seed": e.stats.get("world_seed", one_world_seed), "success": e.success,
                             "final_error": e.final_error, "ticks": e.ticks, "failure": e.failure,
                             **{s: e.stats[s] for s in extra if s in e.stats}}
                            for e in v] for k, v in all_eps.items()},
    }


def realtime_summary(rows: list[dict]) -> dict:
    """Per-episode real-time statistics (world ticks, planner cycles) -> one row: deadline
    misses over all ticks, medians of the per-episode medians, worst maxima; what the planner
    spent per cycle (deadline, iterations, samples: medians of the episodes' medians; the fewest
    samples; cycles cut by the deadline, cycles longer than a world tick)."""
    ticks = sum(r["ticks"] for r in rows)
    out = {"ticks": ticks, "misses": sum(r["misses"] for r in rows),
           "miss_rate": sum(r["misses"] for r in rows) / max(ticks, 1),
           "action_age_median": float(np.nanmedian([r["age_median"] for r in rows])),
           "lateness_p99_max": float(np.nanmax([r["lateness_p99"] for r in rows]))}
    if "cycles" in rows[0]:
        out.update(cycles=sum(r["cycles"] for r in rows), overruns=sum(r["overruns"] for r in rows),
                   cycle_median=float(np.nanmedian([r["cycle_median"] for r in rows])),
                   cycle_max=float(np.nanmax([r["cycle_max"] for r in rows])),
                   lead_median=float(np.nanmedian([r["lead_median"] for r in rows])))
    if "samples_median" in rows[0]:
        out.update({k: _nan(np.nanmedian, [r[k] for r in rows])
                    for k in ("deadline_median", "iterations_median", "samples_median")},
                   samples_min=_nan(np.nanmin, [r["samples_min"] for r in rows]),
                   cut_cycles=sum(r["cut_cycles"] for r in rows), late_cycles=sum(r["late_cycles"] for r in rows))
    return out


def _nan(f, values) -> float:
    """``f`` of ``values`` ignoring NaN; NaN when all are (no deadline, no cycles)."""
    v = np.asarray(values, dtype=float)
    return float(f(v)) if np.isfinite(v).any() else float("nan")


def render_refined_episode(cfg: RunConfig, episodes, path: Path, watch: tuple | None = None) -> Path:
    """Re-run one refined episode keeping the candidate rollouts, and render it with ghosts.

    Picks the first successful episode (the first one if none succeeded); the same seed gives
    the same episode (watched by the same monitor, ``watch``), so this is the episode reported
    in the table.
    """
    task, world, proposer, refiner = build(cfg, keep_rollouts=True)
    pick = next((e for e in episodes if e.success), episodes[0] if episodes else None)
    seed = pick.seed if pick is not None else episode_seeds(cfg)[0]
    ctl = refined_controller(cfg, task, proposer, refiner, watch)
    ghosts, seen = ghost_traces(task), []
    if cfg.observe == "rgb":  # keep what the camera saw and the state estimated from it
        traces = ghosts

        def ghosts(tick):
            seen.append((next(iter(world.last_obs.images.values())), ctl.last_state[: task.model.nq]))
            return traces(tick)
    r = run_episode(world, ctl, seed, max_ticks=cfg.experiment.max_ticks, record=False, ghosts=ghosts)
    fps = int(round(1 / task.control_period))
    if not seen:
        return render_episode(task, world.model, r.qpos, path, ghosts=r.ghosts, camera=task.camera, fps=fps)
    views = render_frames(task, world.model, r.qpos, ghosts=r.ghosts, camera=task.camera)
    images, states = zip(*seen, strict=True)
    return write_frames(camera_beside(views, images, states, task), path, fps)


def _dataset(root: Path, cfg: RunConfig, task, world, name: str):
    """A new dataset for this run's episodes (its output folder is new or emptied)."""
    info = {
        "fps": 1.0 / world.period,
        "twinloop": {
            **recorded_on(task),
            "controller": name,
            "world": world.describe(),
            "seed": cfg.experiment.seed,
            "obs_names": list(task.obs_names),
            "param_names": task.param_space().names,
            "config": config_dict(cfg),
        },
    }
    return Dataset.create(root, info)
