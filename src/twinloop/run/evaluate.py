"""Policy evaluation in the twin: does the twin rank policies the way the world does?

Every policy (:class:`~twinloop.run.policy.PolicySpec`) runs the same seeded episodes in the
world and in each twin-world (:class:`~twinloop.worlds.twin.TwinWorld`, a simulated world built
from the twin's model):

    nominal              the twin as it is: nominal parameters, no delay, no noise
    calibrated           parameters fitted to world data, plus the actuation delay the fit
                         estimated and the observation noise estimated from its residuals
                         (:func:`~twinloop.calib.noise.estimate_obs_noise`): a world with noise
                         and delay is only predicted by a twin that has them too
    calibrated-physics   the fitted parameters alone (what delay and noise add, by difference)

The calibration data are excitation episodes (``task.excitation``) recorded in the world on
their own seeds; a saved posterior (``posterior=``) can be used instead. Per policy: success on
every side with 95% Wilson intervals. Per twin: Pearson r, Spearman rho and MMRV (SIMPLER's
definitions, :mod:`twinloop.stats`) between twin and world success, with 95% bootstrap
intervals that resample each policy's episodes (seeds, paired across sides): how precisely
these episode counts pin the numbers down for *these* policies, not how they generalize to
other policies. ``engines=`` adds the cross-engine report (:mod:`twinloop.run.engines`).

``world_from=`` reuses the world episodes of an earlier evaluation (its ``summary.json``) instead
of running the world again: new twins judged against outcomes already recorded, as a real
robot's would be. The earlier run must have the same task, world (its ``describe()``, so the
same hidden physics, severity and seed), episode length and, for every policy here, exactly
these seeds; anything else is refused. Its world rows and per-episode outcomes are copied.

Writes to ``out``: ``summary.json`` (shared schema: ``results`` are the world's rows; plus
``evaluation``), ``evaluation.png`` (twin vs world success, one point per policy and twin,
diagonal drawn), ``posterior.json`` (the calibration, reusable as ``posterior=``) and the world
episodes under ``episodes/world/<policy>``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from twinloop.calib.fit import CalibConfig, Posterior, calibrate
from twinloop.calib.noise import estimate_obs_noise
from twinloop.calib.windows import record_trajectory
from twinloop.data import Dataset
from twinloop.errors import TwinloopError, choose, number
from twinloop.io import output_folder, read_json, write_json
from twinloop.run.config import composed, config_dict, sources_of
from twinloop.run.engines import engine_report
from twinloop.run.executor import EpisodeBatch, Executor, SerialExecutor
from twinloop.run.experiment import summarize
from twinloop.run.policy import PolicySpec, policy_controller
from twinloop.run.sections import ExperimentConfig
from twinloop.stats import mmrv, pearson, spearman, wilson
from twinloop.tasks import make_task, task_defaults
from twinloop.twin import BACKENDS, make_twin
from twinloop.twin.engine import Engine
from twinloop.viz.plots import plot_evaluation
from twinloop.worlds import WORLDS, make_world
from twinloop.worlds.twin import ModelWorld, TwinWorld

TWINS = ("nominal", "calibrated", "calibrated-physics")

#: eight push-t policies from hopeless to strong (scripted with noise, refinement at growing K)
DEFAULT_POLICIES = (
    "scripted@noise=0.3", "scripted@noise=0.1", "scripted", "scripted+mppi@k=4", "scripted+mppi@k=8",
    "scripted+mppi@k=16", "scripted+mppi@k=32", "scripted+cem@k=32,iterations=2",
)


@composed()
@dataclass(frozen=True)
class EvaluateConfig:
    """Every choice of an evaluation (``twinloop evaluate``'s options are generated from these fields).

    Flat construction reaches the experiment's fields (``EvaluateConfig(task="block-push",
    episodes=2)``).

    Attributes:
        experiment: the task, the world the twin should predict (its ``severity``, its hidden
            physics seeded by ``world_seed``: 0 unless set; ``None`` is ``seed``), episodes per
            policy and side (the same seeds everywhere), the seed of the episodes (``seed *
            100000 + i``, as ``run``), calibration and bootstrap, the episode length, the output
            folder and whether the world episodes are written to ``out/episodes/world`` (none with
            ``world_from``) (:class:`~twinloop.run.sections.ExperimentConfig`).
        policies: policy specs (text form, see :mod:`twinloop.run.policy`); at least two.
        twins: the twin-worlds to compare (``nominal``, ``calibrated``, ``calibrated-physics``);
            the last one listed is the headline of ``summary["evaluation"]``.
        calib: the calibration of the calibrated twins (``delay_steps=None`` estimates the delay).
        calib_episodes: excitation episodes recorded in the world for calibration.
        calib_ticks: their length (ticks).
        calib_seed: seeds the excitation episodes and the noise estimate (default: ``seed``); runs
            that pool into one evaluation (new seeds, same twin) pass the same one.
        posterior: a saved posterior (``posterior.json`` of ``twinloop calibrate``) to use
            instead of calibrating; ``"nominal"``: the nominal twin, uncalibrated.
        models: saved learned twins as more twin-worlds, ``backend=path`` (``learned=l.pt``,
            ``hybrid=h.pt``), each stepped as a :class:`~twinloop.worlds.twin.ModelWorld`.
        engines: engine variants for the cross-engine report (``Engine.parse`` strings).
        plan_states: world states at which refinement's selected plan is compared across engines.
        n_boot: bootstrap resamples.
        world_from: an earlier evaluation's ``summary.json`` whose world episodes are reused
            instead of running the world (see the module docstring for what must match).
    """

    experiment: ExperimentConfig = field(default_factory=lambda: ExperimentConfig(
        world_seed=0, episodes=10, out="twinloop-eval", video=False))
    policies: tuple[str, ...] = DEFAULT_POLICIES
    twins: tuple[str, ...] = ("nominal", "calibrated")
    calib: CalibConfig = field(default_factory=lambda: CalibConfig(method="cma", max_evals=300, delay_steps=None))
    calib_episodes: int = 10
    calib_ticks: int = 60
    calib_seed: int | None = None
    posterior: str | None = None
    models: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    plan_states: int = 30
    n_boot: int = 1000
    world_from: str | None = None

    def __post_init__(self):
        if not isinstance(self.experiment, ExperimentConfig):
            raise TwinloopError(f"experiment must be an ExperimentConfig, got {type(self.experiment).__name__}")
        choose("world", self.experiment.world, tuple(WORLDS))
        self.experiment.refuse("evaluate", world_per_episode=False, first_episode=0, video=False)
        for name in ("policies", "twins", "engines", "models"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if len(self.policies) < 2:
            raise TwinloopError(f"policies: need at least two to compare rankings, got {len(self.policies)}")
        specs = [PolicySpec.parse(p) for p in self.policies]
        labels = [s.label for s in specs]
        if len(set(labels)) != len(labels):
            raise TwinloopError(f"policies must differ, got duplicates in {labels}")
        if not self.twins:
            raise TwinloopError("twins: name at least one twin-world")
        for t in self.twins:
            choose("twin", t, TWINS)
        for e in self.engines:
            Engine.parse(e)
        for m in self.models:
            backend, sep, path = m.partition("=")
            choose("backend", backend, tuple(BACKENDS))
            if not sep or not path:
                raise TwinloopError(f"models: entries look like backend=path, got {m!r}")
        for name in ("calib_episodes", "calib_ticks", "n_boot"):
            if getattr(self, name) < 1:
                raise TwinloopError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.calib_seed is not None:
            object.__setattr__(self, "calib_seed", number(self.calib_seed, "calib_seed", low=0, integer=True))
        if self.plan_states < 0:
            raise TwinloopError(f"plan_states must be >= 0, got {self.plan_states}")
        if not isinstance(self.calib, CalibConfig):
            raise TwinloopError(f"calib must be a CalibConfig, got {type(self.calib).__name__}")

    def specs(self) -> list[PolicySpec]:
        return [PolicySpec.parse(p) for p in self.policies]

    def episode_seeds(self) -> list[int]:
        return [self.seed * 100_000 + i for i in range(self.episodes)]

    def calib_base_seed(self) -> int:
        return self.seed if self.calib_seed is None else self.calib_seed

    def calib_seeds(self) -> list[int]:
        return [self.calib_base_seed() * 100_000 + 90_000 + i for i in range(self.calib_episodes)]


#: the ``posterior`` value that stands for the uncalibrated nominal twin (see :func:`calibrated_twin`)
NOMINAL_TWIN = "nominal"


@dataclass(frozen=True)
class TwinEstimate:
    """What the calibrated twin-world carries: parameters, delay, observation noise."""

    params: np.ndarray
    delay_steps: int
    obs_noise: np.ndarray
    posterior: Posterior | None = None


def estimate_twin(cfg: EvaluateConfig, task, world, log: Callable[[str], None] = print) -> TwinEstimate:
    """Calibrate the twin to excitation episodes recorded in ``world`` (or load ``cfg.posterior``);
    estimate the observation noise from the same data."""
    return calibrated_twin(task, world, cfg.calib, cfg.calib_seeds(), cfg.calib_ticks, cfg.posterior,
                           cfg.calib_base_seed(), log)


def calibrated_twin(task, world, calib: CalibConfig, seeds, ticks: int, posterior: str | None = None,
                    seed: int = 0, log: Callable[[str], None] = print) -> TwinEstimate:
    """Record an excitation episode (``task.excitation``) of ``ticks`` ticks in ``world`` per seed,
    fit the twin's parameters to them with ``calib`` (or load the saved ``posterior``) and
    estimate the observation noise from the same data. ``posterior="nominal"``
    (:data:`NOMINAL_TWIN`) records nothing and returns the nominal twin itself: nominal
    parameters, no delay, no observation noise (a model that knows nothing of the world)."""
    if posterior == NOMINAL_TWIN:
        log("no calibration: the nominal twin (nominal parameters, no delay, no observation noise)")
        return TwinEstimate(task.param_space().nominal, 0, np.zeros(len(task.obs_names)))
    trajs = [record_trajectory(world, task.excitation(s), s, ticks) for s in seeds]
    if posterior:
        post = Posterior.load(posterior, task.param_space())
    else:
        log(f"calibrating on {len(trajs)} excitation episodes ({calib.method}, {calib.max_evals} evaluations)")
        post = calibrate(task, trajs, config=calib)
    delay = int(post.delay_steps or 0)
    noise = estimate_obs_noise(task, trajs, post.estimate, delay_steps=delay, seed=seed)
    return TwinEstimate(post.estimate, delay, noise, post)


def policy_in_world(task_name: str, world_factory: Callable, spec: PolicySpec):
    """``(world, controller)`` of one policy in one world: an episode batch's factory."""
    task = make_task(task_name)
    return world_factory(task), policy_controller(task, spec)


