"""Calibration: fit a twin's :class:`~twinloop.params.ParamSpace` to recorded episodes.

Multiple shooting (see :mod:`twinloop.calib.windows`): every window restarts from its recorded
state and replays the recorded actions; the residual stacks the weighted state errors at every
tick boundary of every window, ``r(x)`` of length ``m``. Methods, all behind :func:`calibrate`:

- ``least_squares``: bounded Levenberg-Marquardt / Gauss-Newton of ``mujoco.minimize`` with a
  central-difference Jacobian (all ``2n`` columns simulated in one batched rollout), restarted
  from the best point while that still helps.
- ``cma``: CMA-ES (``cma`` package) on the bound-normalized parameters; gradient-free, so it
  does not care how rough contact makes ``r(x)``.
- ``mjx``: the same least squares with a forward-mode (``jax.jacfwd``) Jacobian through MJX;
  needs the ``[gpu]`` extra.

Contact makes ``r(x)`` rough on small scales (a slightly different friction changes which
corner touches first), so every slope and curvature is measured over a step of ``jac_step``
prior standard deviations, not infinitesimally.

The result is a :class:`Posterior`, a Laplace approximation at the optimum ``x*`` whose
curvature comes from a quadratic fit of ``f(x) = |r(x)|^2 / 2`` around ``x*``::

    s^2   = |r(x*)|^2 / (m - n)                        residual variance
    H     = Hessian of the quadratic fit (~ J^T J)     per-window gradients g_w from the same fit
    C     = s^2 H^-1, or the window-clustered sandwich H^-1 (sum g_w g_w') H^-1 if larger,
            plus rough * H^-1 for the fit's residual roughness
    Sigma = (C^-1 + Sigma_0^-1)^-1                     with the prior's Sigma_0, so it is proper

A profile check then walks out along each principal direction of ``C`` and widens it where the
objective has not risen by the 95% threshold at the Laplace half-width (contact roughness can
fake a steep bowl in a flat valley), see :func:`_profile_factors`.

Identifiability is judged on the data alone (``C`` and the spectrum of ``H``), not on the prior:
a parameter is NOT IDENTIFIABLE when its data-only 95% half-width exceeds ``max_rel_width`` of
its size, or when it loads on a direction the data do not constrain (eigenvalue of ``H`` below
``null_tol`` times the largest). Pairs whose data-only estimates correlate beyond ``max_corr``
are named as confounded (a constant-speed push fixes friction x mass, not each).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from twinloop.calib.windows import (
    StateError,
    Trajectory,
    Windows,
    as_trajectories,
    free_starts,
    make_windows,
    split_episodes,
    window_rollout_states,
)
from twinloop.errors import TwinloopError, choose, number
from twinloop.params import ParamSpace
from twinloop.tasks.base import Task
from twinloop.twin.base import check_twin_scene

METHODS = ("least_squares", "cma", "mjx")
_BAD = 1e3  # residual per component of an unstable rollout (in error units): huge but finite


@dataclass(frozen=True)
class CalibConfig:
    """Knobs of a calibration.

    Attributes:
        method: ``least_squares`` | ``cma`` | ``mjx``.
        window: window length (control ticks).
        stride: ticks between window starts (default: ``window``, no overlap).
        start_clearance: start windows only where no two moving bodies are this close (m) to
            contact (see :func:`~twinloop.calib.windows.free_starts`); ``None`` starts anywhere.
        pos_scale: error unit of positions (m): 1 mm error counts 1.
        angle_scale: error unit of angles (rad); loose because a point push makes yaw chaotic.
        vel_scale: error unit of velocities (m/s; rad/s scaled like angles).
        use_velocity: compare velocities too (they carry most of the friction signal).
        errors_in_variables: treat each window's recorded start state as a noisy observation
            (with the noise the error units imply) and profile its noise out, see
            :meth:`WindowProblem.account_for_start_noise`; False trusts the starts exactly.
        delay_steps: actuation delay (physics steps) the replay applies to the recorded
            actions; ``None`` picks the best of ``0..max_delay_steps`` at the starting point.
        max_delay_steps: largest delay tried when ``delay_steps`` is ``None``.
        max_evals: simulation budget, in parameter vectors evaluated on all windows.
        max_iter: least-squares iterations (within the budget).
        jac_step: central-difference step of the Jacobian, as a fraction of each prior std
            (large on purpose: a secant over contact roughness, see :func:`_jacobian`).
        cma_sigma: CMA-ES initial step, as a fraction of each bound width.
        cma_popsize: CMA-ES population. Larger than cma's default ``4 + 3 ln n`` (6 for two
            parameters): contact makes the objective rough, and a larger population averages
            over the roughness (block-push, 3 trajectories: median error 5.1% -> 2.8%).
        holdout_fraction: share of episodes held out for the before/after error when no
            holdout is given (0 keeps all for fitting).
        particles: posterior samples to return (the first is the estimate).
        max_rel_width: identifiability limit on the data-only 95% half-width, relative to
            ``max(|estimate|, 10% of the bound width)``.
        max_corr: |correlation| beyond which a pair is reported confounded.
        null_tol: eigenvalue ratio of the fitted curvature below which a direction is
            unconstrained.
        seed: seed of CMA-ES, the holdout split and the particles.
    """

    method: str = "least_squares"
    window: int = 5
    stride: int | None = None
    start_clearance: float | None = 0.003
    pos_scale: float = 1e-3
    angle_scale: float = 5e-2
    vel_scale: float = 2e-2
    use_velocity: bool = True
    errors_in_variables: bool = True
    delay_steps: int | None = 0
    max_delay_steps: int = 10
    max_evals: int = 400
    max_iter: int = 50
    jac_step: float = 0.2
    cma_sigma: float = 0.2
    cma_popsize: int | None = 16
    holdout_fraction: float = 0.0
    particles: int = 16
    max_rel_width: float = 0.25
    max_corr: float = 0.9
    null_tol: float = 1e-6
    seed: int = 0

    def __post_init__(self):
        choose("calibration method", self.method, METHODS)
        ints = {"window": 1, "max_delay_steps": 0, "max_evals": 2, "max_iter": 1, "particles": 1, "seed": 0}
        for k, low in ints.items():
            object.__setattr__(self, k, number(getattr(self, k), k, low=low, integer=True))
        for k, low in (("stride", 1), ("delay_steps", 0), ("cma_popsize", 2)):
            if getattr(self, k) is not None:
                object.__setattr__(self, k, number(getattr(self, k), k, low=low, integer=True))
        if self.start_clearance is not None:
            object.__setattr__(self, "start_clearance", number(self.start_clearance, "start_clearance (m)",
                                                               low=0, low_open=True))
        for k in ("pos_scale", "angle_scale", "vel_scale", "max_rel_width"):
            object.__setattr__(self, k, number(getattr(self, k), k, low=0, low_open=True))
        # a zero step divides by zero in every slope and curvature; beyond a few prior stds
        # the "local" fit is not local any more
        object.__setattr__(self, "jac_step", number(self.jac_step, "jac_step (prior stds)", low=0, high=10,
                                                    low_open=True))
        object.__setattr__(self, "cma_sigma", number(self.cma_sigma, "cma_sigma (fraction of the bound width)",
                                                     low=0, high=1, low_open=True))
        object.__setattr__(self, "holdout_fraction", number(self.holdout_fraction, "holdout_fraction",
                                                            low=0, high=1, high_open=True))
        object.__setattr__(self, "max_corr", number(self.max_corr, "max_corr", low=0, high=1, low_open=True))
        object.__setattr__(self, "null_tol", number(self.null_tol, "null_tol", low=0, high=1, low_open=True,
                                                    high_open=True))
        for k in ("use_velocity", "errors_in_variables"):
            if not isinstance(getattr(self, k), (bool, np.bool_)):
                raise TwinloopError(f"{k} must be True or False, got {getattr(self, k)!r}")


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
            looked), see :func:`_profile_factors`.
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
        """A plain-text table: every value with its interval and identifiability."""
        lines = [f"calibration ({self.method}): {self.n_windows} windows, {self.n_transitions} transitions, "
                 f"{self.n_evals} evaluations, actuation delay {self.delay_steps} steps, {self.seconds:.1f} s"]
        head = f"  {'parameter':<16} {'estimate':>10} {'95% interval':>23} {'data sd':>9}"
        if truth is not None:
            head += f" {'truth':>9} {'error':>7}"
        lines.append(head + "  status")
        for i, name in enumerate(self.names):
            lo, hi = self.interval[i]
            row = f"  {name:<16} {self.estimate[i]:>10.4g} [{lo:>10.4g}, {hi:>10.4g}] {self.data_std[i]:>9.2g}"
            if truth is not None:
                t = float(np.asarray(truth)[i])
                row += f" {t:>9.4g} {self.error(truth)[i]:>7.1%}"
            row += "  ok" if self.identifiable[i] else f"  NOT IDENTIFIABLE ({self.reasons[i]})"
            lines.append(row)
        for a, b, r in self.confounded:
            lines.append(f"  confounded: {a} and {b} (correlation {r:+.3f}); the data fix a combination, not each")
        if len(self.names) > 1 and self.log_direction_std.size and np.isfinite(self.log_direction_std[0]):
            for label, j in (("best determined", 0), ("least determined", -1)):
                v = self.log_directions[:, j] * np.sign(self.log_directions[np.argmax(np.abs(self.log_directions[:, j])), j])
                combo = " ".join(f"{c:+.2f} log {n}" for c, n in zip(v, self.names, strict=True) if abs(c) >= 0.05)
                lines.append(f"  {label}: {combo}  (data sd {self.log_direction_std[j]:.1%})")
        widened = self.profile_factors[self.profile_factors > 1.05] if self.profile_factors.size else []
        if len(widened):
            w = float(np.max(widened))
            lines.append("  profile check: the objective is flatter than its local curvature; intervals widened "
                         + ("to the prior along a flat direction" if not np.isfinite(w) else f"up to x{w:.1f}"))
        tb, ta = self.train_error
        hb, ha = self.holdout_error
        lines.append(f"  state error (RMS, error units): train {tb:.3g} -> {ta:.3g}; holdout {hb:.3g} -> {ha:.3g}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-ready dict (arrays as lists; ``inf`` as the string ``"inf"``)."""
        out = {}
        for k, v in asdict(self).items():
            if isinstance(v, np.ndarray):
                v = v.tolist()
            out[k] = _json_safe(v)
        out["all_identifiable"] = self.all_identifiable
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Posterior:
        d = {k: _json_load(v) for k, v in d.items() if k != "all_identifiable"}
        arrays = ("estimate", "covariance", "interval", "data_std", "correlation", "identifiable",
                  "singular_values", "particles", "low", "high", "x0", "log_directions", "log_direction_std",
                  "profile_factors")
        for k in (a for a in arrays if a in d):
            d[k] = np.asarray(d[k], dtype=bool if k == "identifiable" else float)
        d["confounded"] = [tuple(c) for c in d["confounded"]]
        d["train_error"] = tuple(d["train_error"])
        d["holdout_error"] = tuple(d["holdout_error"])
        return cls(**d)


