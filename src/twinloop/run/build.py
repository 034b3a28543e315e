"""From a run's configuration to what runs: the task, the world, the proposer, the refiner
and the controllers (base and refined) of a comparison (:mod:`twinloop.run.compare` runs them)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from twinloop.calib.monitor import GapMonitor, MonitorConfig
from twinloop.calib.windows import record_trajectory
from twinloop.control import (
    AsyncController,
    Controller,
    GapWatch,
    ProposerSamples,
    Refiner,
    check_samples,
    check_timestep,
)
from twinloop.control.hooks import acceptance_hooks
from twinloop.errors import TwinloopError
from twinloop.plan import make_optimizer
from twinloop.policies import make_proposer
from twinloop.run.planning import (  # noqa: F401 - importable from here
    load_posterior,
    planning_choice,
    planning_model,
    planning_particles,
    planning_timestep,
)
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import PerEpisodeWorld, RealtimeWorld, TwinWorld, make_world, world_type
from twinloop.worlds.camera import CameraWorld, task_cameras, with_size

if TYPE_CHECKING:
    from twinloop.run.compare import RunConfig


def build(cfg: RunConfig, keep_rollouts: bool = False, check_twin: bool = True):
    """(task, world, proposer, refiner) for a config; in real time the world is a
    :class:`~twinloop.worlds.RealtimeWorld` (see :attr:`RunConfig.rate`), with
    ``world_per_episode`` a :class:`~twinloop.worlds.PerEpisodeWorld`. ``check_twin``: check a
    coarser twin timestep once (the driver does; the workers building the same twin need not)."""
    task = make_task(cfg.experiment.task)
    sim = world_type(cfg.experiment.world).adjustable_period
    period = None
    if cfg.realtime and sim:
        period = 1.0 / cfg.rate if cfg.rate else task.control_period / 10

    cameras = None
    if cfg.observe == "rgb":  # the cameras render what the perception model reads
        cameras = with_size(task_cameras(task), run_perception(cfg, task).meta.size)

    world_task = task  # the world's, bound here: `task` becomes the planning task below

    def world_of(seed: int):
        world = make_world(world_task, cfg.experiment.world, severity=cfg.experiment.severity, seed=seed, period=period,
                           token=cfg.token)
        look = cfg.experiment.severity if cfg.appearance is None else cfg.appearance
        return world if cfg.observe == "state" else CameraWorld(world, look, seed, cameras)

    world = PerEpisodeWorld(world_of, episode_seeds(cfg)[0]) if cfg.experiment.world_per_episode else world_of(world_seed(cfg))
    if cfg.realtime:
        world = RealtimeWorld(world, rate=cfg.rate if not sim else None)
    task = planning_task(task, cfg)
    # planned at another resolution, the controller estimates the twin's state; the base it
    # rehearses and sends is the base controller's: the world task's proposer on its own estimate
    # (not with the stateful observer, which needs the actions sent: the planning task's proposer)
    observer = cfg.grasp is not None and cfg.grasp.observer
    proposer = make_proposer(task if observer else world_task, cfg.proposer,
                             **({"checkpoint": cfg.checkpoint} if cfg.checkpoint else {}))
    if task is not world_task and proposer is not None and not observer:
        proposer = WorldProposer(proposer, camera_estimator(cfg, world_task) or world_task.state_estimator())
    check_samples(proposer, cfg.proposal_samples, cfg.proposer)  # before the base row runs, not after it
    grasp = cfg.grasp
    if observer:
        task.state_estimator(stateful=True)  # refused by a task without one
    if grasp is not None and grasp.repair and not task.candidate_sources(repair_options(cfg)):
        raise TwinloopError(f"repair=True: task {cfg.experiment.task!r} has no repair primitive "
                            "(Task.candidate_sources)")
    if cfg.monitor == "fallback" and proposer is None:
        raise TwinloopError(f"monitor='fallback' falls back to the base proposer; proposer {cfg.proposer!r} has none")
    if cfg.monitor in ("widen", "refit", "adapt") and not len(task.param_space()):
        raise TwinloopError(f"monitor={cfg.monitor!r} changes the twin's parameters; task {cfg.experiment.task!r} has none")
    if cfg.monitor == "adapt" and not task.param_space().on("actuator"):
        raise TwinloopError(f"monitor='adapt' refits the actuators' parameters; task {cfg.experiment.task!r} has none among "
                            f"{task.param_space().names}")
    twin = refiner_twin(task, cfg.planner.backend, planning_timestep(cfg), cfg.planner.refiner.horizon,
                        check=check_twin, model=planning_model(cfg, task))
    params, delay, _ = planning_choice(cfg, task, twin.param_space)  # a posterior that fails its check: nominal
    rcfg = cfg.planner.refiner
    rcfg = rcfg if delay == rcfg.actuation_delay else replace(rcfg, actuation_delay=delay)
    refiner = Refiner(task, twin, make_optimizer(cfg.planner.optimizer, llm=cfg.planner.llm, noise=cfg.planner.noise), rcfg,
                      params=params, keep_rollouts=keep_rollouts)
    return world_task, world, proposer, refiner


class WorldProposer:
    """The world task's proposer fed the world task's own state estimate, whatever state the
    controller passes: a controller that plans in a deformable at another resolution estimates
    the twin's state (its mesh), and a script reading it (a swing's grasp point, a few mm off)
    would not propose what the base controller does. Everything else is the proposer's own
    (attributes read and set through)."""

    _own = ("proposer", "estimator")

    def __init__(self, proposer, estimator):
        object.__setattr__(self, "proposer", proposer)
        object.__setattr__(self, "estimator", estimator)

    def __getattr__(self, name):
        if name in WorldProposer._own or name.startswith("__"):  # unpickling: not set yet
            raise AttributeError(name)
        return getattr(self.proposer, name)

    def __setattr__(self, name, value):
        setattr(self.proposer, name, value)

    def reset(self, seed: int | None = None) -> None:
        self.estimator.reset(seed)
        if callable(getattr(self.proposer, "reset", None)):
            self.proposer.reset(seed)

    def propose(self, obs, state):
        return self.proposer.propose(obs, self.estimator.estimate(obs))


def planning_task(task, cfg: RunConfig):
    """The task the refined controller plans with: ``task`` itself, or with
    ``grasp.twin_resolution`` its deformable at that resolution
    (:mod:`twinloop.tasks.resolution`), which refuses parameter particles and posteriors. The
    task's own resolution is the task itself."""
    res = None if cfg.grasp is None else cfg.grasp.twin_resolution
    if res is None:
        return task
    if not callable(getattr(task, "at_resolution", None)):
        raise TwinloopError(f"twin_resolution={res}: task {task.name!r} has no deformable to plan at another resolution")
    own = getattr(task, "links", getattr(task, "resolution", None))
    if res == own:
        return task
    world_mesh = f"; plan at the world's resolution with --set grasp.twin_resolution={own}" if own else ""
    if cfg.monitor is not None:
        raise TwinloopError(f"twin_resolution={res}: a gap monitor compares the world with the twin state by "
                            f"state{world_mesh}")
    if cfg.planner.particles >= 2 or cfg.planner.posterior is not None:
        raise TwinloopError(f"twin_resolution={res} plans in a twin of another mesh: parameter particles and "
                            f"posteriors hold values of the world's mesh (per joint, per capsule){world_mesh}")
    return task.at_resolution(res)


