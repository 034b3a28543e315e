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
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

from twinloop.calib.monitor import ACTIONS, GapMonitor, MonitorConfig
from twinloop.calib.windows import record_trajectory
from twinloop.control import (
    AsyncConfig,
    AsyncController,
    Controller,
    Refiner,
    RefinerConfig,
    check_samples,
    check_timestep,
)
from twinloop.data.dataset import Dataset
from twinloop.errors import TwinloopError, choose, number
from twinloop.io import output_folder, write_json
from twinloop.plan import OPTIMIZER_NAMES, LLMConfig, make_optimizer
from twinloop.policies import PROPOSERS, make_proposer
from twinloop.run.executor import EpisodeBatch, Executor, SerialExecutor
from twinloop.run.experiment import run_episode, summarize, write_partial
from twinloop.run.planning import planning_choice, planning_message
from twinloop.tasks import TASKS, make_task, task_preferences
from twinloop.twin import BACKENDS, make_twin
from twinloop.viz.plots import plot_comparison
from twinloop.viz.video import RenderingUnavailable, ghosts_from_rollouts, render_episode
from twinloop.worlds import (
    SEEDED_WORLDS,
    PerEpisodeWorld,
    RealtimeWorld,
    SimWorld,
    TwinWorld,
    make_world,
    resolve_world,
)
from twinloop.worlds.shifted import nominal_counterpart


