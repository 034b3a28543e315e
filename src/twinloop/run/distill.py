"""The outer loop: distill refined actions into a base policy, refine around it, repeat.

Before round 1 the twin is calibrated on excitation episodes recorded in the world (or a saved
posterior is loaded), and a *teacher* (the task's scripted proposer refined at K, or refinement
alone for a task without one) acts in twin-worlds built from the posterior's particles, with
the estimated actuation delay and observation noise: training data that cost no robot time.
Each round then::

    policy_r   = fit(every episode so far, read from the datasets on disk)
    evaluate   policy_r alone, and policy_r + refinement at each K of the sweep, in the world,
               on the same evaluation seeds every round (run_comparison's seeds)
    aggregate  (before the next round)
               twin:  policy_r alone drives in twin-worlds (posterior particles); the teacher
                      labels every state it visits (DAgger: the learner's states, the
                      teacher's actions)
               world: policy_r + refinement acts in the world; its refined plans are labels

Every tick's label is the refined *plan* (``(H, nu)`` actions, column ``refine.plan``), not the
actions that happened to follow (relabelling: under DAgger the learner's actions were sent).
Episodes are written as Parquet through :class:`~twinloop.data.Dataset`, one dataset per
stage (``data/twin/collect``, ``data/twin/dagger_r<r>``, ``data/world/dagger_r<r>`` in
``cfg.out``), as they end, and read back for training; repeated samples are dropped
(:func:`~twinloop.policies.distilled.training_arrays`). Training holds out whole episodes and
keeps the weights of the lowest held-out loss (``cfg.policy.val_fraction``, ``patience``).
Refinement alone (no base policy, and the scripted proposer refined) is swept over the same Ks
once, in the same twin at the same horizon, for the comparison "the K refinement alone needs".

A run is a list of stages (:func:`stages`); ``distill_state.json`` records the finished ones,
so a run can stop at a stage boundary (``budget_s``) and resume there (``mode="resume"``).

Per round: base success, refined success at K, ``min_k`` (the smallest K of the sweep whose
refined success is within 5 points of the sweep's best), ``k_at_goal`` (the smallest K reaching
``goal_success``), training time. Writes to ``cfg.out``: ``summary.json`` (shared schema +
``rounds``, ``baselines``, ``goals``, ``complete``), ``distill_state.json``,
``policy_round<r>.pt``, ``posterior.json``, ``data/``, ``comparison.png`` and ``rounds.png``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from twinloop.control import Controller, ProposerSamples, Refiner
from twinloop.data import Dataset, EpisodeRecorder
from twinloop.data.episodes import recorded_on
from twinloop.errors import TwinloopError, number
from twinloop.io import output_folder, read_json, write_json
from twinloop.plan import make_optimizer
from twinloop.policies.distilled import DistilledPolicy
from twinloop.run.build import refiner_twin
from twinloop.run.config import sources_of
from twinloop.run.distill_config import (  # noqa: F401 - importable from here as before
    BASELINES,
    MIN_K_TOLERANCE,
    PRIOR_TWINS,
    TEACHERS,
    WORLDS,
    DistillConfig,
)
from twinloop.run.evaluate import TwinEstimate, calibrated_twin, calibration_record
from twinloop.run.experiment import EpisodeResult, run_episodes, summarize
from twinloop.stats import wilson
from twinloop.tasks import make_task, task_defaults
from twinloop.viz.plots import plot_comparison, plot_rounds
from twinloop.worlds import make_world
from twinloop.worlds.shifted import shift_settings
from twinloop.worlds.twin import TwinWorld

Progress = Callable[[str, int, int], None]


class Labelled:
    """A controller that records, each tick, the teacher's refined plan as the label.

    The teacher (a refined :class:`~twinloop.control.Controller`) is asked at every tick; the
    ``driver`` (e.g. the base policy alone), when given, is what acts (DAgger: the learner's
    states, the teacher's labels); without one the teacher acts. With ``noise`` the action
    sent is perturbed by Gaussian noise of that standard deviation (a fraction of each action's
    range; drawn from the episode's seed) while the label stays the teacher's plan (DART: the
    teacher shows how to recover from the errors a learner will make, in its own consistent
    closed loop). The episode goes to ``dataset`` when :meth:`finish` is called.
    """

    def __init__(self, teacher: Controller, driver: Controller | None, dataset: Dataset, noise: float = 0.0):
        self.teacher, self.driver, self.dataset, self.task = teacher, driver, dataset, teacher.task
        self.noise = number(noise, "noise (fraction of the action range)", low=0)
        self._rec: EpisodeRecorder | None = None
        self._rng = np.random.default_rng()

    @property
    def last(self):
        return self.teacher.last

    @property
    def n_fallbacks(self) -> int:
        return self.teacher.n_fallbacks

    def reset(self, seed: int | None = None) -> None:
        self.teacher.reset(seed)
        if self.driver is not None:
            self.driver.reset(seed)
        self._rec = EpisodeRecorder.for_task(self.task, len(self.dataset))
        self._rng = np.random.default_rng([0 if seed is None else seed, 37])

    def stop(self) -> None:
        self.teacher.stop()

    def act(self, obs, info: dict | None = None) -> np.ndarray:
        label = self.teacher.act(obs, info)
        tick = self.teacher.last
        # a tick whose refinement failed labels with the plan it fell back to (same (H, nu) shape)
        plan = tick.plan.actions() if tick.plan is not None else label[None]
        action = label if self.driver is None else self.driver.act(obs, info)
        if self.noise > 0:
            span = self.task.action_high - self.task.action_low
            action = np.clip(action + self.noise * span * self._rng.standard_normal(self.task.nu),
                             self.task.action_low, self.task.action_high)
        state = self.task.state_from_obs(obs)
        self._rec.add(len(self._rec) * self.task.control_period, obs, action, twin_state=state,
                      cost=tick.cost, tick=tick, plan=plan)
        return action

    def finish(self, result: EpisodeResult) -> None:
        """End the episode and commit it to the dataset."""
        self._rec.finish(result.success)
        self.dataset.write(self._rec)


def min_k(success: dict[int, float], tolerance: float = MIN_K_TOLERANCE) -> int | None:
    """Smallest K whose success rate is within ``tolerance`` of the best rate (None if empty)."""
    if not success:
        return None
    best = max(success.values())
    return min(k for k, s in success.items() if s >= best - tolerance - 1e-12)


def k_at(success: dict[int, float], level: float) -> int | None:
    """Smallest K whose success rate reaches ``level`` (None if none does)."""
    ks = [k for k, s in success.items() if s >= level - 1e-12]
    return min(ks) if ks else None


class DistillRun:
    """State of one distill run: task, world, twin, twin-worlds, datasets, episode runner, and
    its stages (:func:`stages`), each ``stage(arg, state) -> datasets written``."""

    def __init__(self, cfg: DistillConfig, out: Path, progress: Progress | None = None,
                 log: Callable[[str], None] = print):
        self.cfg, self.out, self.progress, self.log = cfg, out, progress, log
        self.task = make_task(cfg.task)
        self.world = make_world(self.task, cfg.world, severity=cfg.severity, seed=cfg.experiment.one_world_seed)
        self.twin = refiner_twin(self.task, cfg.planner.backend, cfg.twin_timestep, cfg.refiner.horizon)
        self.scripted = self.task.default_proposer()
        self.estimate: TwinEstimate | None = None
        self.info = {"fps": 1.0 / self.task.control_period, **recorded_on(self.task),
                     "obs_names": list(self.task.obs_names), "param_names": self.task.param_space().names,
                     "seed": cfg.seed}

    def dataset(self, side: str, name: str) -> tuple[Dataset, str]:
        """A fresh dataset ``data/<side>/<name>`` (a stage killed half-way is redone from
        scratch: its seeds give the same episodes) and its path relative to ``out``."""
        rel = f"data/{side}/{name}"
        return Dataset.create(self.out / rel, {**self.info, "source": side}, mode="overwrite"), rel

    def calibrate(self, resume: bool = False) -> None:
        """Calibrate (or load ``cfg.twin_worlds``; on resume the run's own ``posterior.json``)."""
        cfg = self.cfg
        if cfg.twin_worlds == PRIOR_TWINS:
            space = self.task.param_space()
            shift = "with a delay and noise level 0-3 each" if cfg.prior_shift else "no delay, no observation noise"
            self.log(f"no calibration: twin-worlds drawn from the prior of {space.names} ({shift})")
            self.estimate = TwinEstimate(space.nominal, 0, np.zeros(len(self.task.obs_names)))
            return
        saved = self.out / "posterior.json"
        posterior = str(saved) if resume and saved.exists() else cfg.twin_worlds
        self.estimate = calibrated_twin(self.task, self.world, cfg.calib, cfg.calib_seeds(), cfg.calib_ticks,
                                        posterior, cfg.seed, self.log)
        if self.estimate.posterior is not None:
            write_json(saved, self.estimate.posterior.to_dict(), allow_nan=False)
        if cfg.prior_shift:
            self.log("twin-worlds: the nominal twin, each with a drawn delay and noise level 0-3")

    def twin_world(self, i: int) -> TwinWorld:
        """The i-th twin-world: the posterior's particle ``i mod P``, the estimated delay and noise
        (``posterior="prior"``: the i-th draw from the task's prior; with ``prior_shift`` a drawn
        delay and noise, around those parameters or the nominal ones)."""
        est = self.estimate
        if self.cfg.twin_worlds == PRIOR_TWINS or self.cfg.prior_shift:
            rng = np.random.default_rng([self.cfg.seed, 17, i])
            prior = self.cfg.twin_worlds == PRIOR_TWINS
            params = self.task.param_space().sample_prior(rng, 1)[0] if prior else est.params
            shift = shift_settings(self.task, int(rng.integers(0, 4)) if self.cfg.prior_shift else 0)
            return TwinWorld(self.task, params, delay_steps=shift["delay_steps"], obs_noise=shift["obs_noise"])
        particles = est.posterior.particles if est.posterior is not None else est.params[None]
        return TwinWorld(self.task, particles[i % len(particles)], delay_steps=est.delay_steps, obs_noise=est.obs_noise)

    def controller(self, proposer, k: int, refine: bool = True, warm_start: bool = True) -> Controller:
        rcfg = replace(self.cfg.refiner, num_samples=k)
        refiner = Refiner(self.task, self.twin, make_optimizer(self.cfg.optimizer, noise=self.cfg.noise), rcfg)
        n_prop = self.cfg.proposal_samples if proposer is not None else 0
        sources = [ProposerSamples(proposer, n_prop)] if n_prop else []
        return Controller(refiner, proposer, refine=refine, sources=sources, warm_start=warm_start)

    def episodes(self, label: str, world, controller, seeds: Sequence[int]) -> list[EpisodeResult]:
        """One episode per seed in ``world``; a :class:`Labelled` controller's go to its dataset."""
        done: list[EpisodeResult] = []

        def after(r: EpisodeResult) -> None:
            if isinstance(controller, Labelled):
                controller.finish(r)
            done.append(r)
            if self.progress is not None:
                self.progress(label, len(done), len(seeds))

        return run_episodes(world, controller, seeds, max_ticks=self.cfg.max_ticks, record=False, progress=after)

    def twin_episodes(self, label: str, make: Callable[[], Labelled], seeds: Sequence[int]) -> list[EpisodeResult]:
        """One episode per seed, the i-th in twin-world i (a fresh controller each)."""
        out = []
        for i, s in enumerate(seeds):
            out += self.episodes(label, self.twin_world(i), make(), [s])
        return out

    def teacher(self, policy: DistilledPolicy | None) -> Controller:
        use_policy = self.cfg.teacher == "policy" and policy is not None
        return self.controller(policy if use_policy else self.scripted, self.cfg.refiner.num_samples,
                               warm_start=self.cfg.teacher_warm)

    def policy(self, round_: int) -> DistilledPolicy:
        return DistilledPolicy.load(self.out / f"policy_round{round_}.pt", self.task)

    # -- stages ------------------------------------------------------------------------------

    def collect(self, _: str, state: dict) -> list[str]:
        """Teacher episodes in twin-worlds (with ``cfg.collect_noise``)."""
        ds, rel = self.dataset("twin", "collect")
        got = self.twin_episodes("collect (twin)", lambda: Labelled(self.teacher(None), None, ds, self.cfg.collect_noise),
                                 self.cfg.collect_seeds())
        state["summary"]["collect"] = {"episodes": len(got), "successes": int(sum(r.success for r in got))}
        self.log(f"collected {len(got)} teacher episodes in twin-worlds: "
                 f"{sum(r.success for r in got)}/{len(got)} succeeded")
        return [rel]

    def baseline(self, arg: str, state: dict) -> list[str]:
        """Refinement without the learned policy at one K of the sweep (``arg``: ``name K=k``)."""
        cfg = self.cfg
        name, k = arg.split(" ")
        k = int(k.removeprefix("K="))
        proposer = None if BASELINES[name] == "none" else self.scripted
        if BASELINES[name] == "scripted" and proposer is None:
            return []  # a task without a scripted proposer has no such baseline
        got = self.episodes(f"{name} K={k}", self.world, self.controller(proposer, k), cfg.eval_seeds())
        if k == cfg.refiner.num_samples:
            _record(state, name, got)
        _swept(state["summary"]["baselines"].setdefault(name, {}), k, got, cfg.goal_success)
        return []

    def train(self, arg: str, state: dict) -> list[str]:
        """Fit the round's policy on every dataset so far; save it as ``policy_round<r>.pt``."""
        round_ = int(arg)
        label = f"train r{round_}"
        pcfg = self.cfg.policy_config(self.task)
        demos = [Dataset(self.out / rel).read(i) for rel in state["datasets"] for i in Dataset(self.out / rel).indices]
        cb = None
        if self.progress is not None:
            def cb(step, steps, loss):
                self.progress(label, step, steps)
        policy, log = DistilledPolicy.fit(self.task, demos, pcfg, progress=cb)
        policy.save(self.out / f"policy_round{round_}.pt")
        sides = {side: sum(len(Dataset(self.out / rel)) for rel in state["datasets"] if rel.startswith(f"data/{side}/"))
                 for side in ("twin", "world")}
        rec = {"round": round_, "train_episodes": sides, "train_samples": log.samples,
               "val_samples": log.val_samples, "train_duplicates": log.duplicates, "train_seconds": log.seconds,
               "train_steps": log.steps, "best_step": log.best_step, "train_loss": log.losses[-1] if log.losses else None,
               "val_loss": min(log.val_losses) if log.val_losses else None, "n_params": policy.n_params}
        state["summary"]["rounds"] = [r for r in state["summary"]["rounds"] if r["round"] != round_] + [rec]
        held = f", held-out loss {rec['val_loss']:.3f} at step {log.best_step}" if log.val_losses else ""
        fitted = (f"{log.steps} steps, loss {log.losses[0]:.3f} -> {log.losses[-1]:.3f}{held}" if log.losses
                  else f"a memory ({policy.config.learner}, k={policy.config.neighbours})")
        self.log(f"round {round_}: trained {policy.n_params / 1e6:.2f} M parameters on {len(demos)} episodes "
                 f"({log.samples} samples, {log.duplicates} duplicates dropped), {fitted} in {log.seconds:.0f} s")
        return []

    def evaluate(self, arg: str, state: dict) -> list[str]:
        """The round's policy in the world, on the evaluation seeds: alone (``arg``: ``r alone``)
        or refined at one K of the sweep (``r K=k``)."""
        cfg, K, n = self.cfg, self.cfg.refiner.num_samples, self.cfg.episodes
        round_, what = arg.split(" ")
        round_ = int(round_)
        policy, seeds = self.policy(round_), cfg.eval_seeds(alone=what == "alone")
        rec = next(r for r in state["summary"]["rounds"] if r["round"] == round_)
        if what == "alone":
            base = self.episodes(f"base r{round_}", self.world, self.controller(policy, K, refine=False), seeds)
            _record(state, "distilled", base)
            k_base, n = sum(e.success for e in base), len(base)
            rec.update({"base_success": k_base / n, "base_ci": list(wilson(k_base, n)), "base_error": _error(base),
                        "base_episodes": n})
            self.log(f"round {round_}: the policy alone {k_base}/{n}, mean final error {1e3 * _error(base):.0f} mm")
            return []
        k = int(what.removeprefix("K="))
        got = self.episodes(f"K={k} r{round_}", self.world, self.controller(policy, k), seeds)
        if k == K:
            _record(state, "distilled+refined", got)
            rate = _rate(got)
            rec.update({"refined_success": rate, "refined_ci": list(wilson(round(rate * n), n)),
                        "refined_error": _error(got)})
        _swept(rec, k, got, cfg.goal_success)
        self.log(f"round {round_}: refined at K={k} {round(_rate(got) * n)}/{n}; min K so far {rec['min_k']}, "
                 f"K at {100 * cfg.goal_success:.0f}%: {rec['k_at_goal']}")
        return []

    def aggregate(self, arg: str, state: dict) -> list[str]:
        """DAgger (``arg``: ``r twin`` or ``r world``): the round's policy drives in twin-worlds
        and the teacher labels its states; the policy + refinement acts in the world and its
        refined plans are labels."""
        cfg, K = self.cfg, self.cfg.refiner.num_samples
        round_, side = arg.split(" ")
        policy = self.policy(int(round_))
        ds, rel = self.dataset(side, f"dagger_r{round_}")
        if side == "twin":
            self.twin_episodes(f"dagger r{round_} (twin)", lambda: Labelled(
                self.teacher(policy), self.controller(policy, K, refine=False), ds), cfg.twin_dagger_seeds(int(round_)))
        else:
            self.episodes(f"dagger r{round_} (world)", self.world, Labelled(self.controller(policy, K), None, ds),
                          cfg.dagger_seeds(int(round_)))
        return [rel]


#: the resume point of a distill run in its output folder
STATE_FILE = "distill_state.json"


def stages(cfg: DistillConfig) -> list[str]:
    """The stages of a run, in order: ``collect``, ``baseline <name> K=<k>`` for each K of the
    sweep, then per round ``train r``, ``evaluate r alone``, ``evaluate r K=<k>`` for each K
    and (before the next round) ``aggregate r twin`` and ``aggregate r world`` (those with
    episodes to run): each a few minutes at most, so that a run can go in short pieces. Calibration is not one: it is redone (or ``posterior.json``
    reloaded) every time a run starts or resumes."""
    ks = [f"K={k}" for k in cfg.k_sweep]
    out = ["collect", *(f"baseline {b} {k}" for b in cfg.baselines for k in ks)]
    for r in range(1, cfg.rounds + 1):
        out += [f"train {r}", f"evaluate {r} alone", *(f"evaluate {r} {k}" for k in ks)]
        if r < cfg.rounds:
            out += [f"aggregate {r} {side}" for side, n in (("twin", cfg.twin_dagger), ("world", cfg.dagger_episodes)) if n]
    return out


def run_distill(cfg: DistillConfig, progress: Progress | None = None, log: Callable[[str], None] = print,
                mode: str = "new", budget_s: float | None = None, sources: dict[str, str] | None = None) -> dict:
    """Calibrate, collect in twin-worlds, then ``cfg.rounds`` of train -> evaluate -> aggregate.

    ``progress(label, done, total)`` is called after each episode and every 50 training steps.
    ``mode``: ``new`` needs an absent or empty ``cfg.out``; ``resume`` continues the run there
    after the last stage it finished (see :func:`stages`; the same config, ``rounds`` may
    grow); ``overwrite`` replaces an earlier run there (see :func:`twinloop.io.output_folder`).
    ``budget_s``: stop at the first stage boundary after this many seconds (at least one stage
    runs; ``summary["complete"]`` is then false; resume to continue), so that a long run goes
    in pieces.
    Returns the summary written to ``cfg.out/summary.json``.
    """
    t_start = time.perf_counter()
    if budget_s is not None:
        budget_s = number(budget_s, "budget_s (s)", low=0)
    out = output_folder(cfg.out, mode, resumable=True)  # before the first episode: a bad --out fails now
    state = _load_state(out, cfg)
    run = DistillRun(cfg, out, progress, log)
    if state is None:
        state = {"config": _jsonable(cfg), "done": [], "datasets": [], "summary": {}, "results": {}, "per_episode": {}}
    t_piece = t_start
    t_start -= state["summary"].get("wall_time_s", 0.0)  # the wall time of the pieces before this one
    run.calibrate(resume=bool(state["done"]))
    summary = state["summary"]
    summary.update({"task": run.task.name, "world": run.world.describe(), "seed": cfg.seed, "episodes": cfg.episodes,
                    "config": asdict(cfg), "config_sources": sources or sources_of(cfg, task_defaults(cfg.task)),
                    "calibration": calibration_record(run.task, run.world, run.estimate)})
    summary.setdefault("baselines", {})
    summary["rounds"] = summary.get("rounds", [])[: cfg.rounds]
    ran = False
    for stage in stages(cfg):
        if stage in state["done"]:
            continue
        if ran and budget_s is not None and time.perf_counter() - t_piece > budget_s:
            log(f"stopping before stage {stage!r}: {budget_s:.0f} s budget spent (resume to continue)")
            break
        kind, _, arg = stage.partition(" ")
        state["datasets"] += getattr(run, kind)(arg, state)
        state["done"].append(stage)
        ran = True
        summary["complete"] = all(s in state["done"] for s in stages(cfg))
        _write(state, out, t_start, cfg)
        write_json(out / STATE_FILE, state)  # the resume point
    summary["complete"] = all(s in state["done"] for s in stages(cfg))
    summary = _write(state, out, t_start, cfg)
    if summary["complete"]:
        _plots(summary, out)
    return summary


def _jsonable(cfg: DistillConfig) -> dict:
    return json.loads(json.dumps(asdict(cfg)))


def _load_state(out: Path, cfg: DistillConfig) -> dict | None:
    """The state of the run in ``out`` (None: a fresh folder); a damaged state or one of another
    config (``rounds``, ``episodes`` shown and ``out`` aside) fails clearly."""
    path = out / STATE_FILE
    if not path.exists():
        return None
    state = read_json(path, "distill state")
    keys = {"config": dict, "done": list, "datasets": list, "summary": dict, "results": dict, "per_episode": dict}
    if any(not isinstance(state.get(k), t) for k, t in keys.items()):
        raise TwinloopError(f"{path} is not a valid distill state ({', '.join(keys)}); it is damaged: use another "
                            "output folder or --overwrite")
    saved, now = state["config"], _jsonable(cfg)
    diff = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k) and k not in ("rounds", "out"))
    if diff:
        raise TwinloopError(f"{path} was written by a different distill config (differs in {diff}); use another "
                            "output folder or the same options")
    if any(not s.startswith("aggregate") and s not in stages(cfg) for s in state["done"]):
        raise TwinloopError(f"{path} finished stages beyond --rounds {cfg.rounds}; resume with at least as many rounds")
    return state


def goals(summary: dict, goal_success: float) -> dict:
    """The goals of the outer loop, checked: base success rising every round, the last round's
    base success, the K at which distilled + refinement reaches ``goal_success`` against each
    baseline's (``at_half_k``: at most half of it; a baseline that never reaches it counts as
    needing more than the sweep's largest K), and the longest training."""
    trained = summary["rounds"]
    rounds = [r for r in trained if "base_success" in r]  # evaluated (a run in pieces may not be)
    base = [r["base_success"] for r in rounds]
    k_d = rounds[-1].get("k_at_goal") if rounds else None
    vs = {}
    for name, b in summary["baselines"].items():
        k_b = b["k_at_goal"]
        k_max = max(int(k) for k in b["k_success"])
        # a baseline that never reaches the level needs more than the sweep's largest K
        half = k_d is not None and 2 * k_d <= (k_b if k_b is not None else k_max)
        vs[name] = {"k_at_goal": k_b, "distilled_k_at_goal": k_d, "at_half_k": bool(half),
                    "ratio": None if k_d is None or k_b is None else k_d / k_b}
    return {"base_rising": bool(all(b > a for a, b in zip(base, base[1:]))) if len(base) > 1 else None,
            "base_last": base[-1] if base else None,
            "k_at_goal": vs,
            "max_train_seconds": max((r["train_seconds"] for r in trained), default=None)}


def _swept(rec: dict, k: int, episodes: Sequence[EpisodeResult], goal_success: float) -> None:
    """Add K's success and error to a sweep record (``k_success``, ``k_error``, in K order)
    and update its ``min_k`` and ``k_at_goal`` over the Ks measured so far."""
    for key, value in (("k_success", _rate(episodes)), ("k_error", _error(episodes))):
        rec[key] = dict(sorted({**rec.get(key, {}), str(k): value}.items(), key=lambda kv: int(kv[0])))
    rates = {int(kk): v for kk, v in rec["k_success"].items()}
    rec.update({"min_k": min_k(rates), "k_at_goal": k_at(rates, goal_success)})


def _rate(episodes) -> float:
    return float(np.mean([e.success for e in episodes]))


def _error(episodes) -> float:
    return float(np.mean([e.final_error for e in episodes]))


def _record(state: dict, name: str, episodes: Sequence[EpisodeResult]) -> None:
    """Keep a controller's evaluation (its ``results`` row and per-episode records) in ``state``."""
    state["results"][name] = summarize(name, episodes)
    state["per_episode"][name] = [{"seed": e.seed, "success": e.success, "final_error": e.final_error,
                                   "ticks": e.ticks} for e in episodes]


def _write(state: dict, out: Path, t_start: float, cfg: DistillConfig) -> dict:
    summary = state["summary"]
    order = [n for n in ("distilled", "distilled+refined", *BASELINES) if n in state["results"]]
    summary["results"] = [state["results"][n] for n in order]
    summary["per_episode"] = {n: state["per_episode"][n] for n in order}
    summary["rounds"] = sorted(summary["rounds"], key=lambda r: r["round"])
    summary["goals"] = goals(summary, cfg.goal_success)
    summary["wall_time_s"] = time.perf_counter() - t_start
    write_json(out / "summary.json", summary)
    return summary


def _plots(summary: dict, out: Path) -> None:
    plot_comparison(summary, out / "comparison.png")
    plot_rounds(summary["rounds"], out / "rounds.png")
