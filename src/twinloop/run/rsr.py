"""The Real-Sim-Real loop: collect (steered by InfoGap) -> calibrate -> evaluate, repeated.

Round ``i`` (1..N)::

    collect    run the refined controller in the world; its twin evaluates candidates under
               the current parameter particles (the prior at first), plus -beta * EIG
    calibrate  fit the parameters to every episode collected so far (starting from the last
               estimate); the posterior's particles steer the next collection
    evaluate   run the refined controller with the calibrated twin (beta = 0) on fixed seeds:
               success rate; sim-real gap of the calibrated twin on those fresh episodes;
               largest relative parameter error (where the world knows its hidden truth),
               also apart over the parameters the calibration identifies and those it flags
               NOT IDENTIFIABLE (what the data could not pin down)

Round 0 evaluates the nominal twin the same way (the starting point of the curves).
After every round the state (records, posterior) is written atomically to
``out/rsr_state.json`` and the episodes live in ``out/episodes/collect_XX`` and ``eval_XX``; a
killed loop started again with the same config continues at the first unfinished round, and
because every draw is seeded by (seed, round, episode) it ends where an uninterrupted run would.
Episodes run on an executor (serially here, or on Ray) with the same results either way.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

from twinloop.calib.fit import CalibConfig, Posterior, calibrate
from twinloop.calib.gap import GapConfig, gap
from twinloop.calib.infogap import infogap_cost, observed_qpos
from twinloop.calib.report import relative_errors
from twinloop.control import Controller, Refiner
from twinloop.data.dataset import Dataset
from twinloop.data.episodes import recorded_on
from twinloop.errors import TwinloopError, choose, number
from twinloop.io import output_folder, read_json, write_json
from twinloop.plan import OPTIMIZERS, make_optimizer
from twinloop.policies import make_proposer
from twinloop.run.build import planner_twin, refiner_twin
from twinloop.run.config import composed, config_dict, sources_of
from twinloop.run.executor import EpisodeBatch, Executor, SerialExecutor
from twinloop.run.experiment import summarize, write_partial
from twinloop.run.sections import ExperimentConfig, PlannerConfig
from twinloop.stats import wilson
from twinloop.tasks import make_task, task_defaults
from twinloop.twin import make_twin
from twinloop.viz.plots import plot_curves
from twinloop.worlds.shifted import ShiftedWorld

STATE_FILE = "rsr_state.json"


@composed()
@dataclass(frozen=True)
class RSRConfig:
    """Every choice of an RSR run (the ``twinloop rsr`` options are generated from these fields).

    The planner and the experiment are the sections ``twinloop run`` uses, with its defaults
    (the task's episode length, K=32, 0.5 s, 10 ms twin steps); flat construction reaches their
    fields (``RSRConfig(task="pivot", episodes=2)``).

    Round ``r`` collects on episode seeds ``seed * 1000000 + 1000 * r + j`` (``episodes`` at
    most 1000 a round), the evaluation runs on ``seed * 1000000 + 900 + j``: no two purposes,
    rounds or base seeds share one.

    Attributes:
        experiment: the task, its ShiftedWorld (``severity``, ``world_seed``: ``None`` is
            ``seed``), the episodes collected per round (``episodes``), their length and the seed
            of episodes, particles and fits (:class:`~twinloop.run.sections.ExperimentConfig`;
            ``world`` is ``shifted``; outputs go to the loop's folder).
        planner: the collecting controller's planner (:class:`~twinloop.run.sections.PlannerConfig`):
            its ``particles`` (at least 1) are the parameter particles it plans under, and the
            fit returns at least this many posterior samples, whatever ``calib.particles`` says.
        rounds: collect -> calibrate -> evaluate rounds (at most 999).
        eval_episodes: episodes evaluated per round (same seeds every round; at most 100).
        beta: InfoGap weight during collection (0: collect with the task cost only).
        info_noise: position noise std assumed by InfoGap (m), on the observed coordinates.
        info_angle_noise: angle noise std assumed by InfoGap (rad).
        params: names of the parameters to calibrate (default: the task's whole space).
        calib: the calibration of each round (its ``seed`` becomes ``seed + round``).
        gap: the sim-real gap measured at each evaluation (its ``seed`` becomes ``seed``).
        proposer: ``scripted`` | ``none`` (base proposal of the controller).
    """

    experiment: ExperimentConfig = field(default_factory=lambda: ExperimentConfig(
        task="block-push", episodes=2, out="twinloop-rsr", video=False))
    planner: PlannerConfig = field(default_factory=lambda: PlannerConfig(particles=4))
    rounds: int = 3
    eval_episodes: int = 3
    beta: float = 0.0
    info_noise: float = 1e-3
    info_angle_noise: float = 1e-2
    params: tuple[str, ...] | None = None
    calib: CalibConfig = field(default_factory=lambda: CalibConfig(method="cma", max_evals=150, delay_steps=None))
    gap: GapConfig = field(default_factory=lambda: GapConfig(metric="kl"))
    proposer: str = "scripted"

    def __post_init__(self):
        if self.params is not None:
            object.__setattr__(self, "params", tuple(self.params))
        for name, kind in (("calib", CalibConfig), ("gap", GapConfig), ("planner", PlannerConfig),
                           ("experiment", ExperimentConfig)):
            if not isinstance(getattr(self, name), kind):
                raise TwinloopError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        self.experiment.refuse("rsr", world="shifted", world_per_episode=False, first_episode=0, video=False)
        number(self.planner.particles, "particles", low=1, integer=True)
        # episode seeds seed * 1000000 + 1000 * round + j: a round's 1000, the evaluation's 900-999 of round 0
        for name, high in (("rounds", 999), ("eval_episodes", 100)):
            object.__setattr__(self, name, number(getattr(self, name), name, low=1, high=high, integer=True))
        if self.experiment.episodes > 1_000:
            raise TwinloopError(f"episodes must be <= 1000 a round (each round's episode seeds are 1000 apart), got "
                                f"{self.experiment.episodes}")
        object.__setattr__(self, "beta", number(self.beta, "beta", low=0))
        for name in ("info_noise", "info_angle_noise"):
            object.__setattr__(self, name, number(getattr(self, name), name, low=0, low_open=True))
        choose("proposer", self.proposer, ("scripted", "none"))
        planner = self.planner.for_task(self.experiment.task)
        choose("optimizer", planner.optimizer, tuple(OPTIMIZERS))
        if planner.noise is not None:
            number(planner.noise, "noise", low=0, low_open=True)
        object.__setattr__(self, "planner", planner)


@dataclass
class RSRResult:
    """What the loop produced (``summary`` is what ``summary.json`` holds)."""

    summary: dict
    posterior: Posterior | None
    out: Path
    resumed_at: int = 1
    paths: dict = field(default_factory=dict)

    @property
    def rounds(self) -> list[dict]:
        return self.summary["rounds"]


def _finite(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def make_rsr_world(cfg: RSRConfig, task=None):
    """The loop's default world: a ShiftedWorld of ``cfg.task`` at ``cfg.severity``, ``cfg.world_seed``."""
    return ShiftedWorld(task or make_task(cfg.task), severity=cfg.severity, seed=cfg.experiment.one_world_seed)


def parameter_space(cfg: RSRConfig, task):
    """The parameters the loop calibrates: ``cfg.params`` of the task's space (default: all)."""
    full = task.param_space()
    return full.subset(cfg.params) if cfg.params else full


def rsr_controller(cfg: RSRConfig, world, params: np.ndarray | None, beta: float):
    """``(world, controller)``: the refined controller planning under parameter particles
    ``params`` (``(P, n)``), plus ``-beta * EIG`` when ``beta > 0`` and ``P > 1``. ``world=None``
    builds the default world (what an executor's worker does). Picklable as a partial."""
    task = make_task(cfg.task) if world is None else world.task
    world = make_rsr_world(cfg, task) if world is None else world
    extra = []
    if beta > 0 and params is not None and len(params) > 1:
        index, noise = observed_qpos(task, cfg.info_noise, cfg.info_angle_noise)
        extra.append(infogap_cost(beta, noise, index, stride=task.substeps))
    twin = planner_twin(cfg.planner, task, parameter_space(cfg, task))
    refiner = Refiner(task, twin, make_optimizer(cfg.optimizer, noise=cfg.noise), cfg.refiner, params=params, extra_costs=extra)
    return world, Controller(refiner, make_proposer(task, cfg.proposer), refine=True)


class RSRLoop:
    """One RSR run in ``out``; :meth:`run` does (or resumes) all rounds.

    Args:
        config: the loop's choices.
        out: output folder.
        world: the world to collect in and evaluate in (default: :func:`make_rsr_world`); a
            world given here is shipped to each episode's worker, so it must pickle for Ray.
        mode: ``new`` (an absent or empty folder) | ``resume`` (continue the run there) |
            ``overwrite`` (see :func:`twinloop.io.output_folder`).
        executor: where episodes run (default: serially in this process).
    """

    def __init__(self, config: RSRConfig, out: str | os.PathLike, world=None, mode: str = "new",
                 executor: Executor | None = None, sources: dict[str, str] | None = None):
        if not isinstance(config, RSRConfig):
            raise TwinloopError(f"config must be an RSRConfig, got {type(config).__name__}")
        self.cfg = config
        self.sources = sources or sources_of(config, task_defaults(config.task))
        # before any long work: a folder that is fresh, or an earlier run resumed explicitly
        self.out = output_folder(out, mode, resumable=True)
        self._load_state()  # a damaged or foreign state fails now, not after the first round
        self.task = make_task(config.task) if world is None else world.task
        self._given_world = world
        self.world = make_rsr_world(config, self.task) if world is None else world
        self.executor = executor or SerialExecutor()
        self.space = parameter_space(config, self.task)
        self.truth = None
        hidden = getattr(self.world, "hidden_params", None)
        if hidden is not None:
            names = list(getattr(self.world, "param_space", self.task.param_space()).names)
            self.truth = np.array([hidden[names.index(n)] for n in self.space.names])
        self.twin = make_twin("mujoco", self.task.model, self.space)  # calibrated and measured: the scene's step
        p = config.planner  # the collecting controller's coarser twin, checked once as `twinloop run` checks it
        refiner_twin(self.task, p.backend, p.twin_timestep, p.refiner.horizon)

    # -- pieces ---------------------------------------------------------------------------------

    def _dataset(self, name: str):
        info = {"fps": 1.0 / self.task.control_period, **recorded_on(self.task), "controller": name,
                "seed": self.cfg.seed, "obs_names": list(self.task.obs_names), "param_names": self.space.names}
        # a round killed half-way is redone from scratch (its seeds give the same episodes)
        return Dataset.create(self.out / "episodes" / name, info, mode="overwrite")

    def _episodes(self, name: str) -> list:
        return Dataset(self.out / "episodes" / name).episodes()

    def _run(self, params: np.ndarray | None, beta: float, seeds, name, progress):
        ds = self._dataset(name)

        def write(_, r):
            ds.write(r.recorder)
            r.recorder = None
            if progress is not None:
                progress(name, 1)

        # episodes run their full length: calibration and the gap want every transition, and
        # success is judged on the final state
        batch = EpisodeBatch(partial(rsr_controller, self.cfg, self._given_world, params, beta), seeds,
                             options={"max_ticks": self.cfg.max_ticks, "stop_on_success": False, "record": True})
        try:
            (results,) = self.executor.run([batch], write)
        except BaseException as exc:  # what an interrupted episode recorded in this process is kept (Ctrl-C too)
            write_partial(ds, exc)
            raise
        return results, ds.episodes()

    def _seeds(self, round_: int, n: int, offset: int = 0) -> list[int]:
        return [self.cfg.seed * 1_000_000 + round_ * 1000 + offset + j for j in range(n)]

    def _evaluate(self, round_: int, estimate: np.ndarray, posterior: Posterior | None, progress) -> dict:
        seeds = self._seeds(0, self.cfg.eval_episodes, offset=900)  # the same seeds every round
        results, eps = self._run(estimate[None], 0.0, seeds, f"eval_{round_:02d}", progress)
        g = gap(self.task, eps, estimate, replace(self.cfg.gap, seed=self.cfg.seed), twin=self.twin, space=self.space)
        k = sum(r.success for r in results)
        errors = (dict.fromkeys(("all", "identifiable", "flagged")) if self.truth is None else
                  relative_errors(estimate, self.truth, None if posterior is None else posterior.identifiable))
        rec = {
            "round": round_,
            "gap": g.value,
            "gap_ci": list(g.ci),
            "gap_metric": g.metric,
            "param_error": errors["all"],
            "param_error_identifiable": errors["identifiable"],
            "param_error_flagged": errors["flagged"],
            "success_rate": k / len(results),
            "success_ci": list(wilson(k, len(results))),
            "estimate": dict(zip(self.space.names, map(float, estimate), strict=True)),
            "result": summarize(f"refined (round {round_})", results),
        }
        if posterior is not None:
            rec["interval"] = {n: list(map(float, iv)) for n, iv in zip(self.space.names, posterior.interval, strict=True)}
            rec["identifiable"] = dict(zip(self.space.names, map(bool, posterior.identifiable), strict=True))
            rec["train_error"] = [_finite(v) for v in posterior.train_error]
            rec["delay_steps"] = posterior.delay_steps
            rec["calibration_seconds"] = posterior.seconds
        return rec

    # -- the loop -------------------------------------------------------------------------------

    @property
    def completed(self) -> int:
        """The last finished round in ``out`` (-1: none, 0: only the nominal evaluation)."""
        state = self._load_state()
        return -1 if state is None else state["completed"]

    def _load_state(self) -> dict | None:
        path = self.out / STATE_FILE
        if not path.exists():
            return None
        state = read_json(path, "RSR state")
        completed = state.get("completed")
        if (not isinstance(state.get("config"), dict) or not isinstance(state.get("rounds"), list)
                or isinstance(completed, bool) or not isinstance(completed, int) or completed < -1
                or len(state["rounds"]) != completed + 1
                or not isinstance(state.get("posterior"), (dict, type(None)))):
            raise TwinloopError(f"{path} is not a valid RSR state (config, rounds, completed, posterior); "
                                "it is damaged: use another output folder or --overwrite")
        if state["posterior"] is not None:
            try:
                Posterior.from_dict(state["posterior"])
            except (TypeError, KeyError, ValueError) as exc:
                raise TwinloopError(f"{path}: the saved posterior is damaged ({exc}); use another output folder "
                                    "or --overwrite") from exc
        saved = state["config"]
        now = json.loads(json.dumps(config_dict(self.cfg)))
        diff = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k) and k != "rounds")
        if diff:
            raise TwinloopError(f"{path} was written by a different RSR config (differs in {diff}); "
                                "use another output folder or the same options")
        return state

    def run(self, progress: Callable[[str, int], None] | None = None,
            log: Callable[[str], None] | None = None) -> RSRResult:
        """Run the remaining rounds; ``progress(stage, n)`` after each episode / fit."""
        cfg = self.cfg
        t0 = time.perf_counter()
        state = self._load_state() or {"config": config_dict(cfg), "rounds": [], "posterior": None, "completed": -1}
        resumed_at = state["completed"] + 1
        post = Posterior.from_dict(state["posterior"]) if state["posterior"] else None
        if state["completed"] < 0:
            rec = self._evaluate(0, self.space.nominal, None, progress)
            state["rounds"].append(rec)
            state["completed"] = 0
            write_json(self.out / STATE_FILE, state, allow_nan=False)
        for it in range(state["completed"] + 1, cfg.rounds + 1):
            if log:
                log(f"round {it}/{cfg.rounds}: collecting {cfg.episodes} episodes (beta={cfg.beta:g})")
            if post is None:
                rng = np.random.default_rng([cfg.seed, 0])
                particles = self.space.prior_particles(rng, cfg.particles)
            else:
                particles = post.particles[: cfg.particles]
            self._run(particles, cfg.beta, self._seeds(it, cfg.episodes), f"collect_{it:02d}", progress)
            data = [e for j in range(1, it + 1) for e in self._episodes(f"collect_{j:02d}")]
            x0 = self.space.nominal if post is None else post.estimate
            ccfg = replace(cfg.calib, particles=max(cfg.particles, cfg.calib.particles, 2), seed=cfg.seed + it)
            post = calibrate(self.task, data, self.space, config=ccfg, x0=x0, twin=self.twin)
            if progress is not None:
                progress("calibrate", 1)
            rec = self._evaluate(it, post.estimate, post, progress)
            state["rounds"].append(rec)
            state["posterior"] = post.to_dict()
            state["completed"] = it
            write_json(self.out / STATE_FILE, state, allow_nan=False)  # the resume point
            if log:
                log(f"round {it}: gap {rec['gap']:.4g} {rec['gap_ci']}, param error {_pct(rec['param_error'])} "
                    f"(identifiable {_pct(rec['param_error_identifiable'])}, flagged "
                    f"{_pct(rec['param_error_flagged'])}), success {rec['success_rate']:.0%}")
        return self._finish(state, post, resumed_at, time.perf_counter() - t0)

    def _finish(self, state: dict, post: Posterior | None, resumed_at: int, seconds: float) -> RSRResult:
        cfg = self.cfg
        done = state["rounds"][: cfg.rounds + 1]
        summary = {
            "task": self.task.name,
            "world": self.world.describe(),
            "seed": cfg.seed,
            "episodes": cfg.eval_episodes,
            "results": [r["result"] for r in done],
            "rounds": [{k: r[k] for k in ("round", "gap", "gap_ci", "param_error", "param_error_identifiable",
                                           "param_error_flagged", "success_rate", "success_ci", "gap_metric",
                                           "estimate", "identifiable") if k in r} for r in done],
            "config": config_dict(cfg),
            "config_sources": self.sources,
            "params": self.space.names,
            "truth": None if self.truth is None else dict(zip(self.space.names, map(float, self.truth), strict=True)),
            "posterior": None if post is None else post.to_dict(),
            "wall_time_s": seconds,
        }
        paths = {"summary": self.out / "summary.json", "plot": plot_rsr(summary["rounds"], self.out / "rsr.png")}
        write_json(paths["summary"], summary, allow_nan=False)
        return RSRResult(summary, post, self.out, resumed_at, paths)


def plot_rsr(rounds: list[dict], path: Path) -> Path:
    """Gap, parameter error and success rate against round, one panel each."""
    keys = ["gap", "success_rate"]
    if any(it.get("param_error") is not None for it in rounds):
        keys.insert(1, "param_error")
    return plot_curves(rounds, path, keys=keys)


def run_rsr(config: RSRConfig, out: str | os.PathLike, world=None, progress=None, log=None,
            mode: str = "new", executor: Executor | None = None, sources: dict[str, str] | None = None) -> RSRResult:
    """Run an RSR loop in ``out`` (``mode="resume"`` continues the run there; see
    :func:`twinloop.io.output_folder`); see the module docstring."""
    return RSRLoop(config, out, world, mode, executor, sources).run(progress=progress, log=log)


def rsr_table(summary: dict):
    """A rich table of the rounds."""
    from rich.table import Table

    rounds = summary["rounds"]
    metric = rounds[0].get("gap_metric", "gap") if rounds else "gap"
    t = Table(title=f"RSR on {summary['task']} (seed {summary['seed']}, beta {summary['config']['beta']:g})")
    for col in ("round", f"gap ({metric})", "95% CI", "param error", "identifiable", "flagged", "success",
                "success CI"):
        t.add_column(col, justify="right")
    for r in rounds:
        t.add_row(str(r["round"]), f"{r['gap']:.4g}", f"[{r['gap_ci'][0]:.3g}, {r['gap_ci'][1]:.3g}]",
                  _pct(r.get("param_error")), _pct(r.get("param_error_identifiable")),
                  _pct(r.get("param_error_flagged")), f"{100 * r['success_rate']:.0f}%",
                  f"[{100 * r['success_ci'][0]:.0f}%, {100 * r['success_ci'][1]:.0f}%]")
    return t


def _pct(v: float | None) -> str:
    """A relative error as a percentage; ``n/a`` where there is none (no truth, no such parameter)."""
    return "n/a" if v is None else f"{100 * v:.1f}%"


__all__ = ["RSRConfig", "RSRLoop", "RSRResult", "make_rsr_world", "plot_rsr", "rsr_controller", "rsr_table", "run_rsr"]
