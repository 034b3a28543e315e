"""Plots of experiment results (matplotlib, no display needed).

Figures are built with :class:`matplotlib.figure.Figure` directly (no pyplot global state, so
plotting from threads or a Ray worker is safe) and written atomically as PNG.

Input schemas:

- comparison summary (shared with ``twinloop.run``)::

      {"task", "world", "seed", "episodes",
       "results": [{"controller", "success_rate", "success_ci": [lo, hi],
                    "mean_final_error", "control_hz"}, ...],
       optional: "error_unit", "per_episode": {controller: [{"final_error"}, ...]}}

- Real-Sim-Real rounds: a list of dicts, each with the plotted keys (``gap``,
  ``param_error``, ``success_rate``, ...), an optional ``round`` (default: position) and
  optional ``<key>_ci: [lo, hi]`` drawn as a band. A value may be a number or a dict of
  numbers (one line each, e.g. per-parameter errors).
- rounds: a list of dicts with ``base_success`` and ``refined_success`` (rates in [0, 1]),
  optional ``base_ci`` / ``refined_ci`` ``[lo, hi]`` and ``round`` (default: position).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from twinloop.errors import TwinloopError
from twinloop.io import atomic_write


def world_label(world) -> str:
    """Short name of a world: a string as is, a ``describe()`` dict as kind (+ "per episode") + severity."""
    if not isinstance(world, dict):
        return str(world)
    kind = world.get("world", world.get("kind", "world"))
    kind += " per episode" if world.get("world_per_episode") else ""
    return f"{kind} (severity {world['severity']})" if "severity" in world else str(kind)


SUMMARY_KEYS = ("task", "world", "seed", "episodes", "results")
RESULT_KEYS = ("controller", "success_rate", "success_ci", "mean_final_error", "control_hz")


def _save(fig: Figure, path: str | os.PathLike) -> Path:
    path = Path(path)
    with atomic_write(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    return path


def _need(d, keys: Sequence[str], where: str) -> None:
    if not isinstance(d, Mapping):
        raise TwinloopError(f"{where} must be a dict, got {type(d).__name__}")
    missing = [k for k in keys if k not in d]
    if missing:
        raise TwinloopError(f"{where} lacks key(s) {missing} (has: {sorted(d)})")


def _num(x, where: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError) as exc:
        raise TwinloopError(f"{where} must be a number, got {x!r}") from exc
    return v


def _interval(ci, where: str) -> tuple[float, float]:
    if not isinstance(ci, Sequence) or isinstance(ci, str) or len(ci) != 2:
        raise TwinloopError(f"{where} must be [lo, hi], got {ci!r}")
    lo, hi = _num(ci[0], where), _num(ci[1], where)
    if lo > hi:
        raise TwinloopError(f"{where} has lo > hi: {ci!r}")
    return lo, hi


def plot_comparison(summary: Mapping, path: str | os.PathLike) -> Path:
    """Success rate per controller (Wilson interval error bars) and final error: each episode's
    as a dot, the median with its 95% bootstrap interval (the mean, for a summary without
    ``per_episode``), in the task's ``error_unit``.

    Args:
        summary: the comparison summary (module docstring).
        path: PNG to write.
    """
    _need(summary, SUMMARY_KEYS, "summary")
    results = summary["results"]
    if not isinstance(results, Sequence) or not results:
        raise TwinloopError("summary['results'] must be a non-empty list of per-controller results")
    names, rate, lo, hi, err, hz = [], [], [], [], [], []
    for i, r in enumerate(results):
        where = f"summary['results'][{i}]"
        _need(r, RESULT_KEYS, where)
        c_lo, c_hi = _interval(r["success_ci"], f"{where}['success_ci']")
        p = _num(r["success_rate"], f"{where}['success_rate']")
        names.append(str(r["controller"]))
        rate.append(p)
        lo.append(max(p - c_lo, 0.0))
        hi.append(max(c_hi - p, 0.0))
        err.append(_num(r["mean_final_error"], f"{where}['mean_final_error']"))
        hz.append(_num(r["control_hz"], f"{where}['control_hz']"))
    x = np.arange(len(names))
    labels = [f"{n}\n{h:.0f} Hz" if math.isfinite(h) else n for n, h in zip(names, hz, strict=True)]
    fig = Figure(figsize=(max(6.0, 1.6 * len(names) + 2), 4.0))
    ax1, ax2 = fig.subplots(1, 2)
    ax1.bar(x, rate, yerr=[lo, hi], capsize=4, color="tab:blue", alpha=0.85)
    ax1.set(ylim=(0, 1.05), ylabel="success rate (95% Wilson CI)", xticks=x)
    ax1.set_xticklabels(labels, fontsize=8)
    unit = summary.get("error_unit") or "task units"
    per = _final_errors(summary, names)
    if per is None:  # a summary without its episodes: the means it has
        ax2.bar(x, err, color="tab:orange", alpha=0.85)
        ax2.set(ylabel=f"mean final error ({unit})", xticks=x)
    else:
        _medians(ax2, x, per)
        ax2.set(ylabel=f"final error ({unit}): median, 95% bootstrap CI", xticks=x, xlim=(-0.6, len(x) - 0.4))
    ax2.set_xticklabels(labels, fontsize=8)
    fig.suptitle(f"{summary['task']} | {world_label(summary['world'])} world | {summary['episodes']} episodes | seed {summary['seed']}",
                 fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def _final_errors(summary: Mapping, names: Sequence[str]) -> list[np.ndarray] | None:
    """Each controller's per-episode final errors (``summary['per_episode']``), or ``None``."""
    per = summary.get("per_episode")
    if not isinstance(per, Mapping) or not all(isinstance(per.get(n), Sequence) and per[n] for n in names):
        return None
    try:
        return [np.array([float(e["final_error"]) for e in per[n]]) for n in names]
    except (KeyError, TypeError, ValueError):
        return None


