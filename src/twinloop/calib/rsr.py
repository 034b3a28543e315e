"""The Real-Sim-Real loop: collect (steered by InfoGap) -> calibrate -> evaluate, repeated.

Iteration ``i`` (1..N)::

    collect    run the refined controller in the world; its twin evaluates candidates under
               the current parameter particles (the prior at first), plus -beta * EIG
    calibrate  fit the parameters to every episode collected so far (starting from the last
               estimate); the posterior's particles steer the next collection
    evaluate   run the refined controller with the calibrated twin (beta = 0) on fixed seeds:
               success rate; sim-real gap of the calibrated twin on those fresh episodes;
               largest relative parameter error (where the world knows its hidden truth)

Iteration 0 evaluates the nominal twin the same way (the starting point of the curves).
After every iteration the state (records, posterior) is written atomically to
``out/rsr_state.json`` and the episodes live in ``out/episodes/iter_XX``; a killed loop
started again with the same config continues at the first unfinished iteration, and because
every draw is seeded by (seed, iteration, episode) it ends where an uninterrupted run would.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from twinloop.calib.fit import CalibConfig, Posterior, calibrate
from twinloop.calib.gap import GapConfig, gap
from twinloop.calib.infogap import infogap_cost, observed_qpos
from twinloop.control import RefinerConfig
from twinloop.errors import TwinloopError, choose, number
from twinloop.io import output_folder, read_json, write_json
from twinloop.plan import OPTIMIZERS

STATE_FILE = "rsr_state.json"


@dataclass(frozen=True)
class RSRConfig:
    """Every choice of an RSR run (the ``twinloop rsr`` options mirror these fields).

    Attributes:
        task: ``block-push`` | ``push-t``.
        severity: ShiftedWorld severity (hidden physics, noise, delay).
        world_seed: seed of the world's hidden physics (seed 0 of block-push at severity 2 draws
            a block whose friction the pusher's force limit cannot overcome).
        iterations: collect -> calibrate -> evaluate rounds.
        episodes: episodes collected per iteration (with ``beta``).
        eval_episodes: episodes evaluated per iteration (same seeds every iteration).
        max_ticks: episode length (default: the task's).
        beta: InfoGap weight during collection (0: collect with the task cost only).
        info_noise: position noise std assumed by InfoGap (m), on the observed coordinates.
        info_angle_noise: angle noise std assumed by InfoGap (rad).
        params: names of the parameters to calibrate (default: the task's whole space).
        particles: parameter particles the collecting controller plans under.
        method: calibration method (``least_squares`` | ``cma`` | ``mjx``).
        window: calibration window (ticks).
        errors_in_variables: calibration treats window starts as noisy observations (see
            :class:`~twinloop.calib.fit.CalibConfig`).
        delay_steps: actuation delay assumed by calibration (physics steps); ``None`` estimates it.
        max_evals: calibration budget (parameter vectors per fit).
        gap_metric: ``kl`` | ``mmd`` | ``swd``.
        proposer: ``scripted`` | ``none`` (base proposal of the controller).
        optimizer: refiner optimizer.
        num_samples: K candidates per refine.
        horizon: planning horizon (s).
        seed: seeds episodes, particles and fits.
    """

    task: str = "block-push"
    severity: int = 2
    world_seed: int = 1
    iterations: int = 3
    episodes: int = 2
    eval_episodes: int = 3
    max_ticks: int | None = 40
    beta: float = 0.0
    info_noise: float = 1e-3
    info_angle_noise: float = 1e-2
    params: tuple[str, ...] | None = None
    particles: int = 4
    method: str = "cma"
    window: int = 5
    errors_in_variables: bool = True
    delay_steps: int | None = None
    max_evals: int = 150
    gap_metric: str = "kl"
    proposer: str = "scripted"
    optimizer: str = "mppi"
    num_samples: int = 24
    horizon: float = 0.5
    seed: int = 0

    def __post_init__(self):
        if self.params is not None:
            object.__setattr__(self, "params", tuple(self.params))
        for name in ("iterations", "episodes", "eval_episodes", "particles", "num_samples"):
            object.__setattr__(self, name, number(getattr(self, name), name, low=1, integer=True))
        for name in ("world_seed", "seed"):
            object.__setattr__(self, name, number(getattr(self, name), name, low=0, integer=True))
        if self.max_ticks is not None:
            object.__setattr__(self, "max_ticks", number(self.max_ticks, "max_ticks", low=1, integer=True))
        object.__setattr__(self, "beta", number(self.beta, "beta", low=0))
        object.__setattr__(self, "severity", number(self.severity, "severity", low=0, high=3, integer=True))
        for name in ("info_noise", "info_angle_noise", "horizon"):
            object.__setattr__(self, name, number(getattr(self, name), name, low=0, low_open=True))
        choose("proposer", self.proposer, ("scripted", "none"))
        choose("optimizer", self.optimizer, tuple(OPTIMIZERS))
        CalibConfig(method=self.method, window=self.window, max_evals=self.max_evals, delay_steps=self.delay_steps,
                    errors_in_variables=self.errors_in_variables)
        GapConfig(metric=self.gap_metric)
        RefinerConfig(num_samples=self.num_samples, horizon=self.horizon, seed=self.seed)


@dataclass
class RSRResult:
    """What the loop produced (``summary`` is what ``summary.json`` holds)."""

    summary: dict
    posterior: Posterior | None
    out: Path
    resumed_at: int = 1
    paths: dict = field(default_factory=dict)

    @property
    def iterations(self) -> list[dict]:
        return self.summary["iterations"]


def _finite(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


class RSRLoop:
    """One RSR run in ``out``; :meth:`run` does (or resumes) all iterations."""

    def __init__(self, config: RSRConfig, out: str | os.PathLike, world=None, mode: str = "new"):
        from twinloop.policies import make_proposer
        from twinloop.tasks import make_task
        from twinloop.twin import make_twin

        if not isinstance(config, RSRConfig):
            raise TwinloopError(f"config must be an RSRConfig, got {type(config).__name__}")
        self.cfg = config
        # before any long work: a folder that is fresh, or an earlier run resumed explicitly
        self.out = output_folder(out, mode, resumable=True)
        self._load_state()  # a damaged or foreign state fails now, not after the first iteration
        self.task = make_task(config.task)
        if world is None:
            from twinloop.worlds.shifted import ShiftedWorld

            world = ShiftedWorld(self.task, severity=config.severity, seed=config.world_seed)
        self.world = world
        full = self.task.param_space()
        self.space = full.subset(config.params) if config.params else full
        self.truth = None
        hidden = getattr(world, "hidden_params", None)
        if hidden is not None:
            names = list(getattr(world, "param_space", full).names)
            self.truth = np.array([hidden[names.index(n)] for n in self.space.names])
        self.twin = make_twin("mujoco", self.task.model, self.space)
        self.proposer = make_proposer(self.task, config.proposer)

    # -- pieces ---------------------------------------------------------------------------------

    def _controller(self, params: np.ndarray | None, beta: float):
        from twinloop.control import Controller, Refiner, RefinerConfig
        from twinloop.plan import make_optimizer

        extra = []
        if beta > 0 and params is not None and len(params) > 1:
            index, noise = observed_qpos(self.task, self.cfg.info_noise, self.cfg.info_angle_noise)
            extra.append(infogap_cost(beta, noise, index, stride=self.task.substeps))
        rcfg = RefinerConfig(num_samples=self.cfg.num_samples, horizon=self.cfg.horizon, seed=self.cfg.seed)
        refiner = Refiner(self.task, self.twin, make_optimizer(self.cfg.optimizer), rcfg, params=params,
                          extra_costs=extra)
        return Controller(refiner, self.proposer, refine=True)

    def _dataset(self, name: str):
        from twinloop.data.dataset import Dataset

        info = {"fps": 1.0 / self.task.control_period, "task": self.task.name, "controller": name,
                "seed": self.cfg.seed, "obs_names": list(self.task.obs_names), "param_names": self.space.names}
        # an iteration killed half-way is redone from scratch (its seeds give the same episodes)
        return Dataset.create(self.out / "episodes" / name, info, mode="overwrite")

    def _episodes(self, name: str) -> list:
        from twinloop.data.dataset import Dataset

        return Dataset(self.out / "episodes" / name).episodes()

    def _run(self, controller, seeds, name, progress):
        from twinloop.run.experiment import run_episodes

        ds = self._dataset(name)

        def tick(r):
            if progress is not None:
                progress(name, 1)

        # episodes run their full length: calibration and the gap want every transition, and
        # success is judged on the final state
        results = run_episodes(self.world, controller, seeds, dataset=ds, progress=tick,
                               max_ticks=self.cfg.max_ticks, stop_on_success=False)
        for r in results:
            r.recorder = None
        return results, ds.episodes()

    def _seeds(self, iteration: int, n: int, offset: int = 0) -> list[int]:
        return [self.cfg.seed * 1_000_000 + iteration * 1000 + offset + j for j in range(n)]

    def _evaluate(self, iteration: int, estimate: np.ndarray, posterior: Posterior | None, progress) -> dict:
        from twinloop.run.experiment import summarize
        from twinloop.stats import wilson

        seeds = self._seeds(0, self.cfg.eval_episodes, offset=900)  # the same seeds every iteration
        ctl = self._controller(estimate[None], beta=0.0)
        results, eps = self._run(ctl, seeds, f"eval_{iteration:02d}", progress)
        g = gap(self.task, eps, estimate, GapConfig(metric=self.cfg.gap_metric, seed=self.cfg.seed),
                twin=self.twin, space=self.space)
        k = sum(r.success for r in results)
        rec = {
            "iteration": iteration,
            "gap": g.value,
            "gap_ci": list(g.ci),
            "gap_metric": g.metric,
            "param_error": None if self.truth is None else float(np.max(np.abs(estimate - self.truth) / np.abs(self.truth))),
            "success_rate": k / len(results),
            "success_ci": list(wilson(k, len(results))),
            "estimate": dict(zip(self.space.names, map(float, estimate), strict=True)),
            "result": summarize(f"refined (iteration {iteration})", results),
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
        """The last finished iteration in ``out`` (-1: none, 0: only the nominal evaluation)."""
        state = self._load_state()
        return -1 if state is None else state["completed"]

    def _load_state(self) -> dict | None:
        path = self.out / STATE_FILE
        if not path.exists():
            return None
        state = read_json(path, "RSR state")
        completed = state.get("completed")
        if (not isinstance(state.get("config"), dict) or not isinstance(state.get("iterations"), list)
                or isinstance(completed, bool) or not isinstance(completed, int) or completed < -1
                or len(state["iterations"]) != completed + 1
                or not isinstance(state.get("posterior"), (dict, type(None)))):
            raise TwinloopError(f"{path} is not a valid RSR state (config, iterations, completed, posterior); "
                                "it is damaged: use another output folder or --overwrite")
        if state["posterior"] is not None:
            try:
                Posterior.from_dict(state["posterior"])
            except (TypeError, KeyError, ValueError) as exc:
                raise TwinloopError(f"{path}: the saved posterior is damaged ({exc}); use another output folder "
                                    "or --overwrite") from exc
        saved = state["config"]
        now = json.loads(json.dumps(asdict(self.cfg)))
        diff = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k) and k != "iterations")
        if diff:
            raise TwinloopError(f"{path} was written by a different RSR config (differs in {diff}); "
                                "use another output folder or the same options")
        return state

    def run(self, progress: Callable[[str, int], None] | None = None,
            log: Callable[[str], None] | None = None) -> RSRResult:
        """Run the remaining iterations; ``progress(stage, n)`` after each episode / fit."""
        cfg = self.cfg
        t0 = time.perf_counter()
        state = self._load_state() or {"config": asdict(cfg), "iterations": [], "posterior": None,
                                       "completed": -1}
        resumed_at = state["completed"] + 1
        post = Posterior.from_dict(state["posterior"]) if state["posterior"] else None
        if state["completed"] < 0:
            rec = self._evaluate(0, self.space.nominal, None, progress)
            state["iterations"].append(rec)
            state["completed"] = 0
            write_json(self.out / STATE_FILE, state, allow_nan=False)
        for it in range(state["completed"] + 1, cfg.iterations + 1):
            if log:
                log(f"iteration {it}/{cfg.iterations}: collecting {cfg.episodes} episodes (beta={cfg.beta:g})")
            if post is None:
                rng = np.random.default_rng([cfg.seed, 0])
                particles = self.space.sample_prior(rng, cfg.particles)
                particles[0] = self.space.nominal
            else:
                particles = post.particles[: cfg.particles]
            self._run(self._controller(particles, cfg.beta), self._seeds(it, cfg.episodes), f"collect_{it:02d}", progress)
            data = [e for j in range(1, it + 1) for e in self._episodes(f"collect_{j:02d}")]
            x0 = self.space.nominal if post is None else post.estimate
            ccfg = CalibConfig(method=cfg.method, window=cfg.window, max_evals=cfg.max_evals,
                               errors_in_variables=cfg.errors_in_variables, delay_steps=cfg.delay_steps, particles=max(cfg.particles, 2), seed=cfg.seed + it)
            post = calibrate(self.task, data, self.space, config=ccfg, x0=x0, twin=self.twin)
            if progress is not None:
                progress("calibrate", 1)
            rec = self._evaluate(it, post.estimate, post, progress)
            state["iterations"].append(rec)
            state["posterior"] = post.to_dict()
            state["completed"] = it
            write_json(self.out / STATE_FILE, state, allow_nan=False)  # the resume point
            if log:
                log(f"iteration {it}: gap {rec['gap']:.4g} {rec['gap_ci']}, param error "
                    f"{rec['param_error'] if rec['param_error'] is not None else 'n/a'}, success {rec['success_rate']:.0%}")
        return self._finish(state, post, resumed_at, time.perf_counter() - t0)

    def _finish(self, state: dict, post: Posterior | None, resumed_at: int, seconds: float) -> RSRResult:
        cfg = self.cfg
        its = state["iterations"][: cfg.iterations + 1]
        summary = {
            "task": self.task.name,
            "world": self.world.describe(),
            "seed": cfg.seed,
            "episodes": cfg.eval_episodes,
            "results": [r["result"] for r in its],
            "iterations": [{k: r[k] for k in ("iteration", "gap", "gap_ci", "param_error", "success_rate",
                                               "success_ci", "gap_metric", "estimate") if k in r} for r in its],
            "config": asdict(cfg),
            "params": self.space.names,
            "truth": None if self.truth is None else dict(zip(self.space.names, map(float, self.truth), strict=True)),
            "posterior": None if post is None else post.to_dict(),
            "wall_time_s": seconds,
        }
        paths = {"summary": self.out / "summary.json"}
        write_json(paths["summary"], summary, allow_nan=False)
        try:
            paths["plot"] = plot_iterations(summary["iterations"], self.out / "rsr.png")
        except ImportError:  # pragma: no cover - matplotlib is a core dependency
            pass
        return RSRResult(summary, post, self.out, resumed_at, paths)


def plot_iterations(iterations: list[dict], path: Path) -> Path:
    """Gap, parameter error and success rate against iteration, one panel each."""
    keys = ["gap", "success_rate"]
    if any(it.get("param_error") is not None for it in iterations):
        keys.insert(1, "param_error")
    from twinloop.viz.plots import plot_curves

    return plot_curves(iterations, path, keys=keys)


def run_rsr(config: RSRConfig, out: str | os.PathLike, world=None, progress=None, log=None,
            mode: str = "new") -> RSRResult:
    """Run an RSR loop in ``out`` (``mode="resume"`` continues the run there; see
    :func:`twinloop.io.output_folder`); see the module docstring."""
    return RSRLoop(config, out, world, mode).run(progress=progress, log=log)


def rsr_table(summary: dict):
    """A rich table of the iterations."""
    from rich.table import Table

    its = summary["iterations"]
    metric = its[0].get("gap_metric", "gap") if its else "gap"
    t = Table(title=f"RSR on {summary['task']} (seed {summary['seed']}, beta {summary['config']['beta']:g})")
    for col in ("iteration", f"gap ({metric})", "95% CI", "param error", "success", "success CI"):
        t.add_column(col, justify="right")
    for r in its:
        pe = r.get("param_error")
        t.add_row(str(r["iteration"]), f"{r['gap']:.4g}", f"[{r['gap_ci'][0]:.3g}, {r['gap_ci'][1]:.3g}]",
                  "n/a" if pe is None else f"{100 * pe:.1f}%", f"{100 * r['success_rate']:.0f}%",
                  f"[{100 * r['success_ci'][0]:.0f}%, {100 * r['success_ci'][1]:.0f}%]")
    return t


__all__ = ["RSRConfig", "RSRLoop", "RSRResult", "plot_iterations", "rsr_table", "run_rsr"]