def model_world(backend: str, path: str, task) -> ModelWorld:
    """A saved twin (``learned``, ``hybrid``) of ``task`` as a world."""
    return ModelWorld(task, make_twin(backend, task.model, task.param_space(), checkpoint=path))


def _world_factories(cfg: EvaluateConfig, est: TwinEstimate | None, engine: Engine | None = None) -> dict[str, Callable]:
    out = {"world": partial(make_world, name=cfg.world, severity=cfg.severity, seed=cfg.experiment.one_world_seed)} if engine is None else {}
    if engine is None:
        for m in cfg.models:
            backend, _, path = m.partition("=")
            out[backend] = partial(model_world, backend, path)
    for t in cfg.twins:
        if t == "nominal":
            out[t] = partial(TwinWorld, engine=engine)
        else:
            out[t] = partial(TwinWorld, params=est.params, engine=engine) if t == "calibrated-physics" else partial(
                TwinWorld, params=est.params, delay_steps=est.delay_steps, obs_noise=est.obs_noise, engine=engine)
    return out


def recorded_world(cfg: EvaluateConfig, task, world) -> dict[str, dict]:
    """The world side of ``cfg.world_from`` for this run: per policy label, ``{"result": its
    results row, "episodes": its per-episode rows}``; a :class:`TwinloopError` names what does
    not match (task, world, episode length, a policy or its seeds)."""
    path = cfg.world_from
    s = read_json(path, "world_from summary")
    try:
        config, rows, results = s["config"], s["per_episode"]["world"], {r["controller"]: r for r in s["results"]}
        theirs = {"task": s["task"], "world": s["world"], "max_ticks": config.get("experiment", config)["max_ticks"]}
    except (KeyError, TypeError) as exc:
        raise TwinloopError(f"world_from {path!r} is not an evaluation summary.json (missing {exc})") from exc
    ours = {"task": task.name, "world": json.loads(json.dumps(world.describe())), "max_ticks": cfg.max_ticks}
    for key, value in ours.items():
        if theirs[key] != value:
            raise TwinloopError(f"world_from {path!r}: its {key} is {theirs[key]!r}, this run's is {value!r}: "
                                "not the same world episodes")
    seeds = cfg.episode_seeds()
    out = {}
    for spec in cfg.specs():
        label = spec.label
        if label not in rows or label not in results:
            raise TwinloopError(f"world_from {path!r} has no world episodes of policy {label!r}; it has {sorted(rows)}")
        if [r["seed"] for r in rows[label]] != seeds:
            got = [r["seed"] for r in rows[label]]
            raise TwinloopError(f"world_from {path!r}: policy {label!r} ran seeds {got[0]}..{got[-1]} ({len(got)}), "
                                f"this run needs {seeds[0]}..{seeds[-1]} ({len(seeds)}): pass its --seed and --episodes")
        out[label] = {"result": results[label], "episodes": rows[label]}
    return out