def _medians(ax, x, per: list[np.ndarray]) -> None:
    """Each controller's episodes as dots, their median as a bar with its 95% bootstrap interval
    (one outlier moves a mean; the median it barely moves)."""
    from twinloop.stats import bootstrap_ci

    for xi, v in zip(x, per, strict=True):
        v = v[np.isfinite(v)]
        if not len(v):
            continue
        med = float(np.median(v))
        lo, hi = bootstrap_ci(v, np.median) if len(v) > 1 else (med, med)
        ax.bar(xi, med, color="tab:orange", alpha=0.6, width=0.6)
        ax.errorbar(xi, med, yerr=[[med - lo], [hi - med]], color="black", capsize=4)
        jitter = np.linspace(-0.15, 0.15, len(v)) if len(v) > 1 else np.zeros(1)
        ax.scatter(xi + jitter, v, s=8, color="tab:red", alpha=0.6, zorder=3)


def _series(rounds: Sequence[Mapping], key: str) -> dict[str, np.ndarray]:
    """``{line label: (n,) values}`` of ``key`` over rounds (``nan`` where absent)."""
    labels: dict[str, None] = {}
    for it in rounds:
        v = it.get(key)
        if isinstance(v, Mapping):
            labels.update(dict.fromkeys(str(k) for k in v))
        elif v is not None:
            labels[key] = None
    out = {}
    for lab in labels:
        vals = []
        for i, it in enumerate(rounds):
            v = it.get(key)
            v = v.get(lab) if isinstance(v, Mapping) else (v if lab == key else None)
            vals.append(math.nan if v is None else _num(v, f"rounds[{i}][{key!r}]"))
        out[lab] = np.array(vals)
    return out