def _json_safe(v):
    if isinstance(v, float):
        return "inf" if v == np.inf else "-inf" if v == -np.inf else "nan" if v != v else v
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return _json_safe(v.item())
    return v


def _json_load(v):
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    if isinstance(v, list):
        return [_json_load(x) for x in v]
    return v


# -- the least-squares problem ------------------------------------------------------------------


class _Budget(Exception):
    """The simulation budget is spent (caught by :func:`calibrate`)."""


class WindowProblem:
    """The multiple-shooting residual ``r(x)`` of a set of windows.

    Args:
        task: supplies ``substeps``.
        twin: a twin with ``rollout_many`` (e.g. :class:`~twinloop.twin.MujocoTwin`).
        windows: window groups from :func:`make_windows`.
        error: the :class:`StateError`.
        delay: actuation delay of the replay (physics steps).
    """

    def __init__(self, task: Task, twin, windows: Sequence[Windows], error: StateError, delay: int = 0):
        if not hasattr(twin, "rollout_many"):
            raise TwinloopError(f"twin {type(twin).__name__} has no rollout_many; calibration needs a batched twin")
        check_twin_scene(twin, task.model, task.name)
        self.task, self.twin, self.windows, self.error = task, twin, list(windows), error
        self.delay = int(delay)
        self.substeps = task.substeps
        self.size = sum(len(w) * w.length * error.size for w in self.windows)
        self.steps_per_eval = sum(len(w) * w.length * self.substeps for w in self.windows)
        self.whiten: list[np.ndarray] | None = None  # per group (B, m_w, m_w): inverse Cholesky factors

    def _raw(self, w: Windows, params: np.ndarray) -> np.ndarray:
        """``(P, B, L * k)`` unwhitened residuals of one window group."""
        pred, ok = window_rollout_states(self.twin, w, self.substeps, params, self.delay)
        r = self.error(pred, w.targets[None])  # (P, B, L, k)
        r = np.where(ok[:, :, None, None] & np.isfinite(r), r, _BAD)
        return r.reshape(*r.shape[:2], -1)

    def residuals(self, params: np.ndarray, whiten: bool = True) -> np.ndarray:
        """``(P, n)`` parameter vectors -> ``(P, m)`` residuals (unstable windows get a large
        finite value so that an optimizer backs off rather than crashing); whitened for the
        start-state noise once :meth:`account_for_start_noise` has run (unless ``whiten`` is
        False: the plain weighted state errors)."""
        r = np.concatenate([self._raw(w, params).reshape(len(params), -1) for w in self.windows], axis=1)
        return self.whitened(r) if whiten else r

    def whitened(self, r: np.ndarray) -> np.ndarray:
        """``(..., m)`` residual-ordered rows -> the same rows whitened (identity before
        :meth:`account_for_start_noise`)."""
        if self.whiten is None:
            return r
        out, start = [], 0
        for Linv in self.whiten:
            B, mw = Linv.shape[:2]
            blk = r[..., start : start + B * mw].reshape(*r.shape[:-1], B, mw)
            out.append(np.einsum("bij,...bj->...bi", Linv, blk).reshape(*r.shape[:-1], B * mw))
            start += B * mw
        return np.concatenate(out, axis=-1)

    @property
    def start_noise_cost(self) -> int:
        """Parameter-vector equivalents :meth:`account_for_start_noise` simulates (``2k``
        window replays per window, ``k`` compared state components)."""
        return 2 * self.error.size

    def account_for_start_noise(self, x: np.ndarray, step: float = 1.0) -> int:
        """Errors in variables: treat each window's recorded start as a noisy observation.

        A window restarts from a *measured* state, so its residuals carry the start's noise,
        propagated through the dynamics: ``r = r_true + A e`` with ``e`` the start's noise in
        error units (the same units, hence the same noise model, as every other observation)
        and ``A`` the window's sensitivity to its start. Left alone, that term biases the fit
        (a parameter is bent to explain a bad start) and makes the intervals too narrow.
        Profiling ``e`` out (``min_e |r + A e|^2 + |e|^2``) leaves the whitened residual
        ``L^-1 r`` with ``L L' = I + A A'``, the residual's covariance: generalized least
        squares. ``A`` comes from central differences of ``step`` error units at ``x`` and is
        then held fixed (it barely depends on the parameters).

        Returns:
            The parameter-vector equivalents simulated (for the budget).
        """
        comps = np.flatnonzero(self.error.mask)
        k = len(comps)
        whiten = []
        p = np.asarray(x, dtype=float)[None]
        for w in self.windows:
            B = len(w)
            # 2k perturbed copies of every start: ((2k) * B, nstate)
            d = np.zeros((2 * k, w.starts.shape[1]))
            d[np.arange(k), comps] = step * self.error.scale[comps]
            d[k + np.arange(k), comps] = -step * self.error.scale[comps]
            starts = (w.starts[None] + d[:, None]).reshape(2 * k * B, -1)
            rep = Windows(starts, np.tile(w.actions, (2 * k, 1, 1)), np.tile(w.targets, (2 * k, 1, 1)),
                          np.tile(w.episode, 2 * k), None if w.before is None else np.tile(w.before, (2 * k, 1)))
            r = self._raw(rep, p)[0].reshape(2 * k, B, -1)
            A = ((r[:k] - r[k:]) / (2 * step)).transpose(1, 2, 0)  # (B, m_w, k)
            A = np.where(np.abs(A) < _BAD / (4 * step), A, 0.0)  # an unstable copy says nothing
            S = np.eye(A.shape[1]) + A @ A.transpose(0, 2, 1)
            whiten.append(np.linalg.inv(np.linalg.cholesky(S)))
        self.whiten = whiten
        return self.start_noise_cost

    def window_blocks(self) -> np.ndarray:
        """``(m,)`` window id of each residual entry (for cluster-robust covariance)."""
        ids, start = [], 0
        for w in self.windows:
            per = w.length * self.error.size
            ids.append(np.repeat(np.arange(start, start + len(w)), per))
            start += len(w)
        return np.concatenate(ids)