@dataclass(frozen=True)
class RunConfig:
    """Every choice of a comparison run (the CLI mirrors these fields).

    Attributes:
        task: a registered task (``twinloop.tasks.TASKS``).
        optimizer: a registered optimizer (``twinloop.plan.OPTIMIZERS``), or ``llm+<one of
            them>`` (``llm``: ``llm+mppi``): guided by a language model, needs
            ``refiner.iterations >= 2``. ``None``: the task's (:attr:`Task.optimizer
            <twinloop.tasks.Task.optimizer>`: ``mppi``, ``predictive`` for the arm tasks).
        backend: a twin backend (``twinloop.twin.BACKENDS``).
        refiner: the refiner's knobs (K candidates, horizon, iterations per tick, risk,
            ``prune``, ``carry`` ...).
        world: a registered world (``twinloop.worlds.WORLDS``): ``shifted`` (hidden physics,
            noise, delay) | ``nominal`` (the twin itself) | ``gym`` / ``gym:ENV_ID`` /
            ``gym:MODULE:ENV_ID`` (a gymnasium env through the task's maps; ``MODULE`` is
            imported first, which registers a third-party env) | ``remote:ADDRESS``
            (``serve-world``).
        severity: ShiftedWorld severity (0-3).
        proposer: ``scripted`` (the task's own) | ``none`` (refinement from scratch; no
            baseline row); see ``twinloop.policies.PROPOSERS``.
        checkpoint: the policy file of proposer ``distilled`` (saved by ``twinloop distill``);
            only that proposer takes one.
        proposal_samples: samples of a stochastic proposer (one with ``sample``: ``distilled``,
            the planar tasks' scripts) offered to the refiner each tick besides its proposal
            (the prior): they join the first batch of any optimizer
            (:meth:`~twinloop.control.Refiner.refine`), rehearsed exactly with
            ``refiner.exact_prior``. At most ``refiner.num_samples - 2``; 0: the proposal alone.
        repair: offer the task's local repair (:meth:`Task.repair_primitive
            <twinloop.tasks.Task.repair_primitive>`; the grasp tasks': re-grasp or place a
            misplaced point near its goal) to the refined controller each tick, beside the
            proposal samples and the same way; the base row is the proposer alone either way.
            A task without one is refused.
        repair_push: with ``repair``, how many pushes of the points farthest from their goals
            the repair offers besides the grasped point's (``RepairConfig.push``; 0: none).
        repair_reach: with ``repair``, how far (m, horizontally) from its goal a point is still
            repaired (``RepairConfig.reach``; ``None``: the task's, 12 cm).
        repair_regrasp_reach: with ``repair``, the same for a re-grasp of a point let go
            (``RepairConfig.regrasp_reach``; ``None``: ``repair_reach``): a dropped point is
            re-grasped from farther while a place stays within ``repair_reach``.
        repair_commit: with ``repair``, carry a repair on once sent unless a plan costs less by
            more than this fraction of its cost (``RepairConfig.commit``; ``None``: off, each
            tick rates the repairs afresh over the horizon). Not in real time.
        episodes: episodes per controller.
        first_episode: index of the first episode: a run split into pieces (``first_episode``
            0 and 10 of ``episodes`` 10) runs the episodes one run of 20 does.
        seed: seeds the world's hidden physics (unless ``world_seed``) and, with the episode
            index, each episode (``seed * 100000 + i``).
        world_seed: seed of the world's hidden physics, if not ``seed``: new episodes (another
            ``seed``) in the same world. ``None``: ``seed``. Not with ``world_per_episode``.
        world_per_episode: a world distribution: each episode in its own world, whose world seed
            is the episode's seed (``seed * 100000 + index``;
            :class:`~twinloop.worlds.PerEpisodeWorld`): base and refined meet the same world on
            the same episode. Needs a world a seed draws (``twinloop.worlds.SEEDED_WORLDS``:
            ``shifted``); not in real time (one clock per run).
        max_ticks: episode length (default: the task's).
        out: output folder.
        video: render one refined episode with ghost rollouts.
        record: write every episode to ``out/episodes``.
        twin_timestep: the twin's physics timestep (s), coarser than the scene's to simulate
            fewer steps per tick (``None``, or not coarser than the scene's: the scene's).
            Checked once with :func:`~twinloop.control.check_timestep` (stability and
            candidate ranking). The defaults (K=32, 0.5 s, 10 ms twin steps: 1/8 of the
            rollout steps of K=64 x 1 s at 5 ms) are the speed study's best setting
            (``benchmarks/speed.py``, RESULTS.md).
        realtime: the world keeps its own clock (:class:`~twinloop.worlds.RealtimeWorld`) and
            the refined controller plans asynchronously (:class:`~twinloop.control.AsyncController`).
        rate: world ticks per wall-clock second in real time. Default: 10 ticks per control
            period for a simulated world (``nominal``/``shifted``, stepped finer so actions
            apply as they arrive), a gymnasium or remote world's own step rate otherwise.
        async_control: :class:`~twinloop.control.AsyncConfig` (latency compensation, budget).
        token: shared token of a ``remote:`` world.
        llm: the language model of an ``llm+...`` optimizer.
        noise: the optimizer's sampling noise, a fraction of each action's half-range. ``None``:
            the task's (:attr:`Task.sampling_noise <twinloop.tasks.Task.sampling_noise>`: 0.05
            for the arm tasks), else the optimizer's default.
        particles: parameter particles the refiner plans under (domain randomization): the
            nominal values and ``particles - 1`` draws from the prior of the task's
            ``param_space()`` (:meth:`~twinloop.params.ParamSpace.prior_particles`, seeded by
            ``seed``); each candidate's costs over them are aggregated by ``refiner.risk``. 0 or 1:
            the nominal twin alone. Costs P times the rollouts per tick. With ``posterior``: the
            posterior's first ``particles`` samples instead (its estimate first).
        posterior: a saved calibration (``posterior.json`` of ``twinloop calibrate``, ``evaluate``
            or ``distill``) the refiner plans with: its estimate (or, with ``particles`` >= 2,
            its samples) in place of the nominal parameters. ``None``: the nominal twin. The
            base proposer and the world are unchanged.
        observer: the refined controller estimates the state with the task's stateful observer
            (:meth:`GraspTask.observer <twinloop.tasks.deformable.GraspTask.observer>`: the last
            estimate predicted a tick ahead in the twin, at the planning parameters' first
            particle, and corrected to the keypoints) instead of the stateless
            ``task.state_from_obs``; the base controller keeps the stateless one. Grasp tasks;
            not in real time.
        monitor: a live gap monitor on the refined controller (:class:`~twinloop.calib.monitor.
            GapMonitor`), what its alarm does: ``flag`` (record only) | ``widen`` | ``refit`` |
            ``fallback`` | ``adapt`` (``refit``, and the actuators' gains refit at tick 10 whatever
            the score); ``None``: no monitor. Its threshold is calibrated on
            ``monitor_episodes`` refined episodes the run records first in the nominal
            counterpart of its world (:func:`monitor_world`: for a shifted world its noise, delay
            and engine with the twin's own parameters; for any other world (gymnasium, another
            engine, remote) the twin's own scene with the world's declared observation noise, if
            any), seeded by ``seed`` (:func:`monitor_seeds`). Each refined episode's row lists its
            alarms and refits; ``summary.json`` says the threshold and where it came from. Not in
            real time.
        monitor_episodes: nominal episodes the monitor's threshold is calibrated on.

    The optimizer and noise a config leaves to its task are filled in when it is made, so a
    config (and the ``summary.json`` written from it) names the ones that run.
    """

    task: str = "push-t"
    optimizer: str | None = None
    backend: str = "mujoco"
    refiner: RefinerConfig = field(default_factory=lambda: RefinerConfig(num_samples=32, horizon=0.5))
    world: str = "shifted"
    severity: int = 2
    proposer: str = "scripted"
    checkpoint: str | None = None
    proposal_samples: int = 0
    repair: bool = False
    repair_push: int = 0
    repair_reach: float | None = None
    repair_regrasp_reach: float | None = None
    repair_commit: float | None = None
    episodes: int = 20
    first_episode: int = 0
    seed: int = 0
    world_seed: int | None = None
    world_per_episode: bool = False
    max_ticks: int | None = None
    out: str = "twinloop-out"
    video: bool = True
    record: bool = True
    twin_timestep: float | None = 0.01
    realtime: bool = False
    rate: float | None = None
    async_control: AsyncConfig = field(default_factory=AsyncConfig)
    token: str | None = field(default=None, repr=False)
    llm: LLMConfig = field(default_factory=LLMConfig)
    noise: float | None = None
    particles: int = 0
    posterior: str | None = None
    observer: bool = False
    monitor: str | None = None
    monitor_episodes: int = 4

    def __post_init__(self):
        choose("task", self.task, tuple(TASKS))
        optimizer, noise = task_preferences(self.task, self.optimizer, self.noise)
        object.__setattr__(self, "optimizer", optimizer)
        object.__setattr__(self, "noise", noise)
        choose("optimizer", self.optimizer, OPTIMIZER_NAMES)
        choose("backend", self.backend, BACKENDS)
        resolve_world(self.world)
        choose("proposer", self.proposer, tuple(PROPOSERS))
        object.__setattr__(self, "episodes", number(self.episodes, "episodes", low=1, integer=True))
        object.__setattr__(self, "first_episode", number(self.first_episode, "first_episode", low=0, high=99_999,
                                                         integer=True))
        object.__setattr__(self, "severity", number(self.severity, "severity", low=0, high=3, integer=True))
        object.__setattr__(self, "particles", number(self.particles, "particles", low=0, integer=True))
        if self.world_seed is not None:
            object.__setattr__(self, "world_seed", number(self.world_seed, "world_seed", low=0, integer=True))
            if self.world_per_episode:
                raise TwinloopError(f"world_seed={self.world_seed} names one world, but world_per_episode draws each "
                                    "episode's world from the episode's seed: pass one of them")
        if self.max_ticks is not None:
            object.__setattr__(self, "max_ticks", number(self.max_ticks, "max_ticks", low=1, integer=True))
        if self.twin_timestep is not None:
            object.__setattr__(self, "twin_timestep", number(self.twin_timestep, "twin_timestep (s)", low=0, low_open=True))
        if self.rate is not None:
            object.__setattr__(self, "rate", number(self.rate, "rate (Hz)", low=0, low_open=True))
        if self.world_per_episode and self.world not in SEEDED_WORLDS:
            raise TwinloopError(f"world_per_episode draws each episode's world from a seed; world {self.world!r} "
                                f"takes none (seeded worlds: {', '.join(SEEDED_WORLDS)})")
        if self.world_per_episode and self.realtime:
            raise TwinloopError("world_per_episode cannot run in real time (realtime=True): a real-time world "
                                "keeps one clock for the whole run")
        if not isinstance(self.async_control, AsyncConfig):
            raise TwinloopError(f"async_control must be an AsyncConfig, got {type(self.async_control).__name__}")
        if not isinstance(self.refiner, RefinerConfig):
            raise TwinloopError(f"refiner must be a RefinerConfig, got {type(self.refiner).__name__}")
        # the incumbent and the prior take two of the first batch's candidates
        object.__setattr__(self, "proposal_samples", number(self.proposal_samples, "proposal_samples", low=0,
                                                            high=self.refiner.num_samples - 2, integer=True))
        if self.monitor is not None:
            choose("monitor", self.monitor, ACTIONS)
            if self.realtime:
                raise TwinloopError(f"monitor={self.monitor!r} watches the synchronous refined controller; it cannot "
                                    "run in real time (realtime=True)")
        object.__setattr__(self, "monitor_episodes", number(self.monitor_episodes, "monitor_episodes", low=1,
                                                            integer=True))
        object.__setattr__(self, "repair_push", number(self.repair_push, "repair_push", low=0, integer=True))
        if self.repair_push and not self.repair:
            raise TwinloopError(f"repair_push={self.repair_push} needs repair=True")
        for name, low_open in (("repair_reach", True), ("repair_regrasp_reach", True), ("repair_commit", False)):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, number(v, name, low=0.0, low_open=low_open))
                if not self.repair:
                    raise TwinloopError(f"{name}={v} needs repair=True")
        if self.repair_commit is not None and self.realtime:
            raise TwinloopError("repair_commit carries a repair on tick by tick; it cannot run in real time "
                                "(realtime=True)")
        if self.observer and self.realtime:
            raise TwinloopError("observer=True predicts the last estimate one control tick ahead; the real-time "
                                "controller's ticks have no fixed period (realtime=True)")
        if self.optimizer.startswith("llm") and self.refiner.iterations < 2:
            raise TwinloopError(f"optimizer {self.optimizer!r} adds the model's plans to the next iteration's "
                                f"batch: it needs iterations >= 2, got {self.refiner.iterations}")


