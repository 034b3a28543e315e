"""The calibration report: a plain-text table of a :class:`~twinloop.calib.posterior.Posterior`
and its JSON encoding (``inf``/``nan`` as strings, so strict JSON readers accept it).

Every value is printed with its interval and whether the data identify it; a correlation is
printed only within [-1, 1] (an undefined one is never printed as a number).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from twinloop.calib.acceptance import planning_verdict

if TYPE_CHECKING:
    from twinloop.calib.posterior import Posterior


def format_report(post: Posterior, truth=None) -> str:
    """A plain-text table: every value with its interval and identifiability."""
    lines = [f"calibration ({post.method}): {post.n_windows} windows, {post.n_transitions} transitions, "
             f"{post.n_evals} evaluations, actuation delay {post.delay_steps} steps, {post.seconds:.1f} s"]
    width = max([16, *map(len, post.names)])
    head = f"  {'parameter':<{width}} {'estimate':>10} {'95% interval':>23} {'data sd':>9}"
    if truth is not None:
        head += f" {'truth':>9} {'error':>7}"
    lines.append(head + "  status")
    for i, name in enumerate(post.names):
        lo, hi = post.interval[i]
        row = f"  {name:<{width}} {post.estimate[i]:>10.4g} [{lo:>10.4g}, {hi:>10.4g}] {post.data_std[i]:>9.2g}"
        if truth is not None:
            t = float(np.asarray(truth)[i])
            row += f" {t:>9.4g} {post.error(truth)[i]:>7.1%}"
        row += "  ok" if post.identifiable[i] else f"  NOT IDENTIFIABLE ({post.reasons[i]})"
        lines.append(row)
    for a, b, r in post.confounded:
        lines.append(f"  confounded: {a} and {b} (correlation {r:+.3f}); the data fix a combination, not each")
    if len(post.names) > 1 and post.log_direction_std.size and np.isfinite(post.log_direction_std[0]):
        for label, j in (("best determined", 0), ("least determined", -1)):
            d = post.log_directions[:, j]
            v = d * np.sign(d[np.argmax(np.abs(d))])
            combo = " ".join(f"{c:+.2f} log {n}" for c, n in zip(v, post.names, strict=True) if abs(c) >= 0.05)
            lines.append(f"  {label}: {combo}  (data sd {post.log_direction_std[j]:.1%})")
    widened = post.profile_factors[post.profile_factors > 1.05] if post.profile_factors.size else []
    if len(widened):
        w = float(np.max(widened))
        lines.append("  profile check: the objective is flatter than its local curvature; intervals widened "
                     + ("to the prior along a flat direction" if not np.isfinite(w) else f"up to x{w:.1f}"))
    tb, ta = post.train_error
    hb, ha = post.holdout_error
    lines.append(f"  state error (RMS, error units): train {tb:.3g} -> {ta:.3g}; holdout {hb:.3g} -> {ha:.3g}")
    if not post.errors_in_variables:
        lines.append("  window starts trusted as recorded (no errors in variables): noisy starts bias the fit")
    if post.bias.size:
        lines.append("  bootstrap bias correction: fitted " + ", ".join(f"{v:.4g}" for v in post.fitted)
                     + ", minus the bias " + ", ".join(f"{v:+.3g}" for v in post.bias)
                     + f" ({post.bootstrap_evals} evaluations on simulated data sets)")
    if post.kept_previous:
        lines.append(f"  FIT REJECTED: it made held-out error worse ({hb:.3g} -> {ha:.3g}); the estimate is the "
                     "previous parameters (the fit's own values are in 'fitted')")
    acc = getattr(post, "acceptance", None)
    if acc is not None:
        lines.append(f"  control check: {acc.reason}")
    usable, why = planning_verdict(post)
    if not usable:
        lines.append(f"  NOT FOR PLANNING ({why.split(' (')[0]}): `run --posterior` plans with the nominal twin")
    return "\n".join(lines)


def relative_errors(estimate, truth, identifiable=None) -> dict:
    """The largest relative parameter error ``|x - x_true| / |x_true|``: over every parameter
    (``all``), over those the data identify (``identifiable``) and over those flagged NOT
    IDENTIFIABLE (``flagged``); ``None`` where that set is empty or (without ``identifiable``,
    e.g. before any calibration) unknown. A flagged parameter's error says what the data could
    not pin down; an identifiable one's is the calibration's."""
    err = np.abs(np.asarray(estimate, dtype=float) - truth) / np.abs(np.asarray(truth, dtype=float))

    def worst(mask) -> float | None:
        return float(np.max(err[mask])) if np.any(mask) else None

    ok = None if identifiable is None else np.asarray(identifiable, dtype=bool)
    return {"all": worst(np.ones(len(err), bool)), "identifiable": None if ok is None else worst(ok),
            "flagged": None if ok is None else worst(~ok)}


def json_safe(v):
    """``v`` with non-finite floats as strings and NumPy scalars as Python ones."""
    if isinstance(v, float):
        return "inf" if v == np.inf else "-inf" if v == -np.inf else "nan" if v != v else v
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return json_safe(v.item())
    return v


def json_load(v):
    """The inverse of :func:`json_safe`."""
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    if isinstance(v, list):
        return [json_load(x) for x in v]
    return v

__all__ = ["format_report", "json_load", "json_safe"]