class _Counted:
    """Wraps a problem: counts evaluations, keeps the best point seen, enforces the budget."""

    def __init__(self, problem: WindowProblem, space: ParamSpace, max_evals: int,
                 progress: Callable[[int, float], None] | None):
        self.problem, self.space, self.max_evals, self.progress = problem, space, max_evals, progress
        self.n_evals = 0
        self.best_x: np.ndarray | None = None
        self.best_f = np.inf
        self.enforce = True

    def __call__(self, params: np.ndarray) -> np.ndarray:
        p = np.clip(np.atleast_2d(params), self.space.low, self.space.high)
        if self.enforce and self.n_evals + len(p) > self.max_evals:
            raise _Budget
        r = self.problem.residuals(p)
        self.n_evals += len(p)
        f = 0.5 * (r**2).sum(axis=1)
        j = int(np.argmin(f))
        if f[j] < self.best_f:
            self.best_f, self.best_x = float(f[j]), p[j].copy()
        if self.progress is not None:
            self.progress(self.n_evals, self.best_f)
        return r


# -- methods -----------------------------------------------------------------------------------


def _fit_least_squares(fn: _Counted, x0: np.ndarray, space: ParamSpace, cfg: CalibConfig) -> None:
    from mujoco import minimize

    def residual(x):  # mujoco.minimize: (n, k) points -> (m, k) residuals
        return fn(x.T).T

    def jacobian(x, r):
        return _jacobian(fn, x[:, 0], space, cfg.jac_step)

    # contact roughness can stall Levenberg-Marquardt in a shallow dent: while budget remains,
    # restart it (fresh regularizer) from the best point until a restart gains nothing
    x, f_prev = x0.copy(), np.inf
    while fn.best_f < f_prev * (1 - 1e-6):
        f_prev = fn.best_f
        minimize.least_squares(
            x, residual, bounds=[space.low, space.high], jacobian=jacobian,
            max_iter=cfg.max_iter, verbose=0, x_scale=space.prior_std,
            mu_factor=4.0,  # the default 1.26 spends most of the budget backing off the roughness
        )
        x = fn.best_x.copy()