def base_config(cfg: RunConfig) -> RunConfig:
    """The base row's config: the run's, planning (if it did) at the world's resolution."""
    if cfg.grasp is None or cfg.grasp.twin_resolution is None:
        return cfg
    return replace(cfg, grasp=replace(cfg.grasp, twin_resolution=None))


def refiner_twin(task, backend: str = "mujoco", timestep: float | None = None, horizon: float | None = None,
                 check: bool = True, model=None):
    """The twin a refiner plans in: ``backend`` at ``timestep`` (s) when that is coarser than the
    scene's, checked once (``check``) to rank candidates as the scene's own step does over
    ``horizon`` (:func:`~twinloop.control.check_timestep`). ``model``: the scene with another
    structure (a posterior's chosen contact model; default ``task.model``).

    The check's states and candidates are its own fixed sample (seed 0), not the run's episode
    seeds: a twin step is accepted or refused for a task, horizon and model, whichever episodes
    are run with it (the verdict is a property of the twin, and a recipe that runs on one block
    of episodes runs on every other)."""
    model = task.model if model is None else model
    twin = make_twin(backend, model, task.param_space())
    if timestep is not None and timestep > model.opt.timestep * (1 + 1e-9):
        coarse = make_twin(backend, model, task.param_space(), timestep=timestep)
        if check:
            try:
                check_timestep(task, coarse, twin, horizon=horizon, seed=0)
            except TwinloopError as e:
                raise TwinloopError(f"{e}; plan at the scene's own step with --set planner.twin_timestep="
                                    f"{model.opt.timestep:g} (or a step between the two)") from None
        twin = coarse
    return twin


