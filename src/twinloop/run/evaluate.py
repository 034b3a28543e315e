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
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from twinloop.calib.fit import CalibConfig, Posterior, calibrate
from twinloop.calib.noise import estimate_obs_noise
from twinloop.calib.windows import record_trajectory
from twinloop.data import Dataset
from twinloop.data.episodes import recorded_on
from twinloop.errors import TwinloopError
from twinloop.io import output_folder, read_json, write_json
from twinloop.run.config import config_dict, sources_of
from twinloop.run.engines import engine_report
from twinloop.run.evaluate_config import DEFAULT_POLICIES, TWINS, EvaluateConfig  # noqa: F401 - as before
from twinloop.run.executor import EpisodeBatch, Executor, SerialExecutor
from twinloop.run.experiment import summarize
from twinloop.run.policy import PolicySpec, policy_controller
from twinloop.stats import mmrv, pearson, spearman, wilson
from twinloop.tasks import make_task, task_defaults
from twinloop.twin import make_twin
from twinloop.twin.engine import Engine
from twinloop.viz.plots import plot_evaluation
from twinloop.worlds import make_world
from twinloop.worlds.twin import ModelWorld, TwinWorld

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
    if s.get("scene") is not None:  # summaries written before episodes carried a scene have none
        theirs["scene"], ours["scene"] = s["scene"], recorded_on(task)["scene"]
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
    empty ``experiment.out``, ``overwrite`` replaces an earlier run there
    (:func:`twinloop.io.output_folder`). Returns the summary.
    """
    t_start = time.perf_counter()
    out = output_folder(cfg.out, mode)  # before any work: a bad --out fails now
    task = make_task(cfg.task)
    world = make_world(task, cfg.world, severity=cfg.severity, seed=cfg.experiment.one_world_seed)
    specs = cfg.specs()
    labels = [s.label for s in specs]
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
    datasets = _world_datasets(cfg, task, world, labels, out) if cfg.record and reused is None else {}
    log(f"{len(specs)} policies x {len(sides)} sides x {cfg.episodes} episodes"
        + (f" (the world's reused from {cfg.world_from})" if reused is not None else ""))
    results = _run_sides(cfg, specs, sides, jobs, datasets, progress, executor)
    per_episode, world_rows = _rows(labels, sides, jobs, results, reused)
    outcome = {side: np.array([[e["success"] for e in v[lab]] for lab in labels], float)
               for side, v in per_episode.items()}
    evaluation = _evaluation(cfg, specs, outcome, base)
    if reused is not None:
        evaluation["world_from"] = cfg.world_from
    if est is not None:
        evaluation["calibration"] = calibration_record(task, world, est)
    summary = {
        **recorded_on(task),
        "world": world.describe(),
        "seed": cfg.seed,
        "episodes": cfg.episodes,
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


def _evaluation(cfg: EvaluateConfig, specs, outcome: dict, base: str) -> dict:
    """How well each twin-world ranks the policies (the headline: ``base``), and each policy's
    success on every side."""
    compared = [*(m.partition("=")[0] for m in cfg.models), *cfg.twins]
    twins = {t: ranking_metrics(outcome[t], outcome["world"], cfg.n_boot, cfg.seed) for t in compared}
    policies = _policy_rows(cfg, specs, outcome, compared, base)
    return {"twin": base, **twins[base], "episodes": cfg.episodes, "policies": policies, "twins": twins}


def _rows(labels: list[str], sides: dict, jobs: list, results: list, reused: dict | None) -> tuple[dict, dict]:
    """``(per_episode, world_rows)``: each side's per-episode rows by policy label (the world's
    reused ones first, if any) and the world's results rows."""
    per_episode = {"world": {lab: r["episodes"] for lab, r in reused.items()}} if reused is not None else {}
    per_episode.update({side: {} for side in sides})
    world_rows = {lab: r["result"] for lab, r in reused.items()} if reused is not None else {}
    for (side, i), res in zip(jobs, results, strict=True):
        per_episode[side][labels[i]] = [{"seed": e.seed, "success": e.success, "final_error": e.final_error,
                                         "ticks": e.ticks} for e in res]
        if side == "world":
            world_rows[labels[i]] = summarize(labels[i], res)
    return per_episode, world_rows


def _world_datasets(cfg: EvaluateConfig, task, world, labels: list[str], out: Path) -> dict[int, Dataset]:
    """A new dataset per policy for its world episodes (``out/episodes/world/<policy>``)."""
    return {i: Dataset.create(out / "episodes" / "world" / _folder(label), {"fps": 1.0 / task.control_period, "twinloop": {
        **recorded_on(task), "controller": label, "world": world.describe(), "seed": cfg.seed,
        "obs_names": list(task.obs_names), "param_names": task.param_space().names}})
        for i, label in enumerate(labels)}


def _run_sides(cfg: EvaluateConfig, specs, sides: dict, jobs: list, datasets: dict, progress,
               executor: Executor | None) -> list:
    """Every ``(side, policy)`` job's episodes on the run's seeds; world episodes are written to
    their policy's dataset as they arrive."""
    seeds = cfg.episode_seeds()
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

    return (executor or SerialExecutor()).run(batches, on_episode)


def _policy_rows(cfg: EvaluateConfig, specs, outcome: dict, compared: list[str], base: str) -> list[dict]:
    """Per policy: its success in the world and in each twin-world (Wilson intervals), and the
    headline twin's error."""
    n = cfg.episodes
    rows = []
    for i, spec in enumerate(specs):
        k_w = int(outcome["world"][i].sum())
        row = {"name": spec.label, "spec": cfg.policies[i], "refined": spec.refined,
               "world_success": k_w / n, "world_ci": list(wilson(k_w, n)), "twins": {}}
        for t in compared:
            k = int(outcome[t][i].sum())
            row["twins"][t] = {"success": k / n, "ci": list(wilson(k, n))}
        row["twin_success"], row["twin_ci"] = row["twins"][base]["success"], row["twins"][base]["ci"]
        row["error"] = row["twin_success"] - row["world_success"]
        rows.append(row)
    return rows


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