def _fit_cma(fn: _Counted, x0: np.ndarray, space: ParamSpace, cfg: CalibConfig) -> None:
    import cma

    lo, hi = space.low, space.high
    opts = {"bounds": [0.0, 1.0], "seed": cfg.seed + 1, "verbose": -9, "maxfevals": cfg.max_evals,
            "tolfun": 1e-12, "tolx": 1e-7}
    if cfg.cma_popsize:
        opts["popsize"] = cfg.cma_popsize
    es = cma.CMAEvolutionStrategy(list((x0 - lo) / (hi - lo)), cfg.cma_sigma, opts)
    while not es.stop():
        u = np.clip(np.asarray(es.ask()), 0.0, 1.0)
        r = fn(lo + u * (hi - lo))
        es.tell(list(u), (0.5 * (r**2).sum(axis=1)).tolist())


def _fit_mjx(fn: _Counted, x0: np.ndarray, space: ParamSpace, cfg: CalibConfig) -> None:
    """Least squares whose Jacobian is a forward-mode derivative (``jax.jacfwd``) through MJX.

    Forward mode carries one tangent per parameter through every solver iteration, which stays
    accurate through contact where reverse mode over many solver iterations does not. The
    residual itself (and so the line search and the fit) stays on CPU MuJoCo, the physics the
    other methods fit; MJX only supplies the local slope. MJX writes the parameter values into
    its model directly, without ``mj_setConst``: after a mass change the derived constants
    (``body_subtreemass``, ``dof_invweight0``) stay nominal, a small error in the slope only.
    """
    try:
        import jax  # noqa: F401
        from mujoco import mjx  # noqa: F401
    except ImportError as exc:
        raise TwinloopError(
            "calibration method 'mjx' needs the [gpu] extra (jax, mujoco-mjx): "
            f"pip install 'twinloop[gpu]' ({exc})"
        ) from exc
    from mujoco import minimize

    jac = _MjxJacobian(fn.problem, space)

    def residual(x):
        return fn(x.T).T

    def jacobian(x, r):  # MJX differentiates the plain errors; whiten like the residual
        return fn.problem.whitened(jac(x[:, 0]).T).T

    x, f_prev = x0.copy(), np.inf
    while fn.best_f < f_prev * (1 - 1e-6):
        f_prev = fn.best_f
        minimize.least_squares(x, residual, bounds=[space.low, space.high], jacobian=jacobian,
                               max_iter=cfg.max_iter, verbose=0, x_scale=space.prior_std, mu_factor=4.0)
        x = fn.best_x.copy()