def planner_twin(planner, task, space=None):
    """The twin of a planner section (:class:`~twinloop.run.sections.PlannerConfig`): its backend
    at its ``twin_timestep`` where that is coarser than the scene's, over ``space`` (default: the
    task's parameters). Unchecked: a loop that builds it per episode checks it once itself."""
    space = task.param_space() if space is None else space
    step = planner.twin_timestep
    coarse = step is not None and step > task.model.opt.timestep * (1 + 1e-9)
    return make_twin(planner.backend, task.model, space, **({"timestep": step} if coarse else {}))


def controller_in_world(cfg: RunConfig, name: str, watch: tuple | None = None, view=None):
    """``(world, controller)`` of the comparison's controller ``name`` (``base`` | ``refined``):
    the picklable factory of an :class:`~twinloop.run.executor.EpisodeBatch`. The refined
    controller of a run with ``cfg.monitor`` watches with ``watch``, the ``(error, threshold)``
    calibrated by :func:`calibrate_monitor`. With a live ``view``
    (:class:`~twinloop.viz.live.LiveView`, in this process) each tick is published to it (the
    refiner keeps its rollouts for the ghost traces)."""
    hooks = [] if view is None else [view.hook(name)]
    if name == "base":
        task, world, proposer, refiner = build(base_config(cfg), keep_rollouts=view is not None, check_twin=False)
        return world, Controller(refiner, proposer, refine=False, estimator=camera_estimator(cfg, task), hooks=hooks)
    _, world, proposer, refiner = build(cfg, keep_rollouts=view is not None, check_twin=False)
    task = refiner.task
    if cfg.realtime:
        return world, AsyncController(refiner, proposer, cfg.async_control,
                                      sources=candidate_sources_of(task, cfg, proposer))
    return world, refined_controller(cfg, task, proposer, refiner, watch, hooks)


def refined_controller(cfg: RunConfig, task, proposer, refiner, watch: tuple | None = None,
                       extra_hooks=()) -> Controller:
    """The synchronous refined controller, watched by the run's gap monitor (if any) with
    ``watch = (error, threshold)``; ``extra_hooks`` are called after the run's own."""
    task = refiner.task  # the planning task: the world's, or its deformable at the twin's resolution
    monitor = None
    if cfg.monitor is not None:
        if watch is None:
            raise TwinloopError("a monitored run's refined controller needs the monitor's (error, threshold)")
        monitor = GapMonitor(task, refiner.twin, *watch, monitor_config(cfg))
    stateful = cfg.grasp is not None and cfg.grasp.observer
    estimator = task.state_estimator(stateful, None if refiner.params is None else refiner.params[0])
    estimator = camera_estimator(cfg, task, estimator) or estimator
    hooks = ([] if monitor is None else [GapWatch(monitor)]) + acceptance_hooks(
        cfg.refiner, acceptance_particles(cfg, task, refiner)) + list(extra_hooks)
    return Controller(refiner, proposer, estimator=estimator, sources=candidate_sources_of(task, cfg, proposer),
                      hooks=hooks)


def acceptance_particles(cfg: RunConfig, task, refiner) -> np.ndarray | None:
    """The parameter particles the robust acceptance rule judges under: with
    ``refiner.accept_under == "calibration"``, the samples of the calibration the refiner plans
    with (``cfg.posterior``, where it is used: at most ``refiner.accept_particles`` of them, its
    estimate first); ``None`` (the rule's own: the nominal values and the prior's draws) by
    default, without a calibration, where it is not used, or where it holds fewer than two
    samples."""
    r = cfg.refiner
    if cfg.posterior is None or r.accept != "robust" or r.accept_under != "calibration":
        return None
    _, _, note = planning_choice(cfg, task, refiner.twin.param_space)
    if not note["used"] or note.get("candidate") is not None:
        return None
    post = load_posterior(cfg, refiner.twin.param_space)
    samples = post.particles[: r.accept_particles]
    return samples.copy() if len(samples) >= 2 else None


def camera_estimator(cfg: RunConfig, task, inner=None):
    """With ``cfg.observe == 'rgb'``: the camera estimator (the run's perception checkpoint, then
    ``inner``, default the task's stateless map); else ``None`` (the controller's own)."""
    if cfg.observe == "state":
        return None
    from twinloop.perception import CameraEstimator  # needs the [learn] extra (PyTorch)

    return CameraEstimator(task, run_perception(cfg, task), inner)