def _folder(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", label)


def ranking_metrics(twin: np.ndarray, world: np.ndarray, n_boot: int = 1000, seed: int = 0) -> dict:
    """Pearson, Spearman, MMRV of per-policy success, with 95% bootstrap intervals.

    Args:
        twin, world: ``(P, N)`` episode outcomes (0/1) of P policies on the same N seeds;
            the bootstrap resamples each policy's seeds, the same ones on both sides.
    """
    s, r = twin.mean(axis=1), world.mean(axis=1)
    rng = np.random.default_rng([seed, 13])
    P, N = world.shape
    idx = rng.integers(0, N, size=(n_boot, P, N))
    rows = np.arange(P)[None, :, None]
    bs, br = twin[rows, idx].mean(axis=2), world[rows, idx].mean(axis=2)
    boot = {"pearson": [], "spearman": [], "mmrv": []}
    for a, b in zip(bs, br, strict=True):
        boot["pearson"].append(pearson(a, b))
        boot["spearman"].append(spearman(a, b))
        boot["mmrv"].append(mmrv(a, b))
    out = {"pearson": pearson(s, r), "spearman": spearman(s, r), "mmrv": mmrv(s, r)}
    for k, v in boot.items():
        v = np.asarray(v)
        v = v[np.isfinite(v)]
        out[f"{k}_ci"] = [float(x) for x in np.quantile(v, [0.025, 0.975])] if v.size else [float("nan")] * 2
    err = s - r
    out["mean_abs_error"] = float(np.abs(err).mean())
    out["max_abs_error"] = float(np.abs(err).max())
    out["within_10_points"] = int((np.abs(err) <= 0.1 + 1e-12).sum())
    return out


def run_evaluation(cfg: EvaluateConfig, progress=None, log: Callable[[str], None] = print,
                   executor: Executor | None = None, mode: str = "new", sources: dict[str, str] | None = None) -> dict:
    """Run every policy in the world and in each twin-world on the same seeds; write the outputs.

    ``progress(label, done, total)`` after each episode; ``executor``: where episodes run
    (default: serially here; the same results either way); ``mode``: ``new`` needs an absent or
    empty ``cfg.out``, ``overwrite`` replaces an earlier run there
    (:func:`twinloop.io.output_folder`). Returns the summary.
    """
    t_start = time.perf_counter()
    out = output_folder(cfg.out, mode)  # before any work: a bad --out fails now
    task = make_task(cfg.task)
    world = make_world(task, cfg.world, severity=cfg.severity, seed=cfg.experiment.one_world_seed)
    specs = cfg.specs()
    labels = [s.label for s in specs]
    seeds = cfg.episode_seeds()
    reused = recorded_world(cfg, task, world) if cfg.world_from else None  # refused before any work
    est = estimate_twin(cfg, task, world, log) if any(t != "nominal" for t in cfg.twins) else None
    if est is not None and est.posterior is not None:
        write_json(out / "posterior.json", est.posterior.to_dict(), allow_nan=False)  # reusable: posterior=
    engines = [Engine.parse(e) for e in cfg.engines]
    sides = dict(_world_factories(cfg, est))
    if reused is not None:
        del sides["world"]
    base = cfg.twins[-1]
    for e in engines:
        sides[f"{base} | {e.label}"] = _world_factories(cfg, est, e)[base]
    jobs = [(side, i) for side in sides for i in range(len(specs))]
    datasets = {}
    if cfg.record and reused is None:
        for i, label in enumerate(labels):
            datasets[i] = Dataset.create(out / "episodes" / "world" / _folder(label), {"fps": 1.0 / task.control_period, "twinloop": {
                "task": task.name, "controller": label, "world": world.describe(), "seed": cfg.seed,
                "obs_names": list(task.obs_names), "param_names": task.param_space().names}})
    batches = [EpisodeBatch(partial(policy_in_world, cfg.task, sides[side], specs[i]), seeds,
                            options={"max_ticks": cfg.max_ticks, "record": cfg.record and side == "world"})
               for side, i in jobs]
    counts: dict[str, int] = {}

    def on_episode(b: int, r) -> None:
        side, i = jobs[b]
        if r.recorder is not None:
            datasets[i].write(r.recorder)
            r.recorder = None
        counts[side] = counts.get(side, 0) + 1
        if progress is not None:
            progress(side, counts[side], len(seeds) * len(specs))

    log(f"{len(specs)} policies x {len(sides)} sides x {len(seeds)} episodes"
        + (f" (the world's reused from {cfg.world_from})" if reused is not None else ""))
    results = (executor or SerialExecutor()).run(batches, on_episode)
    per_episode = {"world": {lab: r["episodes"] for lab, r in reused.items()}} if reused is not None else {}
    per_episode.update({side: {} for side in sides})
    world_rows = {lab: r["result"] for lab, r in reused.items()} if reused is not None else {}
    for (side, i), res in zip(jobs, results, strict=True):
        per_episode[side][labels[i]] = [{"seed": e.seed, "success": e.success, "final_error": e.final_error,
                                         "ticks": e.ticks} for e in res]
        if side == "world":
            world_rows[labels[i]] = summarize(labels[i], res)
    outcome = {side: np.array([[e["success"] for e in v[lab]] for lab in labels], float)
               for side, v in per_episode.items()}

    compared = [*(m.partition("=")[0] for m in cfg.models), *cfg.twins]
    twins = {t: ranking_metrics(outcome[t], outcome["world"], cfg.n_boot, cfg.seed) for t in compared}
    n = len(seeds)
    policies = []
    for i, (spec, lab) in enumerate(zip(specs, labels, strict=True)):
        k_w = int(outcome["world"][i].sum())
        row = {"name": lab, "spec": cfg.policies[i], "refined": spec.refined,
               "world_success": k_w / n, "world_ci": list(wilson(k_w, n)), "twins": {}}
        for t in compared:
            k = int(outcome[t][i].sum())
            row["twins"][t] = {"success": k / n, "ci": list(wilson(k, n))}
        row["twin_success"], row["twin_ci"] = row["twins"][base]["success"], row["twins"][base]["ci"]
        row["error"] = row["twin_success"] - row["world_success"]
        policies.append(row)
    evaluation = {"twin": base, **twins[base], "episodes": n, "policies": policies, "twins": twins}
    if reused is not None:
        evaluation["world_from"] = cfg.world_from
    if est is not None:
        evaluation["calibration"] = calibration_record(task, world, est)
    summary = {
        "task": task.name,
        "world": world.describe(),
        "seed": cfg.seed,
        "episodes": n,
        "config": config_dict(cfg),
        # where each setting came from (library, task, recipe, cli; caller: set in code)
        "config_sources": sources or sources_of(cfg, task_defaults(cfg.experiment.task)),
        "results": [world_rows[lab] for lab in labels],
        "per_episode": per_episode,
        "evaluation": evaluation,
    }
    if engines:
        variants = {e.label: outcome[f"{base} | {e.label}"] for e in engines}
        evaluation["engines"] = engine_report(cfg, task, specs, outcome["world"], outcome[base], variants,
                                              datasets, log)
    summary["wall_time_s"] = time.perf_counter() - t_start
    write_json(out / "summary.json", summary)
    plot_evaluation(evaluation, out / "evaluation.png")
    return summary


def calibration_record(task, world, est: TwinEstimate) -> dict:
    """The calibrated twin's values (and, for a stand-in world, the truth beside them)."""
    names, obs = task.param_space().names, list(task.obs_names)
    rec = {"estimate": dict(zip(names, map(float, est.params), strict=True)), "delay_steps": est.delay_steps,
           "obs_noise": dict(zip(obs, map(float, est.obs_noise), strict=True))}
    if est.posterior is not None:
        rec["interval"] = {n: list(map(float, iv)) for n, iv in zip(names, est.posterior.interval, strict=True)}
    hidden = getattr(world, "hidden_params", None)
    if hidden is not None:  # a stand-in world knows its truth: how far off the twin is
        rec["truth"] = dict(zip(names, map(float, hidden), strict=True))
        rec["truth_delay_steps"] = int(world.delay_steps)
        rec["truth_obs_noise"] = dict(zip(obs, map(float, world.obs_noise), strict=True))
    return rec


def pool_evaluations(summaries: Sequence[Mapping], twin: str, n_boot: int = 1000, seed: int = 0) -> dict:
    """One evaluation from several runs' ``summary.json`` on disjoint seeds (a long evaluation
    run in pieces: one policy set per piece, or more seeds later).

    Each policy's episodes are pooled over the runs that have it; every run must have the same
    world, the same calibrated twin and no seed twice for a policy, and every policy must end
    with the same number of episodes. Returns ``{twin, episodes, policies: [...], pearson, ...}``
    as :func:`ranking_metrics` (with each policy's Wilson intervals).
    """
    if len(summaries) == 0:
        raise TwinloopError("pool_evaluations needs at least one summary")
    def identity(s: Mapping) -> dict:
        cal = s["evaluation"].get("calibration", {})
        # the calibrated twin-world also carries the delay and the noise: the same twin has the same ones
        keys = ("estimate", "delay_steps", "obs_noise") if twin == "calibrated" else ("estimate",)
        return {"world": s["world"], "calibration": {k: cal.get(k) for k in keys}}

    ref = identity(summaries[0])
    world: dict[str, list] = {}
    sim: dict[str, list] = {}
    for i, s in enumerate(summaries):
        for name, value in identity(s).items():
            if value != ref[name]:
                raise TwinloopError(f"summary {i}: its {name} differs from summary 0's ({value} vs {ref[name]}): "
                                    "not one evaluation")
        eps = s["per_episode"]
        if twin not in eps:
            raise TwinloopError(f"summary {i} has no twin {twin!r}; it has {sorted(set(eps) - {'world'})}")
        for label, rows in eps["world"].items():
            world.setdefault(label, []).extend(rows)
            sim.setdefault(label, []).extend(eps[twin][label])
    for label, rows in world.items():
        seeds = [r["seed"] for r in rows]
        if len(set(seeds)) != len(seeds):
            raise TwinloopError(f"policy {label!r} ran some seed twice across the summaries: pool disjoint seeds")
        if sorted(seeds) != sorted(r["seed"] for r in sim[label]):
            raise TwinloopError(f"policy {label!r}: world and twin episodes have different seeds")
    counts = {label: len(rows) for label, rows in world.items()}
    if len(set(counts.values())) != 1:
        raise TwinloopError(f"policies end with different episode counts {counts}: pool the same seeds for each")
    labels = list(world)
    order = {label: np.argsort([r["seed"] for r in world[label]]) for label in labels}
    by_seed = {label: {r["seed"]: r["success"] for r in sim[label]} for label in labels}
    w = np.array([[world[lab][j]["success"] for j in order[lab]] for lab in labels], float)
    t = np.array([[by_seed[lab][world[lab][j]["seed"]] for j in order[lab]] for lab in labels], float)
    n = w.shape[1]
    policies = []
    for lab, kw, kt in zip(labels, w.sum(axis=1).astype(int), t.sum(axis=1).astype(int), strict=True):
        policies.append({"name": lab, "world_success": kw / n, "world_ci": list(wilson(kw, n)),
                         "twin_success": kt / n, "twin_ci": list(wilson(kt, n)), "error": (kt - kw) / n})
    return {"twin": twin, "episodes": n, "policies": policies, **ranking_metrics(t, w, n_boot, seed)}


def evaluation_table(summary: dict):
    """A rich table: per policy, world and twin success; the ranking metrics below it."""
    from rich.table import Table

    ev = summary["evaluation"]
    twins = list(ev["twins"])
    t = Table(title=f"{summary['task']}: twin vs world success ({ev['episodes']} episodes per policy and side)")
    for col in ("policy", "world", *twins):
        t.add_column(col, justify="left" if col == "policy" else "right")

    def cell(p, ci):
        return f"{100 * p:.0f}% [{100 * ci[0]:.0f}, {100 * ci[1]:.0f}]"

    for p in ev["policies"]:
        t.add_row(p["name"], cell(p["world_success"], p["world_ci"]),
                  *(cell(p["twins"][k]["success"], p["twins"][k]["ci"]) for k in twins))
    for key in ("pearson", "spearman", "mmrv"):
        t.add_row(key, "", *(f"{ev['twins'][k][key]:.3f} [{ev['twins'][k][key + '_ci'][0]:.2f}, "
                             f"{ev['twins'][k][key + '_ci'][1]:.2f}]" for k in twins))
    t.add_row("max |twin - world|", "", *(f"{100 * ev['twins'][k]['max_abs_error']:.0f} points" for k in twins))
    return t


__all__ = ["DEFAULT_POLICIES", "TWINS", "EvaluateConfig", "TwinEstimate", "calibrated_twin", "estimate_twin", "evaluation_table",
           "policy_in_world", "pool_evaluations", "ranking_metrics", "recorded_world", "run_evaluation"]