def build(cfg: RunConfig, keep_rollouts: bool = False, check_twin: bool = True):
    """(task, world, proposer, refiner) for a config; in real time the world is a
    :class:`~twinloop.worlds.RealtimeWorld` (see :attr:`RunConfig.rate`), with
    ``world_per_episode`` a :class:`~twinloop.worlds.PerEpisodeWorld`. ``check_twin``: check a
    coarser twin timestep once (the driver does; the workers building the same twin need not)."""
    task = make_task(cfg.task)
    sim = cfg.world in ("nominal", "shifted")
    period = None
    if cfg.realtime and sim:
        period = 1.0 / cfg.rate if cfg.rate else task.control_period / 10

    def world_of(seed: int):
        return make_world(task, cfg.world, severity=cfg.severity, seed=seed, period=period, token=cfg.token)

    world = PerEpisodeWorld(world_of, episode_seeds(cfg)[0]) if cfg.world_per_episode else world_of(world_seed(cfg))
    if cfg.realtime:
        world = RealtimeWorld(world, rate=cfg.rate if not sim else None)
    proposer = make_proposer(task, cfg.proposer, **({"checkpoint": cfg.checkpoint} if cfg.checkpoint else {}))
    check_samples(proposer, cfg.proposal_samples, cfg.proposer)  # before the base row runs, not after it
    if cfg.observer and not callable(getattr(task, "observer", None)):
        raise TwinloopError(f"observer=True: task {cfg.task!r} has no stateful observer (the grasp tasks have)")
    if cfg.repair and task.repair_primitive() is None:
        raise TwinloopError(f"repair=True: task {cfg.task!r} has no repair primitive (Task.repair_primitive)")
    if cfg.monitor == "fallback" and proposer is None:
        raise TwinloopError(f"monitor='fallback' falls back to the base proposer; proposer {cfg.proposer!r} has none")
    if cfg.monitor in ("widen", "refit", "adapt") and not len(task.param_space()):
        raise TwinloopError(f"monitor={cfg.monitor!r} changes the twin's parameters; task {cfg.task!r} has none")
    if cfg.monitor == "adapt" and not task.param_space().on("actuator"):
        raise TwinloopError(f"monitor='adapt' refits the actuators' parameters; task {cfg.task!r} has none among "
                            f"{task.param_space().names}")
    twin = refiner_twin(task, cfg.backend, cfg.twin_timestep, cfg.refiner.horizon, cfg.seed, check_twin)
    params, delay, _ = planning_choice(cfg, task, twin.param_space)
    rcfg = cfg.refiner if delay == cfg.refiner.actuation_delay else replace(cfg.refiner, actuation_delay=delay)
    refiner = Refiner(task, twin, make_optimizer(cfg.optimizer, llm=cfg.llm, noise=cfg.noise), rcfg,
                      params=params, keep_rollouts=keep_rollouts)
    return task, world, proposer, refiner


