"""The posterior of a calibration: pure functions from a fit to covariance, intervals,
identifiability and the profile check, and the :class:`Posterior` they produce.

A Laplace approximation at the optimum ``x*`` whose curvature comes from a quadratic fit of
``f(x) = |r(x)|^2 / 2`` around ``x*`` (:func:`local_fit`; contact makes ``r(x)`` rough, so the
curvature is measured over a step of ``jac_step`` prior standard deviations)::

    s^2   = |r(x*)|^2 / (m - n)                        residual variance
    H     = Hessian of the quadratic fit (~ J^T J)     per-window gradients g_w from the same fit
    C     = s^2 H^-1, or the window-clustered sandwich H^-1 (sum g_w g_w') H^-1 if larger,
            plus rough * H^-1 for the fit's residual roughness
    Sigma = (C^-1 + Sigma_0^-1)^-1                     with the prior's Sigma_0, so it is proper

A profile check (:func:`profile_factors`) then walks out along each principal direction of
``C`` and widens it where the objective has not risen by the 95% threshold at the Laplace
half-width (contact roughness can fake a steep bowl in a flat valley).

Identifiability is judged on the data alone (``C`` and the spectrum of ``H``), not on the prior:
a parameter is NOT IDENTIFIABLE when its data-only 95% half-width exceeds ``max_rel_width`` of
its size, or when it loads on a direction the data do not constrain (eigenvalue of ``H`` below
``null_tol`` times the largest). Pairs whose data-only estimates correlate beyond ``max_corr``
are named as confounded (a constant-speed push fixes friction x mass, not each). Correlations
stay within [-1, 1]; where undefined they are ``nan``, never a huge number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from twinloop.calib.acceptance import Acceptance
from twinloop.calib.problem import Objective
from twinloop.calib.profile import FLAT_WIDENING, profile_factors
from twinloop.calib.report import format_report, json_load, json_safe
from twinloop.errors import TwinloopError
from twinloop.io import read_json
from twinloop.params import ParamSpace


@dataclass
class Posterior:
    """What the data say about the parameters. Arrays are in parameter units, ``n = len(names)``.

    Attributes:
        names: parameter names.
        estimate: ``(n,)`` best fit ``x*``.
        covariance: ``(n, n)`` posterior covariance (data Laplace approximation + prior).
        interval: ``(n, 2)`` 95% posterior interval, clipped to the bounds.
        data_std: ``(n,)`` standard deviation from the data alone (``inf``: not constrained,
            or only beyond a thousand times the bound width).
        correlation: ``(n, n)`` data-only correlation of the estimates, within [-1, 1];
            ``nan`` where undefined (a parameter along which the curvature is flat or negative).
        identifiable: ``(n,)`` False = NOT IDENTIFIABLE from these data.
        reasons: per parameter, why it is not identifiable (empty when it is).
        confounded: pairs ``(name_a, name_b, correlation)`` beyond ``max_corr``.
        singular_values: ``(n,)`` of the prior-scaled Jacobian ``J diag(prior_std) / s``.
        particles: ``(P, n)`` samples from the posterior (first = estimate), within bounds.
        low, high: ``(n,)`` bounds.
        method: the calibration method.
        train_error: RMS weighted state error on the fitting windows, ``(before, after)``.
        holdout_error: the same on held-out episodes (``nan`` without any).
        n_evals: parameter vectors simulated by the fit (the budget); sim_steps: physics steps
            simulated by the fit; posterior_evals: vectors simulated for the local fit after it.
        n_windows, n_transitions: data size.
        seconds: wall time.
        x0: the starting point.
        delay_steps: the actuation delay the replay used (given or estimated).
        log_directions: ``(n, n)`` combinations of ``log(parameters)`` (columns), best
            determined first; log_direction_std: their data-only std (relative). A constant
            push gives ``+log friction + log mass`` (the product) well determined and
            ``log friction - log mass`` not.
        profile_factors: ``(n,)`` how much the profile check widened the data-only std along
            each principal direction (1: the local curvature held; ``inf``: flat as far as it
            looked), see :func:`profile_factors`.
        kept_previous: the fit made held-out error worse, so ``estimate`` is the starting
            point ``x0`` (the previous parameters), not the fit; fitted: the fit's own estimate.
        errors_in_variables: the fit treated window starts as noisy observations (False: it
            trusted them, asked to or because the budget could not afford it).
        bias: ``(n,)`` the fit's bias the parametric bootstrap estimated and subtracted
            (``estimate = fitted - bias``; empty without ``CalibConfig.bootstrap``);
            bootstrap_evals: parameter vectors its refits simulated.
        acceptance: the control check's verdict on the fit
            (:class:`~twinloop.calib.acceptance.Acceptance`: does it predict the task's cost
            terms over the planning horizon on held-out windows better than the starting
            point?); ``None``: not run (:func:`~twinloop.calib.acceptance.planning_verdict`).
        timestep: the fit's twin step (s; ``delay_steps`` of it are the delay; 0: the scene's).
        structure: the twin chosen for planning among contact models, the fit and the nominal
            values (:func:`~twinloop.calib.structure.choose_structure`): ``contact_model`` (a
            name of ``CONTACT_MODELS`` or ``None``: the scene's), ``params`` (``fit`` |
            ``nominal``) and the ``choice``; ``None``: not chosen (the fit, in the scene's model).
    """

    names: list[str]
    estimate: np.ndarray
    covariance: np.ndarray
    interval: np.ndarray
    data_std: np.ndarray
    correlation: np.ndarray
    identifiable: np.ndarray
    reasons: list[str]
    confounded: list[tuple[str, str, float]]
    singular_values: np.ndarray
    particles: np.ndarray
    low: np.ndarray
    high: np.ndarray
    method: str
    train_error: tuple[float, float]
    holdout_error: tuple[float, float]
    n_evals: int
    sim_steps: int
    n_windows: int
    n_transitions: int
    seconds: float
    x0: np.ndarray = field(default_factory=lambda: np.zeros(0))
    posterior_evals: int = 0
    delay_steps: int = 0
    log_directions: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    log_direction_std: np.ndarray = field(default_factory=lambda: np.zeros(0))
    profile_factors: np.ndarray = field(default_factory=lambda: np.zeros(0))
    kept_previous: bool = False
    fitted: np.ndarray = field(default_factory=lambda: np.zeros(0))
    errors_in_variables: bool = True
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0))
    bootstrap_evals: int = 0
    acceptance: Acceptance | None = None
    timestep: float = 0.0
    structure: dict | None = None

    @property
    def std(self) -> np.ndarray:
        """``(n,)`` posterior standard deviation."""
        return np.sqrt(np.diag(self.covariance))

    @property
    def all_identifiable(self) -> bool:
        return bool(np.all(self.identifiable))

    def error(self, truth) -> np.ndarray:
        """``(n,)`` relative error ``|estimate - truth| / |truth|``."""
        t = np.asarray(truth, dtype=float)
        if t.shape != self.estimate.shape:
            raise TwinloopError(f"truth must have shape {self.estimate.shape}, got {t.shape}")
        return np.abs(self.estimate - t) / np.maximum(np.abs(t), 1e-12)

    def report(self, truth=None) -> str:
        """A plain-text table: every value with its interval and identifiability (see
        :func:`twinloop.calib.report.format_report`)."""
        return format_report(self, truth)

    def to_dict(self) -> dict:
        """JSON-ready dict (arrays as lists; ``inf`` as the string ``"inf"``)."""
        out = {}
        for k, v in asdict(self).items():
            if k == "acceptance":
                out[k] = None if self.acceptance is None else self.acceptance.to_dict()
                continue
            if isinstance(v, np.ndarray):
                v = v.tolist()
            out[k] = json_safe(v)
        out["all_identifiable"] = self.all_identifiable
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Posterior:
        d = {k: json_load(v) for k, v in d.items() if k != "all_identifiable"}
        if d.get("acceptance") is not None:
            d["acceptance"] = Acceptance.from_dict(d["acceptance"])
        arrays = ("estimate", "covariance", "interval", "data_std", "correlation", "identifiable",
                  "singular_values", "particles", "low", "high", "x0", "log_directions", "log_direction_std",
                  "profile_factors", "fitted", "bias")
        for k in (a for a in arrays if a in d):
            d[k] = np.asarray(d[k], dtype=bool if k == "identifiable" else float)
        d["confounded"] = [tuple(c) for c in d["confounded"]]
        d["train_error"] = tuple(d["train_error"])
        d["holdout_error"] = tuple(d["holdout_error"])
        return cls(**d)

    @classmethod
    def load(cls, path, space: ParamSpace | None = None) -> Posterior:
        """A saved ``posterior.json`` (``twinloop calibrate``, ``evaluate``, ``distill``); with
        ``space``, checked to fit that space's parameters, in its order and within its bounds.
        A missing, unreadable or malformed file, or one that fits other parameters, is a
        :class:`TwinloopError` that names it."""
        if Path(path).is_dir():  # a calibration's output folder: the file is inside it
            inside = Path(path) / "posterior.json"
            raise TwinloopError(f"posterior {str(path)!r} is a folder; pass the posterior.json inside it"
                                + (f": {inside}" if inside.is_file() else " (none there: was it a calibration's output?)"))
        try:
            post = cls.from_dict(read_json(path, "posterior"))
        except (KeyError, TypeError, ValueError) as exc:
            raise TwinloopError(f"posterior {str(path)!r} is not a readable posterior.json: {exc}") from exc
        if space is not None:
            if list(post.names) != list(space.names):
                raise TwinloopError(f"posterior {str(path)!r} fits {list(post.names)}, not the task's "
                                    f"{list(space.names)}")
            space.check(post.estimate, f"posterior {str(path)!r}: its estimate")
            space.check(post.particles, f"posterior {str(path)!r}: its particles")
        return post


def design(n: int) -> np.ndarray:
    """Response-surface design in unit coordinates: the centre, +-e_i and +-(e_i +- e_j)/sqrt 2
    on rings of radius 1 and 2 (``1 + 4n^2`` points)."""
    ring = [np.eye(n), -np.eye(n)]
    for i in range(n):
        for j in range(i + 1, n):
            for si in (1, -1):
                for sj in (1, -1):
                    v = np.zeros(n)
                    v[i], v[j] = si, sj
                    ring.append(v[None] / np.sqrt(2))
    ring = np.concatenate(ring)
    return np.concatenate([np.zeros((1, n)), ring, 2 * ring])


def quadratic_features(u: np.ndarray) -> np.ndarray:
    n = u.shape[1]
    iu = np.triu_indices(n)
    return np.concatenate([np.ones((len(u), 1)), u, u[:, iu[0]] * u[:, iu[1]]], axis=1)


def local_fit(fn: Objective, x: np.ndarray, space: ParamSpace, step: float):
    """Curvature and per-window scores of the objective around ``x`` by quadratic regression.

    ``f(x + D h u) ~ f0 + g.u + u'Hu/2`` over :func:`design` (``D`` = prior std, ``h`` =
    ``jac_step``), fitted to the total objective and to each window's share. The step is
    doubled (up to twice) while the fitted curvature is not positive definite.

    Returns:
        ``(H, G, rough, s2, r, scale)``: ``(n, n)`` curvature in scaled units, ``(W, n)``
        per-window gradients, the regression's residual std (roughness of ``f``), the residual
        variance at ``x``, the residuals at ``x`` and the per-parameter unit ``D h``.
    """
    n = len(x)
    blocks = fn.problem.window_blocks()
    n_win = int(blocks.max()) + 1
    U = design(n)
    h = step
    for _ in range(3):
        scale = h * space.prior_std
        X = np.clip(x + U * scale, space.low, space.high)
        R = fn(X)
        u = (X - x) / scale
        fw = np.zeros((len(X), n_win))
        for k in range(len(X)):
            fw[k] = 0.5 * np.bincount(blocks, weights=R[k] ** 2, minlength=n_win)
        A = quadratic_features(u)
        y = np.concatenate([fw.sum(axis=1, keepdims=True), fw], axis=1)
        coef, *_ = np.linalg.lstsq(A, y, rcond=None)
        iu = np.triu_indices(n)
        Hc = np.zeros((n, n))
        Hc[iu] = coef[1 + n :, 0]
        H = Hc + Hc.T  # diagonal: 2 c_ii; off-diagonal: c_ij
        if np.linalg.eigvalsh(H).min() > 0:
            break
        h *= 2
    fit = A @ coef[:, 0]
    dof = max(len(X) - A.shape[1], 1)
    rough = float(np.sqrt(np.sum((y[:, 0] - fit) ** 2) / dof))
    r = R[0]
    s2 = float(r @ r) / max(r.size - n, 1)
    return H, coef[1 : 1 + n, 1:].T, rough, max(s2, 1e-300), r, scale


def laplace(H: np.ndarray, G: np.ndarray, rough: float, s2: float, scale: np.ndarray,
            space: ParamSpace, null_tol: float = 1e-6, profile: Callable | None = None):
    """Data covariance, posterior covariance and the spectrum, from the local fit.

    In scaled units ``u`` (parameter = x + scale * u)::

        C_stat = s2 H^-1, or the window-clustered sandwich H^-1 (sum_w g_w g_w') H^-1 if larger
        C_data = C_stat + rough H^-1     (allowance for the objective's contact roughness)
        C_data = V diag(lam t^2) V'      widened by the profile check (see _profile_factors)
        Sigma  = (C_data^-1 + Sigma_0^-1)^-1

    Returns ``(cov, data_std, corr, null, V, sv, C, factors)``; ``factors`` are the profile
    check's widening per principal direction of ``C`` (``inf``: flat as far as it looked).
    """
    n = len(H)
    lam, V = np.linalg.eigh((H + H.T) / 2)
    lam_max = float(lam.max())
    # a direction without clearly positive curvature (flat, or curving down: x* is no minimum
    # along it) is not constrained by the data; with no positive curvature at all, none is
    null = lam <= null_tol * lam_max if lam_max > 0 else np.ones(n, bool)
    inv_lam = np.where(null, 0.0, 1.0 / np.where(null, 1.0, lam))
    Hinv = (V * inv_lam) @ V.T
    C = _sandwich(Hinv, G) if not null.any() else None
    C = (s2 + rough) * Hinv if C is None else C
    factors = np.ones(n)
    # variance along unconstrained directions is unbounded
    loads_null = (V[:, null] ** 2).sum(axis=1) > 1e-6
    var = np.diag(C).copy()
    var[loads_null] = np.inf
    prior_prec = np.diag((scale / space.prior_std) ** 2)
    if not null.any() and profile is not None:
        lc, Vc = np.linalg.eigh((C + C.T) / 2)
        lc = np.maximum(lc, 1e-12 * lc.max())  # C is positive definite here; guard rounding only
        factors = profile(Vc, lc)
        flat = ~np.isfinite(factors)
        C = (Vc * (lc * np.where(flat, FLAT_WIDENING, factors) ** 2)) @ Vc.T  # finite stand-in for flat
        var = np.diag(C).copy()
        var[(Vc[:, flat] ** 2).sum(axis=1) > 1e-6] = np.inf
        prec = (Vc * np.where(flat, 0.0, 1.0 / (lc * np.where(flat, 1.0, factors) ** 2))) @ Vc.T
    elif not null.any():
        prec = np.linalg.pinv(C, hermitian=True)
    else:
        prec = (V * np.where(null, 0.0, lam / (s2 + rough))) @ V.T
    data_std = np.sqrt(var) * scale
    # posterior with the prior N(nominal, prior_std^2), i.e. precision 1/h^2 in scaled units:
    # along what the data do not constrain it is the prior, never a number from the curvature
    post = np.linalg.inv(prec + prior_prec)
    cov = post * np.outer(scale, scale)
    corr = correlation(C if not null.any() else s2 * np.linalg.inv(H) if (lam > 0).all() else C,
                        undefined=loads_null & ~(lam > 0).all())
    sv = np.sqrt(np.maximum(lam[::-1], 0.0))
    return cov, data_std, corr, null, V, sv, C, factors


def _sandwich(Hinv: np.ndarray, G: np.ndarray) -> np.ndarray | None:
    """The window-clustered sandwich ``H^-1 (sum_w g_w g_w') H^-1`` of ``(W, n)`` per-window
    gradients, or ``None`` (use ``(s2 + rough) H^-1``) with fewer than ``4 n`` windows or a
    (near) zero direction."""
    n_win, n = len(G), len(Hinv)
    if n_win < 4 * n:
        return None
    # each window's own gradient varies with its noise *and* its contact roughness, so the
    # sandwich already carries the roughness; without enough windows, allow for it. A
    # sandwich with a (near) zero direction would claim a perfectly determined combination:
    # keep the curvature-based C then.
    S = Hinv @ (G.T @ G) @ Hinv * n_win / max(n_win - n, 1)
    ls = np.linalg.eigvalsh((S + S.T) / 2)
    return S if ls.min() > 1e-12 * ls.max() else None


def correlation(C: np.ndarray, undefined: np.ndarray) -> np.ndarray:
    """``(n, n)`` correlation of a covariance, within [-1, 1]; ``nan`` (undefined) in the rows
    and columns of ``undefined`` parameters and where a variance is not positive.

    With a positive definite curvature whose smallest eigenvalue is merely tiny, ``H^-1``
    still gives the meaningful near +-1 of a combination the data fix; with a curvature that
    is flat or negative along some direction, no correlation involving it exists."""
    d = np.diag(C).copy()
    bad = undefined | ~(d > 0) | ~np.isfinite(d)
    sd = np.sqrt(np.where(bad, 1.0, d))
    corr = np.clip(C / np.outer(sd, sd), -1.0, 1.0)
    np.fill_diagonal(corr, 1.0)
    corr[bad, :] = np.nan
    corr[:, bad] = np.nan
    return corr


def log_directions(x, H, C_u, null, scale, s2):
    """Principal combinations of ``log x``, best determined first.

    Returns ``(n, n)`` unit directions (columns) and the data-only std of each combination
    (relative: 0.01 = 1%), ``inf`` along what the data do not constrain; ``nan`` when a
    parameter sits at 0 (no logarithm)."""
    n = len(x)
    A = np.abs(x) / scale  # u = A * dlog(x)
    if (A <= 0).any():
        return np.eye(n), np.full(n, np.nan)
    if null.any():
        Hz = H * np.outer(A, A)
        lam, V = np.linalg.eigh((Hz + Hz.T) / 2)
        lam, V = lam[::-1], V[:, ::-1]
        ok = lam > 0
        std = np.where(ok, np.sqrt(s2 / np.where(ok, lam, 1.0)), np.inf)
        std[null[::-1]] = np.inf
        return V, std
    Cz = C_u / np.outer(A, A)
    w, V = np.linalg.eigh((Cz + Cz.T) / 2)
    return V, np.sqrt(np.maximum(w, 0.0))


def identifiability(x, data_std, corr, null, V, space: ParamSpace, max_rel_width: float = 0.25,
                    max_corr: float = 0.9):
    """``(ok, reasons, confounded)``: per parameter whether the data pin it down and why not,
    and the pairs whose data-only estimates correlate beyond ``max_corr``."""
    names = space.names
    n = len(names)
    ref = np.maximum(np.abs(x), 0.1 * (space.high - space.low))
    rel = 1.96 * data_std / ref
    ok = np.ones(n, bool)
    reasons = [""] * n
    loads = (V[:, null] ** 2).sum(axis=1) if null.any() else np.zeros(n)
    confounded = []
    for i in range(n):
        for j in range(i + 1, n):
            if abs(corr[i, j]) > max_corr:
                confounded.append((names[i], names[j], float(corr[i, j])))
    for i in range(n):
        why = []
        if loads[i] > 0.1:
            why.append("the data do not constrain it")
        elif not np.isfinite(rel[i]):
            why.append("the objective stays flat well beyond its local curvature")
        elif not rel[i] <= max_rel_width:
            why.append(f"95% half-width {rel[i]:.0%} of its size")
        partners = [b if a == names[i] else a for a, b, _ in confounded if names[i] in (a, b)]
        if why and partners:
            why.append(f"confounded with {', '.join(partners)}")
        if why:
            ok[i] = False
            reasons[i] = "; ".join(why)
    return ok, reasons, confounded



def sample(x: np.ndarray, cov: np.ndarray, space: ParamSpace, n: int, seed: int) -> np.ndarray:
    """``(n, len(x))`` Gaussian posterior draws clipped to the bounds; the first is ``x``."""
    rng = np.random.default_rng(seed)
    w, V = np.linalg.eigh((cov + cov.T) / 2)
    L = V * np.sqrt(np.maximum(w, 0.0))
    z = rng.standard_normal((n, len(x)))
    z[0] = 0.0
    return np.clip(x + z @ L.T, space.low, space.high)


def summarize(fn: Objective, x: np.ndarray, space: ParamSpace, *, jac_step: float, null_tol: float,
              max_rel_width: float, max_corr: float, particles: int, seed: int) -> dict:
    """Everything the data say about ``x``: the :class:`Posterior` fields from covariance to
    particles, from a local fit of ``fn`` around ``x`` (its evaluations count on ``fn``)."""
    H, G, rough, s2, r, scale = local_fit(fn, x, space, jac_step)
    f0 = 0.5 * float(r @ r)

    def profile(Vc, lc):
        return profile_factors(fn, x, f0, s2, scale, space, Vc, lc)

    cov, data_std, corr, null, V, sv, C_u, factors = laplace(H, G, rough, s2, scale, space, null_tol, profile)
    dirs, dir_std = log_directions(x, H, C_u, null, scale, s2)
    dir_std = np.where(dir_std > 0.1 * FLAT_WIDENING, np.inf, dir_std)  # the stand-in for a flat direction
    ok, reasons, confounded = identifiability(x, data_std, corr, null, V, space, max_rel_width, max_corr)
    # a data-only std a thousand times the bound width says "unconstrained", not a number
    data_std = np.where(data_std > 1e3 * (space.high - space.low), np.inf, data_std)
    return {"covariance": cov, "interval": interval(x, cov, space), "data_std": data_std, "correlation": corr,
            "identifiable": ok, "reasons": reasons, "confounded": confounded, "singular_values": sv,
            "particles": sample(x, cov, space, particles, seed), "log_directions": dirs,
            "log_direction_std": dir_std, "profile_factors": factors}


def interval(x: np.ndarray, cov: np.ndarray, space: ParamSpace) -> np.ndarray:
    """``(n, 2)`` 95% interval around ``x``, clipped to the bounds."""
    sd = np.sqrt(np.diag(cov))
    return np.stack([np.maximum(x - 1.96 * sd, space.low), np.minimum(x + 1.96 * sd, space.high)], axis=1)


def recentre(post: dict, estimate: np.ndarray, extra_cov: np.ndarray, space: ParamSpace, particles: int,
             seed: int) -> None:
    """``post`` (a :func:`summarize` result) moved onto ``estimate`` where that is not the fit
    itself (the previous parameters kept, or a bootstrap's correction): its covariance widened
    by ``extra_cov`` (the correction's own spread), its interval and particles centred there."""
    post["covariance"] = post["covariance"] + extra_cov
    post["interval"] = interval(estimate, post["covariance"], space)
    post["particles"] = sample(estimate, post["covariance"], space, particles, seed)


__all__ = ["Posterior", "correlation", "identifiability", "interval", "laplace", "local_fit", "log_directions",
           "profile_factors", "recentre", "sample", "summarize"]