def plot_curves(rounds: Sequence[Mapping], path: str | os.PathLike,
                keys: Sequence[str] = ("gap", "param_error", "success_rate")) -> Path:
    """One panel per key against round (the Real-Sim-Real loop's progress).

    A key missing from some rounds leaves gaps; a key missing from all is an error.
    ``<key>_ci: [lo, hi]`` is drawn as a shaded band when present.
    """
    if isinstance(rounds, Mapping) or not isinstance(rounds, Sequence) or not rounds:
        raise TwinloopError("rounds must be a non-empty list of dicts")
    for i, it in enumerate(rounds):
        if not isinstance(it, Mapping):
            raise TwinloopError(f"rounds[{i}] must be a dict, got {type(it).__name__}")
    if isinstance(keys, str) or not keys:
        raise TwinloopError(f"keys must be a non-empty list of names, got {keys!r}")
    have = sorted({k for it in rounds for k in it})
    absent = [k for k in keys if not any(it.get(k) is not None for it in rounds)]
    if absent:
        raise TwinloopError(f"no round has key(s) {absent}; keys present: {have}")
    x = np.array([_num(it.get("round", i), f"rounds[{i}]['round']") for i, it in enumerate(rounds)])
    fig = Figure(figsize=(4.0 * len(keys), 3.4))
    axes = np.atleast_1d(fig.subplots(1, len(keys)))
    for ax, key in zip(axes, keys, strict=True):
        series = _series(rounds, key)
        for lab, y in series.items():
            ax.plot(x, y, marker="o", label=lab if len(series) > 1 else None)
        band = [(i, it[f"{key}_ci"]) for i, it in enumerate(rounds) if it.get(f"{key}_ci") is not None]
        if band:
            idx = [i for i, _ in band]
            ci = np.array([_interval(c, f"rounds[{i}]['{key}_ci']") for i, c in band])
            ax.fill_between(x[idx], ci[:, 0], ci[:, 1], alpha=0.25, label="95% CI")
        ax.set(xlabel="round", title=key)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if len(series) > 1 or band:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def plot_rounds(rounds: Sequence[Mapping], path: str | os.PathLike) -> Path:
    """Per-round success rate of the base policy and of the refined controller."""
    if isinstance(rounds, Mapping) or not isinstance(rounds, Sequence) or not rounds:
        raise TwinloopError("rounds must be a non-empty list of dicts")
    fig = Figure(figsize=(6.0, 3.6))
    ax = fig.subplots()
    x = []
    data = {"base": ([], []), "refined": ([], [])}
    for i, r in enumerate(rounds):
        where = f"rounds[{i}]"
        _need(r, ("base_success", "refined_success"), where)
        x.append(_num(r.get("round", i), f"{where}['round']"))
        for name, (ys, cis) in data.items():
            y = _num(r[f"{name}_success"], f"{where}['{name}_success']")
            ys.append(y)
            ci = r.get(f"{name}_ci")
            lo, hi = (y, y) if ci is None else _interval(ci, f"{where}['{name}_ci']")
            cis.append((max(y - lo, 0.0), max(hi - y, 0.0)))
    for name, (ys, cis) in data.items():
        e = np.array(cis).T
        ax.errorbar(x, ys, yerr=e, marker="o", capsize=3, label=name)
    ax.set(xlabel="round", ylabel="success rate", ylim=(0, 1.05))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def plot_evaluation(evaluation: Mapping, path: str | os.PathLike) -> Path:
    """Twin vs world success, one point per policy and twin (95% Wilson intervals on both axes),
    the diagonal (a perfect twin) drawn; each twin's Pearson r and MMRV in the legend.

    Args:
        evaluation: ``summary["evaluation"]`` of ``twinloop evaluate`` (``policies`` with
            ``world_success``, ``world_ci`` and ``twins: {name: {success, ci}}``; ``twins`` with
            ``pearson`` and ``mmrv`` per twin).
        path: PNG to write.
    """
    _need(evaluation, ("policies", "twins"), "evaluation")
    policies = evaluation["policies"]
    if not isinstance(policies, Sequence) or not policies:
        raise TwinloopError("evaluation['policies'] must be a non-empty list")
    fig = Figure(figsize=(5.6, 5.2))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], color="0.5", lw=1, ls="--", label="twin = world")
    for k, (name, m) in enumerate(evaluation["twins"].items()):
        xs, ys, xe, ye = [], [], [[], []], [[], []]
        for i, p in enumerate(policies):
            where = f"evaluation['policies'][{i}]"
            _need(p, ("name", "world_success", "world_ci", "twins"), where)
            x, y = _num(p["world_success"], where), _num(p["twins"][name]["success"], where)
            (xl, xh), (yl, yh) = _interval(p["world_ci"], where), _interval(p["twins"][name]["ci"], where)
            xs.append(x), ys.append(y)
            xe[0].append(max(x - xl, 0)), xe[1].append(max(xh - x, 0))
            ye[0].append(max(y - yl, 0)), ye[1].append(max(yh - y, 0))
            if k == len(evaluation["twins"]) - 1:
                ax.annotate(str(p["name"]), (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.errorbar(xs, ys, xerr=xe, yerr=ye, fmt="os^"[k % 3], capsize=2, alpha=0.85,
                    label=f"{name}: r {m['pearson']:.2f}, MMRV {m['mmrv']:.3f}")
    ax.set(xlim=(-0.03, 1.03), ylim=(-0.03, 1.03), xlabel="world success (95% Wilson CI)",
           ylabel="twin success", title=f"twin vs world, {len(policies)} policies", aspect="equal")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)