class _MjxJacobian:
    """``x -> (m, n)`` Jacobian of a :class:`WindowProblem`'s residual by ``jax.jacfwd`` through
    MJX (compiled once per problem; the first call pays the compile)."""

    def __init__(self, problem: WindowProblem, space: ParamSpace):
        import jax
        import jax.numpy as jnp
        from mujoco import mjx

        from twinloop.calib.windows import window_controls

        model = problem.twin.model
        m0 = mjx.put_model(model)
        d0 = mjx.make_data(m0)
        writes = []  # (attr, row, col, kind) per parameter
        for p, slots in zip(space.params, space._slots(model), strict=True):
            per = []
            for sl in slots:
                attr, col = sl.attr, sl.col
                if (sl.kind, sl.field) == ("actuator", "kp"):
                    per += [("actuator_gainprm", sl.row, 0, 1.0), ("actuator_biasprm", sl.row, 1, -1.0)]
                    continue
                if (sl.kind, sl.field) == ("actuator", "kv"):
                    per.append(("actuator_biasprm", sl.row, 2, -1.0))
                    continue
                if not isinstance(getattr(m0, attr), jax.Array):
                    raise TwinloopError(f"param {p.name!r}: MJX keeps {attr} static; it cannot be differentiated")
                per.append((attr, sl.row, col, "mass" if (sl.kind, sl.field) == ("body", "mass") else 1.0))
            writes.append(per)
        err = problem.error
        scale = jnp.asarray(err.scale)
        mask = np.flatnonzero(err.mask)
        hinge = jnp.asarray(err.hinge)
        groups = [(jnp.asarray(w.starts), jnp.asarray(window_controls(w, problem.substeps, problem.delay)),
                   jnp.asarray(w.targets)) for w in problem.windows]
        nq, nv, sub = model.nq, model.nv, problem.substeps

        def apply(x):
            m = m0
            for xi, per in zip(x, writes, strict=True):
                for attr, row, col, how in per:
                    arr = getattr(m, attr)
                    if how == "mass":
                        ratio = xi / model.body_mass[row]
                        m = m.replace(body_inertia=m.body_inertia.at[row].set(model.body_inertia[row] * ratio))
                        arr = m.body_mass
                    val = xi if how == "mass" else how * xi
                    arr = arr.at[row].set(val) if col is None else arr.at[row, col].set(val)
                    m = m.replace(**{attr: arr})
            return m

        def window(m, start, ctrl):
            d = d0.replace(qpos=start[:nq], qvel=start[nq : nq + nv])

            def step(d, u):
                d = mjx.step(m, d.replace(ctrl=u))
                return d, jnp.concatenate([d.qpos, d.qvel])

            _, traj = jax.lax.scan(step, d, ctrl)
            return traj[sub - 1 :: sub]  # state after each tick

        def residual(x):
            m = apply(x)
            out = []
            for starts, ctrl, targets in groups:
                pred = jax.vmap(window, in_axes=(None, 0, 0))(m, starts, ctrl)
                pad = jnp.zeros((*pred.shape[:-1], targets.shape[-1] - pred.shape[-1]))
                diff = jnp.concatenate([pred, pad], axis=-1) - targets
                diff = jnp.where(hinge, jnp.arctan2(jnp.sin(diff), jnp.cos(diff)), diff)
                out.append((diff / scale)[..., mask].reshape(-1))
            return jnp.concatenate(out)

        self._jac = jax.jit(jax.jacfwd(residual))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self._jac(np.asarray(x, dtype=np.float32)), dtype=np.float64)


_METHODS = {"least_squares": _fit_least_squares, "cma": _fit_cma, "mjx": _fit_mjx}


# -- posterior ---------------------------------------------------------------------------------


def _jacobian(fn: _Counted, x: np.ndarray, space: ParamSpace, step: float) -> np.ndarray:
    """``(m, n)`` central-difference Jacobian at ``x`` with steps ``step * prior_std`` (one
    batched evaluation of ``2n`` points).

    Contact makes ``r(x)`` rough on small scales (a slightly different friction changes which
    corner touches first), so an infinitesimal finite difference measures that roughness, not
    the trend; a step of a tenth of the prior width is a secant over it.
    """
    n = len(x)
    h = step * space.prior_std
    X = np.clip(np.concatenate([x + np.diag(h), x - np.diag(h)]), space.low, space.high)
    R = fn(X)
    dx = X[:n].diagonal() - X[n:].diagonal()
    return ((R[:n] - R[n:]) / dx[:, None]).T


def _design(n: int) -> np.ndarray:
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


def _quadratic_features(u: np.ndarray) -> np.ndarray:
    n = u.shape[1]
    iu = np.triu_indices(n)
    return np.concatenate([np.ones((len(u), 1)), u, u[:, iu[0]] * u[:, iu[1]]], axis=1)