def run_perception(cfg: RunConfig, task):
    """The perception model a camera run reads its images with: ``cfg.perception``, or the task's
    shipped model (refused, saying how to train one, for a task that ships none)."""
    from twinloop.perception import load_perception  # needs the [learn] extra (PyTorch)
    from twinloop.perception.model import shipped

    if cfg.perception is None and shipped(task.name) is None:
        raise TwinloopError(f"observe='rgb': task {task.name!r} ships no perception model; train one with "
                            f"`twinloop perception train --task {task.name}` and pass --set perception=CKPT")
    return load_perception(cfg.perception or task.name, task.name, cfg.perception_shifts)


def repair_options(cfg: RunConfig) -> dict:
    """The run's options of a task's candidate sources (:meth:`Task.candidate_sources`): the
    grasp section's repair, pushes, reach, re-grasp reach and commit margin."""
    g = cfg.grasp
    if g is None:
        return {"repair": False}
    return {"repair": g.repair, "repair_push": g.push, "repair_reach": g.reach, "repair_commit": g.commit,
            "repair_regrasp_reach": g.regrasp_reach}


def candidate_sources_of(task, cfg: RunConfig, proposer) -> list:
    """The refined controller's candidate sources: the task's own (its repair), then the
    proposer's ``cfg.proposal_samples`` samples."""
    n = cfg.proposal_samples
    samples = [ProposerSamples(proposer, n, cfg.proposer)] if n else []
    return [*task.candidate_sources(repair_options(cfg)), *samples]


def monitor_config(cfg: RunConfig) -> MonitorConfig:
    """The gap monitor of a run (its action; the library's defaults otherwise, seeded by ``cfg.experiment.seed``)."""
    return MonitorConfig(action=cfg.monitor, seed=cfg.experiment.seed)


def monitor_seeds(cfg: RunConfig) -> list[int]:
    """Seeds of the nominal episodes a run's monitor threshold is calibrated on: after the
    run's own block of episode seeds (``seed * 100000 + 50000 + i``)."""
    return [cfg.experiment.seed * 100_000 + 50_000 + i for i in range(cfg.monitor_episodes)]


def monitor_world(cfg: RunConfig, task, period: float, world=None):
    """Where a run's monitor threshold is calibrated: a world that behaves like the twin. For
    ``shifted`` its nominal counterpart (:func:`~twinloop.worlds.shifted.nominal_counterpart`:
    its noise, delay and engine); for ``nominal`` the twin itself; for any other world the
    twin's own scene with the world's observation noise where it declares one (``obs_noise``):
    what a gymnasium env, another engine or a robot hides is unknown, and reads as gap."""
    e = cfg.experiment
    kind = world_type(e.world)
    if kind.counterpart is not None:  # the shift whose noise and delay it mirrors
        return kind.counterpart(task, e.severity if kind.has_hidden_params else 0, period)
    return TwinWorld(task, obs_noise=getattr(world, "obs_noise", None), period=period)


def calibrate_monitor(cfg: RunConfig, task, proposer, refiner, period: float, world=None) -> tuple[tuple, dict]:
    """Record ``cfg.monitor_episodes`` refined episodes (no monitor, ``cfg.experiment.max_ticks`` or the
    task's length, not stopped at success) in the nominal counterpart of the run's world and
    calibrate the monitor on them (:meth:`GapMonitor.from_nominal`). Returns the monitor's
    ``(error, threshold)`` (see :func:`controller_in_world`) and what ``summary.json`` says
    about it."""
    world = monitor_world(cfg, task, period, world)
    ctl = Controller(refiner, proposer)
    ticks = cfg.experiment.max_ticks or task.max_ticks
    trajs = []
    for s in monitor_seeds(cfg):
        ctl.reset(s)
        trajs.append(record_trajectory(world, lambda obs, _k: ctl.act(obs), s, ticks))
    mcfg = monitor_config(cfg)
    m = GapMonitor.from_nominal(task, refiner.twin, trajs, mcfg, params=refiner.params)
    return (m.error, m.threshold), {"action": cfg.monitor, "threshold": m.threshold, "window": mcfg.window,
                         "quantile": mcfg.quantile, "margin": mcfg.margin, "nominal_seeds": monitor_seeds(cfg),
                         "nominal_ticks": ticks, "nominal_world": world.describe()}


def world_seed(cfg: RunConfig) -> int:
    """The seed of a run's one world: ``experiment.world_seed``, else ``experiment.seed``."""
    return cfg.experiment.one_world_seed


def episode_seeds(cfg: RunConfig) -> list[int]:
    """The run's episode seeds (:meth:`ExperimentConfig.episode_seeds
    <twinloop.run.sections.ExperimentConfig.episode_seeds>`)."""
    return cfg.experiment.episode_seeds()
