"""Cross-engine report: do the twin's verdicts survive a change of solver settings?

Two verdicts are checked, each under every engine variant (:class:`~twinloop.twin.engine.Engine`)
of the twin:

- **the ranking of policies**: the policies' success in the twin-world with the variant, its
  Kendall tau-b against the world's ranking and against the twin's own (default engine),
  Pearson r against the world, and the largest change of one policy's success;
- **refinement's choice**: at world states (recorded world episodes), each refined policy
  refines once in its twin and once in the twin with the variant, from the same proposal and
  the same random candidates; how often the selected plan differs, and by how much its first
  action moves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from twinloop.control import Controller
from twinloop.policies import make_proposer
from twinloop.run.policy import PolicySpec
from twinloop.stats import kendall, pearson
from twinloop.twin import make_twin
from twinloop.twin.engine import Engine

#: a reasonable sweep, one knob at a time: ``twinloop evaluate --engines default-sweep``
DEFAULT_SWEEP = ("integrator=euler", "integrator=rk4", "cone=elliptic", "timeconst=0.5", "timeconst=2",
                 "dampratio=0.5", "iterations=2", "timestep=0.0025", "timestep=0.01")


def engine_report(cfg, task, specs: Sequence[PolicySpec], world: np.ndarray, twin: np.ndarray,
                  variants: Mapping[str, np.ndarray], datasets: Mapping, log: Callable[[str], None] = print) -> dict:
    """The report for ``variants`` (engine label -> ``(P, N)`` episode outcomes in the twin with
    that engine), given the world's and the default twin's ``(P, N)`` outcomes."""
    labels = [s.label for s in specs]
    w, t = world.mean(axis=1), twin.mean(axis=1)
    rows = []
    for name, out in variants.items():
        v = out.mean(axis=1)
        change = v - t
        j = int(np.argmax(np.abs(change)))
        rows.append({"engine": name, "success": dict(zip(labels, map(float, v), strict=True)),
                     "kendall_world": kendall(v, w), "kendall_twin": kendall(v, t), "pearson_world": pearson(v, w),
                     "max_change": float(change[j]), "max_change_policy": labels[j]})
    names = ["twin", *variants]
    rates = [t, *(o.mean(axis=1) for o in variants.values())]
    matrix = [[kendall(a, b) for b in rates] for a in rates]
    report = {"base": "twin", "twin_kendall_world": kendall(t, w), "variants": rows,
              "kendall_matrix": {"names": names, "tau": matrix}}
    refined = [s for s in specs if s.refined]
    if refined and cfg.plan_states > 0 and datasets:
        obs = _world_states(datasets, cfg.plan_states, cfg.seed)
        log(f"plan changes: {len(refined)} refined policies x {len(variants)} engines x {len(obs)} world states")
        report["plan_changes"] = plan_changes(task, refined, [Engine.parse(e) for e in variants], obs, cfg.seed)
    return report


def _world_states(datasets: Mapping, n: int, seed: int) -> np.ndarray:
    """``(n, n_obs)`` observations drawn (seeded) from every recorded world episode."""
    obs = np.concatenate([e.obs for ds in datasets.values() for e in ds.episodes()])
    pick = np.random.default_rng([seed, 17]).permutation(len(obs))[:n]
    return obs[np.sort(pick)]


def _plans(task, spec: PolicySpec, engine: Engine, observations: np.ndarray, seed: int) -> np.ndarray:
    """``(S, N, nu)`` plan knots refinement selects at each observation (one seeded refine each)."""
    twin = make_twin(spec.backend, engine.apply(task.model), task.param_space())
    refiner = spec.make_refiner(task, twin)
    ctl = Controller(refiner, make_proposer(task, spec.proposer, **dict(spec.proposer_options)), refine=True)
    out = []
    for j, o in enumerate(observations):
        ctl.reset(seed * 1000 + j)  # the same candidates under every engine
        ctl.act(o)
        res = ctl.last.result
        out.append(res.plan.knots if res is not None else np.full((refiner.spec.n_knots, task.nu), np.nan))
    return np.stack(out)


def plan_changes(task, specs: Sequence[PolicySpec], engines: Sequence[Engine], observations: np.ndarray,
                 seed: int = 0) -> dict:
    """Per refined policy and engine: the fraction of ``observations`` where the selected plan
    differs from the default engine's, and the mean change of its first action (action units)."""
    out = {}
    for spec in specs:
        base = _plans(task, spec, Engine(), observations, seed)
        row = {}
        for e in engines:
            p = _plans(task, spec, e, observations, seed)
            tol = 1e-9 * float(np.max(task.action_high - task.action_low))
            changed = np.abs(p - base).max(axis=(1, 2)) > tol
            first = np.linalg.norm(p[:, 0] - base[:, 0], axis=-1)
            row[e.label] = {"changed": float(np.mean(changed)), "first_action_change": float(np.nanmean(first)),
                            "states": len(observations)}
        out[spec.label] = row
    return out


def engines_table(report: dict):
    """A rich table of the cross-engine report."""
    from rich.table import Table

    t = Table(title=f"cross-engine: Kendall tau of the policy ranking (default twin vs world: "
                    f"{report['twin_kendall_world']:.2f})")
    for col in ("engine", "tau vs world", "tau vs twin", "r vs world", "largest change", "plans changed"):
        t.add_column(col, justify="left" if col == "engine" else "right")
    pc = report.get("plan_changes", {})
    for r in report["variants"]:
        changed = [v[r["engine"]]["changed"] for v in pc.values() if r["engine"] in v]
        t.add_row(r["engine"], f"{r['kendall_world']:.2f}", f"{r['kendall_twin']:.2f}", f"{r['pearson_world']:.2f}",
                  f"{100 * r['max_change']:+.0f} pts ({r['max_change_policy']})",
                  f"{100 * np.mean(changed):.0f}%" if changed else "-")
    return t


__all__ = ["DEFAULT_SWEEP", "engine_report", "engines_table", "plan_changes"]