def _local_fit(fn: _Counted, problem: WindowProblem, x: np.ndarray, space: ParamSpace, cfg: CalibConfig):
    """Curvature and per-window scores of the objective around ``x`` by quadratic regression.

    ``f(x + D h u) ~ f0 + g.u + u'Hu/2`` over :func:`_design` (``D`` = prior std, ``h`` =
    ``jac_step``), fitted to the total objective and to each window's share. The step is
    doubled (up to twice) while the fitted curvature is not positive definite.

    Returns:
        ``(H, G, rough, s2, r, scale)``: ``(n, n)`` curvature in scaled units, ``(W, n)``
        per-window gradients, the regression's residual std (roughness of ``f``), the residual
        variance at ``x``, the residuals at ``x`` and the per-parameter unit ``D h``.
    """
    n = len(x)
    blocks = problem.window_blocks()
    n_win = int(blocks.max()) + 1
    U = _design(n)
    h = cfg.jac_step
    for _ in range(3):
        scale = h * space.prior_std
        X = np.clip(x + U * scale, space.low, space.high)
        R = fn(X)
        u = (X - x) / scale
        fw = np.zeros((len(X), n_win))
        for k in range(len(X)):
            fw[k] = 0.5 * np.bincount(blocks, weights=R[k] ** 2, minlength=n_win)
        A = _quadratic_features(u)
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


def _laplace(H: np.ndarray, G: np.ndarray, rough: float, s2: float, scale: np.ndarray,
             space: ParamSpace, cfg: CalibConfig, profile: Callable | None = None):
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
    null = lam <= cfg.null_tol * lam_max if lam_max > 0 else np.ones(n, bool)
    inv_lam = np.where(null, 0.0, 1.0 / np.where(null, 1.0, lam))
    Hinv = (V * inv_lam) @ V.T
    C = (s2 + rough) * Hinv
    n_win = len(G)
    if n_win >= 4 * n and not null.any():
        # each window's own gradient varies with its noise *and* its contact roughness, so
        # the sandwich already carries the roughness; without enough windows, allow for it.
        # A sandwich with a (near) zero direction would claim a perfectly determined
        # combination: keep the curvature-based C then.
        S = Hinv @ (G.T @ G) @ Hinv * n_win / max(n_win - n, 1)
        ls = np.linalg.eigvalsh((S + S.T) / 2)
        if ls.min() > 1e-12 * ls.max():
            C = S
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
        C = (Vc * (lc * np.where(flat, _FLAT, factors) ** 2)) @ Vc.T  # finite stand-in for flat
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
    corr = _correlation(C if not null.any() else s2 * np.linalg.inv(H) if (lam > 0).all() else C,
                        undefined=loads_null & ~(lam > 0).all())
    sv = np.sqrt(np.maximum(lam[::-1], 0.0))
    return cov, data_std, corr, null, V, sv, C, factors


def _correlation(C: np.ndarray, undefined: np.ndarray) -> np.ndarray:
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


_FLAT = 1e3  # widening that stands in for "flat as far as the profile check looked"
_PROFILE_STEPS = (1.0, 2.0, 4.0, 8.0)


def _profile_factors(fn: _Counted, x: np.ndarray, f0: float, s2: float, scale: np.ndarray, space: ParamSpace,
                     Vc: np.ndarray, lc: np.ndarray) -> np.ndarray:
    """How much wider than the Laplace approximation the 95% interval must be, per principal
    direction of the data covariance.

    The local quadratic fit measures curvature over a small neighbourhood; contact makes the
    objective rough, and a fit that ends in a narrow dip sees a steep bowl where the objective
    is in fact flat (a constant push fixes friction x mass, yet a dip can make the ratio look
    determined). So walk out along each principal direction ``v_i`` to ``t`` times its
    Laplace 95% half-width, ``t`` in 1, 2, 4, 8, both sides, and find where the objective has
    risen by the 95% profile threshold ``chi2_1(0.95) / 2 * s^2 = 1.92 s^2`` plus twice the
    objective's small-scale roughness, for good (at that step and every later one). The
    roughness (per line) is the RMS departure from a parabola through its points at 0, 1/4,
    1/2 and 1 half-width: a rise within it tells nothing, and ``x`` itself may sit in a dip
    of it (rises count from the floor the nearby points stand on). The
    direction's std is widened by that ``t`` (interpolated; never narrowed); ``inf`` when the
    rise never comes, within the steps or before a bound.
    """
    n = len(x)
    steps = np.asarray(_PROFILE_STEPS)
    near = np.array([0.25, 0.5])
    half = 1.96 * np.sqrt(lc)  # scaled units
    pts, ends = [], []
    for i in range(n):
        for sign in (1.0, -1.0):
            for t in (*steps, *near):
                p = x + scale * (sign * t * half[i] * Vc[:, i])
                pts.append(np.clip(p, space.low, space.high))
                ends.append(not np.allclose(pts[-1], p))
    R = fn(np.stack(pts))
    k = len(steps) + len(near)
    rise = (0.5 * (R**2).sum(axis=1) - f0).reshape(n, 2, k)
    clipped = np.array(ends).reshape(n, 2, k)[..., : len(steps)]
    # x may sit in a narrow dip below a flat floor: measure rises from the floor the nearby
    # points stand on (their median departure from the Laplace quadratic), never from below x
    rise -= max(0.0, float(np.median(rise[..., len(steps) :] - 1.92 * s2 * near**2)))
    # small-scale roughness: the residual of a parabola through the inner points of each line
    t_in = np.concatenate([[0.0], near, steps[:1], -near, -steps[:1]])
    A = np.stack([np.ones_like(t_in), t_in, t_in**2], axis=1)
    thr = np.zeros(n)
    for i in range(n):
        y = np.concatenate([[0.0], rise[i, 0, len(steps) :], rise[i, 0, :1], rise[i, 1, len(steps) :], rise[i, 1, :1]])
        c, *_ = np.linalg.lstsq(A, y, rcond=None)
        thr[i] = 1.92 * s2 + 2.0 * np.sqrt(np.sum((y - A @ c) ** 2) / (len(t_in) - 3))
    rise = rise[..., : len(steps)]
    out = np.ones(n)
    for i in range(n):
        for side in range(2):
            above = rise[i, side] > thr[i]
            # the first step from which the rise holds (a single spike up does not count)
            held = np.flatnonzero(np.logical_and.accumulate(above[::-1])[::-1])
            if not len(held) or clipped[i, side, : held[0]].any():
                out[i] = np.inf
                continue
            j = int(held[0])
            if j == 0:
                continue
            a, b = np.sqrt(max(rise[i, side, j - 1], 0.0)), np.sqrt(rise[i, side, j])
            t = steps[j - 1] + (steps[j] - steps[j - 1]) * (np.sqrt(thr[i]) - a) / max(b - a, 1e-300)
            out[i] = max(out[i], float(t))
    return out