def refiner_twin(task, backend: str = "mujoco", timestep: float | None = None, horizon: float | None = None,
                 seed: int = 0, check: bool = True):
    """The twin a refiner plans in: ``backend`` at ``timestep`` (s) when that is coarser than the
    scene's, checked once (``check``) to rank candidates as the scene's own step does over
    ``horizon`` (:func:`~twinloop.control.check_timestep`)."""
    twin = make_twin(backend, task.model, task.param_space())
    if timestep is not None and timestep > task.model.opt.timestep * (1 + 1e-9):
        coarse = make_twin(backend, task.model, task.param_space(), timestep=timestep)
        if check:
            check_timestep(task, coarse, twin, horizon=horizon, seed=seed)
        twin = coarse
    return twin


def controller_in_world(cfg: RunConfig, name: str, watch: tuple | None = None):
    """``(world, controller)`` of the comparison's controller ``name`` (``base`` | ``refined``):
    the picklable factory of an :class:`~twinloop.run.executor.EpisodeBatch`. The refined
    controller of a run with ``cfg.monitor`` watches with ``watch``, the ``(error, threshold)``
    calibrated by :func:`calibrate_monitor`."""
    task, world, proposer, refiner = build(cfg, check_twin=False)
    if name == "base":
        return world, Controller(refiner, proposer, refine=False)
    if cfg.realtime:
        return world, AsyncController(refiner, proposer, cfg.async_control, proposal_samples=cfg.proposal_samples,
                                      repair=repair_of(task, cfg))
    return world, refined_controller(cfg, task, proposer, refiner, watch)