def _log_directions(x, H, C_u, null, scale, s2):
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


def _identifiability(x, data_std, corr, null, V, space: ParamSpace, cfg: CalibConfig):
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
            if abs(corr[i, j]) > cfg.max_corr:
                confounded.append((names[i], names[j], float(corr[i, j])))
    for i in range(n):
        why = []
        if loads[i] > 0.1:
            why.append("the data do not constrain it")
        elif not np.isfinite(rel[i]):
            why.append("the objective stays flat well beyond its local curvature")
        elif not rel[i] <= cfg.max_rel_width:
            why.append(f"95% half-width {rel[i]:.0%} of its size")
        partners = [b if a == names[i] else a for a, b, _ in confounded if names[i] in (a, b)]
        if why and partners:
            why.append(f"confounded with {', '.join(partners)}")
        if why:
            ok[i] = False
            reasons[i] = "; ".join(why)
    return ok, reasons, confounded


def _rms(r: np.ndarray) -> float:
    return float(np.sqrt(np.mean(r**2))) if r.size else float("nan")


# -- entry point -------------------------------------------------------------------------------


def calibrate(task: Task, episodes: Sequence, space: ParamSpace | None = None, method: str | None = None,
              *, holdout: Sequence | None = None, config: CalibConfig | None = None, x0=None, twin=None,
              progress: Callable[[int, float], None] | None = None) -> Posterior:
    """Fit ``space`` (default ``task.param_space()``) to recorded ``episodes``.

    Args:
        task: the task the episodes were recorded on (model, substeps, obs -> state).
        episodes: recorded episodes (see :func:`~twinloop.calib.windows.as_trajectories`).
        space: the parameters to fit.
        method: overrides ``config.method``.
        holdout: episodes kept out of the fit for the before/after error (default: a
            ``config.holdout_fraction`` split of ``episodes``).
        config: :class:`CalibConfig`.
        x0: ``(n,)`` starting point (default: the space's nominal values).
        twin: a twin of ``task.model`` with ``rollout_many`` over ``space`` (default: a new
            CPU MuJoCo twin).
        progress: ``f(n_evals, best_objective)`` after every batch of evaluations.

    Returns:
        The :class:`Posterior`.
    """
    t_start = time.perf_counter()
    cfg = config or CalibConfig()
    if method is not None:
        cfg = CalibConfig(**{**asdict(cfg), "method": method})
    space = space if space is not None else task.param_space()
    if len(space) == 0:
        raise TwinloopError("the parameter space is empty: nothing to calibrate")
    x0 = space.nominal if x0 is None else space.check(np.asarray(x0, dtype=float), "x0")
    trajs = as_trajectories(task, episodes)
    if holdout is not None:
        train, held = trajs, (as_trajectories(task, holdout) if len(holdout) else [])
    else:
        train, held = split_episodes(trajs, cfg.holdout_fraction, cfg.seed)
    if twin is None:
        from twinloop.twin import make_twin

        twin = make_twin("mujoco", task.model, space)
    elif list(twin.param_space.names) != space.names:
        raise TwinloopError(f"twin varies {twin.param_space.names} but calibration fits {space.names}")
    error = StateError.for_task(task, train, cfg.pos_scale, cfg.angle_scale, cfg.vel_scale, cfg.use_velocity)
    problem = WindowProblem(task, twin, _windows(task, train, cfg), error, cfg.delay_steps or 0)
    fn = _Counted(problem, space, cfg.max_evals, progress)
    fit = _METHODS[cfg.method]
    delays = list(range(0, min(cfg.max_delay_steps, cfg.window * task.substeps - 1) + 1))
    if cfg.delay_steps is None:
        problem.delay = _best_delay(fn, problem, x0, delays)
    if cfg.errors_in_variables:
        if fn.n_evals + 2 * problem.start_noise_cost > cfg.max_evals:
            raise TwinloopError(
                f"max_evals={cfg.max_evals} is too small for errors in variables: measuring how each window "
                f"responds to its start costs {problem.start_noise_cost} evaluations; raise max_evals to at least "
                f"{fn.n_evals + 2 * problem.start_noise_cost} or set errors_in_variables=False"
            )
        fn.n_evals += problem.account_for_start_noise(x0)
    if cfg.delay_steps is None or cfg.errors_in_variables:
        # the delay and the start-noise sensitivity are judged at x0, which may be off: fit with
        # half the budget, judge them again at that fit, and spend the rest from there
        fn.max_evals = (cfg.max_evals + fn.n_evals) // 2
        _spend(fit, fn, x0, space, cfg)
        fn.max_evals, fn.enforce = cfg.max_evals, False
        x1 = fn.best_x.copy() if fn.best_x is not None else x0.copy()
        if cfg.delay_steps is None:
            problem.delay = _best_delay(fn, problem, x1, delays)
        if cfg.errors_in_variables and fn.n_evals + problem.start_noise_cost < cfg.max_evals:
            fn.n_evals += problem.account_for_start_noise(x1)
        fn.best_f, fn.best_x = np.inf, None  # objectives under another delay / whitening do not compare
        fn(np.stack([x0, x1]))
        fn.enforce = True
        _spend(fit, fn, fn.best_x.copy(), space, cfg)
    else:
        fn(x0[None])  # the starting point is always a candidate
        _spend(fit, fn, x0, space, cfg)
    x = fn.best_x
    n_fit = fn.n_evals
    # the posterior's local fit is simulated outside the fitting budget
    fn.enforce = False
    r0, r_fit = problem.residuals(np.stack([x0, x]), whiten=False)  # plain state errors, before/after
    H, G, rough, s2, r, scale = _local_fit(fn, problem, x, space, cfg)
    f0 = 0.5 * float(r @ r)

    def profile(Vc, lc):
        return _profile_factors(fn, x, f0, s2, scale, space, Vc, lc)

    cov, data_std, corr, null, V, sv, C_u, factors = _laplace(H, G, rough, s2, scale, space, cfg, profile)
    dirs, dir_std = _log_directions(x, H, C_u, null, scale, s2)
    dir_std = np.where(dir_std > 0.1 * _FLAT, np.inf, dir_std)  # the stand-in for a flat direction
    ok, reasons, confounded = _identifiability(x, data_std, corr, null, V, space, cfg)
    # a data-only std a thousand times the bound width says "unconstrained", not a number
    data_std = np.where(data_std > 1e3 * (space.high - space.low), np.inf, data_std)
    sd = np.sqrt(np.diag(cov))
    interval = np.stack([np.maximum(x - 1.96 * sd, space.low), np.minimum(x + 1.96 * sd, space.high)], axis=1)
    particles = _sample(x, cov, space, cfg.particles, cfg.seed)
    hold_err = (float("nan"), float("nan"))
    if held:
        hp = WindowProblem(task, twin, _windows(task, held, cfg), error, problem.delay)
        hr = hp.residuals(np.stack([x0, x]))
        hold_err = (_rms(hr[0]), _rms(hr[1]))
    return Posterior(
        names=space.names, estimate=x, covariance=cov, interval=interval, data_std=data_std,
        correlation=corr, identifiable=ok, reasons=reasons, confounded=confounded,
        singular_values=sv, particles=particles, low=space.low, high=space.high, method=cfg.method,
        train_error=(_rms(r0), _rms(r_fit)), holdout_error=hold_err, n_evals=n_fit,
        sim_steps=n_fit * problem.steps_per_eval, posterior_evals=fn.n_evals - n_fit, delay_steps=problem.delay,
        log_directions=dirs, log_direction_std=dir_std, profile_factors=factors, n_windows=sum(len(w) for w in problem.windows),
        n_transitions=sum(t.ticks for t in train), seconds=time.perf_counter() - t_start, x0=x0,
    )


def _spend(fit, fn: _Counted, x0: np.ndarray, space: ParamSpace, cfg: CalibConfig) -> None:
    """Run one method until it stops or the budget runs out (the best point seen stands)."""
    try:
        fit(fn, x0, space, cfg)
    except _Budget:
        pass


def _best_delay(fn: _Counted, problem: WindowProblem, x: np.ndarray, delays: Sequence[int]) -> int:
    """The candidate delay with the smallest objective at ``x`` (one evaluation each)."""
    costs = []
    for d in delays:
        problem.delay = d
        costs.append(float((fn(x[None])[0] ** 2).sum()))
    return int(delays[int(np.argmin(costs))])


def _windows(task: Task, trajs: Sequence[Trajectory], cfg: CalibConfig) -> list[Windows]:
    ok = None
    if cfg.start_clearance is not None:
        ok = [free_starts(task.model, t.states, cfg.start_clearance) for t in trajs]
    return make_windows(trajs, cfg.window, cfg.stride, ok)


def _sample(x: np.ndarray, cov: np.ndarray, space: ParamSpace, n: int, seed: int) -> np.ndarray:
    """``(n, len(x))`` Gaussian posterior draws clipped to the bounds; the first is ``x``."""
    rng = np.random.default_rng(seed)
    w, V = np.linalg.eigh((cov + cov.T) / 2)
    L = V * np.sqrt(np.maximum(w, 0.0))
    z = rng.standard_normal((n, len(x)))
    z[0] = 0.0
    return np.clip(x + z @ L.T, space.low, space.high)


def recovery_error(posterior: Posterior, truth) -> float:
    """Largest relative error over parameters (the RSR loop's ``param_error``)."""
    return float(np.max(posterior.error(truth)))


__all__ = ["METHODS", "CalibConfig", "Posterior", "Trajectory", "WindowProblem", "calibrate", "recovery_error"]