def refined_controller(cfg: RunConfig, task, proposer, refiner, watch: tuple | None = None) -> Controller:
    """The synchronous refined controller, watched by the run's gap monitor (if any) with
    ``watch = (error, threshold)``."""
    monitor = None
    if cfg.monitor is not None:
        if watch is None:
            raise TwinloopError("a monitored run's refined controller needs the monitor's (error, threshold)")
        monitor = GapMonitor(task, refiner.twin, *watch, monitor_config(cfg))
    return Controller(refiner, proposer, monitor=monitor, proposal_samples=cfg.proposal_samples,
                      repair=repair_of(task, cfg), observer=observer_of(task, cfg, refiner))


def observer_of(task, cfg: RunConfig, refiner):
    """The refined controller's stateful observer (:attr:`RunConfig.observer`), or ``None``."""
    if not cfg.observer:
        return None
    return task.observer(None if refiner.params is None else refiner.params[0])


def repair_of(task, cfg: RunConfig):
    """The refined controller's repair: the task's, with ``cfg.repair_push`` pushes, its reach,
    re-grasp reach and commit margin, or ``None``."""
    if not cfg.repair:
        return None
    return task.repair_primitive(push=cfg.repair_push, reach=cfg.repair_reach, commit=cfg.repair_commit,
                                 regrasp_reach=cfg.repair_regrasp_reach)


def monitor_config(cfg: RunConfig) -> MonitorConfig:
    """The gap monitor of a run (its action; the library's defaults otherwise, seeded by ``cfg.seed``)."""
    return MonitorConfig(action=cfg.monitor, seed=cfg.seed)


def monitor_seeds(cfg: RunConfig) -> list[int]:
    """Seeds of the nominal episodes a run's monitor threshold is calibrated on: after the
    run's own block of episode seeds (``seed * 100000 + 50000 + i``)."""
    return [cfg.seed * 100_000 + 50_000 + i for i in range(cfg.monitor_episodes)]


def monitor_world(cfg: RunConfig, task, period: float, world=None):
    """Where a run's monitor threshold is calibrated: a world that behaves like the twin. For
    ``shifted`` its nominal counterpart (:func:`~twinloop.worlds.shifted.nominal_counterpart`:
    its noise, delay and engine); for ``nominal`` the twin itself; for any other world the
    twin's own scene with the world's observation noise where it declares one (``obs_noise``):
    what a gymnasium env, another engine or a robot hides is unknown, and reads as gap."""
    if cfg.world in ("shifted", "nominal"):
        return nominal_counterpart(task, cfg.severity if cfg.world == "shifted" else 0, period)
    noise = getattr(world, "obs_noise", None)
    return TwinWorld(task, obs_noise=noise, period=period)


def calibrate_monitor(cfg: RunConfig, task, proposer, refiner, period: float, world=None) -> tuple[tuple, dict]:
    """Record ``cfg.monitor_episodes`` refined episodes (no monitor, ``cfg.max_ticks`` or the
    task's length, not stopped at success) in the nominal counterpart of the run's world and
    calibrate the monitor on them (:meth:`GapMonitor.from_nominal`). Returns the monitor's
    ``(error, threshold)`` (see :func:`controller_in_world`) and what ``summary.json`` says
    about it."""
    world = monitor_world(cfg, task, period, world)
    ctl = Controller(refiner, proposer)
    ticks = cfg.max_ticks or task.max_ticks
    trajs = []
    for s in monitor_seeds(cfg):
        ctl.reset(s)
        trajs.append(record_trajectory(world, lambda obs, _k: ctl.act(obs), s, ticks))
    mcfg = monitor_config(cfg)
    m = GapMonitor.from_nominal(task, refiner.twin, trajs, mcfg, params=refiner.params)
    return (m.error, m.threshold), {"action": cfg.monitor, "threshold": m.threshold, "window": mcfg.window,
                         "quantile": mcfg.quantile, "margin": mcfg.margin, "nominal_seeds": monitor_seeds(cfg),
                         "nominal_ticks": ticks, "nominal_world": world.describe()}


def episode_stats(world, controller) -> dict:
    """What an episode reports besides its outcome (its per-episode row): a real-time world's
    deadline misses and the planner's cycles; a world distribution's draw (``world_seed``,
    ``world_params``); a monitor's ``alarms`` (tick, score, threshold, action) and ``refits``
    (the tick each took over, the estimate by parameter name); a simulated world's fastest body
    (``peak_body_speed`` in m/s, ``peak_body``: what ``Task.max_body_speed`` bounds)."""
    out = {}
    sim = world
    while isinstance(sim, (RealtimeWorld, PerEpisodeWorld)):
        sim = sim.world
    if isinstance(sim, SimWorld):
        out.update(peak_body_speed=round(sim.peak_speed, 4), peak_body=sim.model.body(sim.peak_body).name)
    if isinstance(world, RealtimeWorld):
        out.update(world.stats(), **(controller.stats() if isinstance(controller, AsyncController) else {}))
    if isinstance(world, PerEpisodeWorld):
        out.update(world.drawn())
    m = controller.monitor
    if m is not None:
        names = controller.refiner.twin.param_space.names
        out["alarms"] = [asdict(a) for a in m.alarms]
        out["refits"] = [{"tick": t, "params": dict(zip(names, map(float, x), strict=True))} for t, x in m.refits]
        out["rejected_refits"] = [{"tick": t, "reason": why} for t, why in m.rejected]
    return out


def world_seed(cfg: RunConfig) -> int:
    """The seed of a run's one world: ``cfg.world_seed``, else ``cfg.seed``."""
    return cfg.seed if cfg.world_seed is None else cfg.world_seed


def episode_seeds(cfg: RunConfig) -> list[int]:
    return [cfg.seed * 100_000 + cfg.first_episode + i for i in range(cfg.episodes)]


def ghost_traces(task, max_candidates: int = 32) -> Callable:
    """``f(tick_info) -> Ghosts`` for videos: the paths of the task's trace points
    (``task.trace_points``) in the tick's candidate rollouts (first particle), the lowest-cost
    ones highlighted and the chosen plan marked."""

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


def world_ticks(cfg: RunConfig, task, world) -> int | None:
    """Episode length in the world's ticks (the task's, or ``cfg.max_ticks``, in control ticks)."""
    n = cfg.max_ticks or task.max_ticks
    return int(round(n * task.control_period / world.period))


def run_comparison(cfg: RunConfig, progress=None, log: Callable[[str], None] = print, mode: str = "new",
                   executor: Executor | None = None) -> dict:
    """Run base (proposer alone) and refined controllers on the same seeds; write the outputs.

    ``progress(label, done, total)`` is called after each episode (for progress bars).
    ``mode``: ``new`` needs an absent or empty ``cfg.out``; ``overwrite`` replaces an
    earlier run there (see :func:`twinloop.io.output_folder`). ``executor``: where episodes run
    (default: serially here; the same results either way). An episode cut short by an error (a
    lost remote world) is written with what it recorded before the error propagates (in this
    process; a Ray worker's partial episode is lost with it).
    """
    task, world, proposer, refiner = build(cfg)  # the driver checks the twin and the output folder first
    try:
        out = output_folder(cfg.out, mode)  # before the episodes: a bad --out fails now
        planning = planning_choice(cfg, task, refiner.twin.param_space)[2]
        if planning is not None:
            log(planning_message(planning))
        watch, monitor_info = None, None
        if cfg.monitor is not None:
            watch, monitor_info = calibrate_monitor(cfg, task, proposer, refiner, world.period, world)
            log(f"gap monitor ({cfg.monitor}): threshold {monitor_info['threshold']:.3g} from "
                f"{cfg.monitor_episodes} refined episodes in the nominal twin")
        seeds = episode_seeds(cfg)
        names = (["base"] if proposer is not None else []) + ["refined"]
        datasets = {n: _dataset(out / "episodes" / n, cfg, task, world, n) for n in names} if cfg.record else {}
        n_ticks = world_ticks(cfg, task, world)
        batches = [EpisodeBatch(partial(controller_in_world, cfg, n, watch), seeds,
                                options={"max_ticks": n_ticks, "record": cfg.record}, stats=episode_stats)
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

        t_start = time.perf_counter()
        try:
            runs = (executor or SerialExecutor()).run(batches, on_episode)
        except Exception as exc:
            write_partial(datasets.get(names[min(current[0], len(names) - 1)]), exc)
            raise
        all_eps = dict(zip(names, runs, strict=True))
    finally:
        world.close()  # a remote world's socket, a real-time world's clock
    one_world_seed = world_seed(cfg) if cfg.world in SEEDED_WORLDS else None  # what a row's world_seed is otherwise
    results = []
    for name, eps in all_eps.items():
        results.append(summarize(name, eps))
        if cfg.realtime:
            results[-1]["realtime"] = realtime_summary([e.stats for e in eps])
    summary = {
        "task": task.name,
        "world": world.describe(),
        "seed": cfg.seed,
        "episodes": cfg.episodes,
        "config": {k: v for k, v in asdict(cfg).items() if k != "token"},
        "wall_time_s": time.perf_counter() - t_start,
        "results": results,
        # what the refined controller plans with (null: the nominal twin)
        "planning_params": None if refiner.params is None else
        [dict(zip(refiner.twin.param_space.names, map(float, p))) for p in refiner.params],
        "planning_twin": planning,
        "world_per_episode": cfg.world_per_episode,
        "per_episode": {k: [{"seed": e.seed, "world_seed": e.stats.get("world_seed", one_world_seed), "success": e.success,
                             "final_error": e.final_error, "ticks": e.ticks, "failure": e.failure,
                             **{s: e.stats[s] for s in ("world_params", "alarms", "refits", "rejected_refits",
                                                        "peak_body_speed", "peak_body")
                                if s in e.stats}}
                            for e in v] for k, v in all_eps.items()},
    }
    if monitor_info is not None:
        refined = all_eps["refined"]
        summary["monitor"] = {**monitor_info, "episodes_alarmed": sum(bool(e.stats["alarms"]) for e in refined),
                              "alarms": sum(len(e.stats["alarms"]) for e in refined)}
    write_json(out / "summary.json", summary)
    plot_comparison(summary, out / "comparison.png")
    if cfg.video and (cfg.realtime or not isinstance(world, (SimWorld, PerEpisodeWorld))):
        log("no video: videos replay a simulated world in synchronous mode")
    elif cfg.video:
        try:
            summary["video"] = str(render_refined_episode(cfg, all_eps.get("refined", []), out / "refined_episode.mp4",
                                                          watch))
            write_json(out / "summary.json", summary)
        except RenderingUnavailable as exc:  # the results are written; only the video is missing
            log(f"no video: {exc}")
    return summary


def realtime_summary(rows: list[dict]) -> dict:
    """Per-episode real-time statistics (world ticks, planner cycles) -> one row: deadline
    misses over all ticks, medians of the per-episode medians, worst maxima."""
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
    return out


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
    r = run_episode(world, ctl, seed, max_ticks=cfg.max_ticks, record=False, ghosts=ghost_traces(task))
    return render_episode(task, world.model, r.qpos, path, ghosts=r.ghosts, camera=task.camera,
                          fps=int(round(1 / task.control_period)))


def _dataset(root: Path, cfg: RunConfig, task, world, name: str):
    """A new dataset for this run's episodes (its output folder is new or emptied)."""
    info = {
        "fps": 1.0 / world.period,
        "twinloop": {
            "task": task.name,
            "controller": name,
            "world": world.describe(),
            "seed": cfg.seed,
            "obs_names": list(task.obs_names),
            "param_names": task.param_space().names,
            "config": {k: v for k, v in asdict(cfg).items() if k != "token"},
        },
    }
    return Dataset.create(root, info)
