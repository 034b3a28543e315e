"""Calibration: fit a twin's :class:`~twinloop.params.ParamSpace` to recorded episodes.

``calibrate`` composes the parts, each in its own module (the layout of ``mujoco.sysid``):

- the problem (:mod:`~twinloop.calib.windows`, :mod:`~twinloop.calib.problem`): recorded
  episodes cut into windows, the multiple-shooting residual ``r(x)``, its whitening for
  start-state noise, a budgeted objective;
- the methods (:mod:`~twinloop.calib.methods`): least squares, CMA-ES, MJX gradients;
- the posterior (:mod:`~twinloop.calib.posterior`): pure functions from the fit to covariance,
  intervals, identifiability and the profile check;
- the report (:mod:`~twinloop.calib.report`).

Each phase gets a new problem and a new objective (a re-estimated delay or whitening makes
a new problem; objectives under different problems do not compare), so nothing is switched
on or off as the fit goes. A fit that makes held-out error worse is reported and, with
``keep_if_worse`` (default), the previous parameters are kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from twinloop.calib.acceptance import AcceptanceConfig, control_check
from twinloop.calib.bootstrap import bootstrap_bias, simulate_closed_loop, simulate_like
from twinloop.calib.methods import METHODS, polish
from twinloop.calib.noise import estimate_obs_noise, estimate_state_noise, recorded_noise
from twinloop.calib.posterior import Posterior, recentre, summarize
from twinloop.calib.problem import BudgetSpent, Objective, WindowProblem, best_delay
from twinloop.calib.windows import (
    StateError,
    Trajectory,
    Windows,
    as_trajectories,
    free_starts,
    make_windows,
    quiet_starts,
    split_episodes,
)
from twinloop.errors import TwinloopError, choose, number
from twinloop.params import ParamSpace
from twinloop.tasks.base import Task
from twinloop.twin import make_twin


@dataclass(frozen=True)
class CalibConfig:
    """Knobs of a calibration.

    Attributes:
        method: ``least_squares`` | ``cma`` | ``mjx``.
        window: window length (control ticks).
        stride: ticks between window starts (default: ``window``, no overlap).
        start_clearance: start windows only where no two moving bodies are this close (m) to
            contact (see :func:`~twinloop.calib.windows.free_starts`); ``None`` starts anywhere.
        start_quiet: with ``start_clearance``, also that many tick boundaries before the start
            (see :func:`~twinloop.calib.windows.quiet_starts`): the state the world does not
            observe has settled after a contact; 0 checks the start alone. Measured on
            block-push (10 trajectories, 1 mm noise, 5 seeds): 1 takes the median error from
            3.4% to 2.8%, the p90 from 4.3% to 3.0% and interval coverage from 80% to 100%, and
            is ~30% faster (fewer windows); push-t stays as it was within seed noise (4.5% ->
            4.7% median, p90 13.9% -> 11.5%), 25% slower (more evaluations before least squares
            stops).
        pos_scale: error unit of positions (m): 1 mm error counts 1.
        angle_scale: error unit of angles (rad); loose because a point push makes yaw chaotic.
        vel_scale: error unit of velocities (m/s; rad/s scaled like angles).
        use_velocity: compare velocities too (they carry most of the friction signal).
        start_samples: predict each window as the mean over this many replays from noisy
            copies of its start (see :class:`~twinloop.calib.problem.WindowProblem`); 0: off.
        start_noise: ``(position m, angle rad, velocity m/s and rad/s)`` std of the
            observation noise on recorded states, the noise ``start_samples`` draws on window
            starts and errors in variables profiles out; ``None`` (default): one error unit
            of each component (``pos_scale``, ``angle_scale``, ``vel_scale``), which is the
            noise only where the units were chosen as the noise. The error units also weigh
            model error (``angle_scale`` is loose because a point push makes yaw chaotic), so
            they can overstate the noise (block-push: 0.05 rad against a yaw noise of 0.01).
            Measured on block-push at 1 mm / 0.01 rad with ``start_samples=4`` (README,
            RESULTS): ``(0.001, 0.01, 0.0)`` gives a median error of 0.87% over 30 seeds
            against 1.19% with the error units (95% interval of the median over seeds
            [0.68%, 1.21%]; coverage 100%), the issue's <= 1% as a point estimate; not better
            on every 10 of them (seeds 10-19: 0.65% -> 0.84%). Without ``start_samples`` it is
            worse (2.8% -> 3.4%, 5 seeds).
        noise_from_data: with ``start_noise`` not given, estimate the noise on the recorded
            starts from the training data instead of taking one error unit: one tick replayed
            from every recorded state at the starting point ``x0`` (see
            :func:`~twinloop.calib.noise.estimate_state_noise`; model error left at ``x0``
            inflates it, never shrinks it). Needs 8 transitions (fewer: the error units).
        weigh_by_noise: the error unit of each compared component is its noise, ``start_noise``
            (a sensor's specification; needed; also the start noise errors in variables profiles
            out), a free body's included (:func:`~twinloop.calib.windows.noise_units`), instead
            of the error units, which leave most of a free body's state at unit scale: a legged
            robot's trunk height and tilt, where its mass shows, go unseen. Velocities a noisy
            start throws off through stiff contacts may then take the fit over: compare positions
            only (``use_velocity=False``; quadruped-walk's default). False (default): off.
        errors_in_variables: treat each window's recorded start state as a noisy observation
            (with the noise the error units imply) and profile its noise out, see
            :meth:`~twinloop.calib.problem.WindowProblem.with_start_noise`; False trusts the starts;
            ``None`` (default): when ``max_evals`` affords it (its cost grows with the compared
            state: a towel's needs ~650 evaluations), else trust the starts and say so
            (``Posterior.errors_in_variables``, the report).
        start_iterations: with errors in variables, estimate each window's true start
            positions at the half-budget fit (this many Gauss-Newton steps, see
            :meth:`~twinloop.calib.problem.WindowProblem.with_start_estimate`) and fit the rest
            of the budget around them; 0 (default): profile the start noise out around the
            recorded starts only (linearized). Measured on block-push (README, RESULTS): a
            smaller median error but not on every seed, so it is not the default.
        bootstrap: parametric bootstrap bias correction: after the fit, simulate this many
            data sets like the recorded ones from the fitted twin (the recorded actions
            replayed from each episode's first state, or the recording policy run again when
            ``calibrate`` gets it; observed with the noise
            :mod:`~twinloop.calib.noise` estimates at the fit), refit each from the same
            starting point, and subtract their mean shift from the fit: the bias the fit
            itself adds (noisy window starts, a policy that reacted to the noise); the
            intervals widen by the spread of that mean. 0 (default): off. Costs ``bootstrap``
            more fits (see :mod:`~twinloop.calib.bootstrap`).
        delay_steps: actuation delay (physics steps) the replay applies to the recorded
            actions; ``None`` picks the best of ``0..max_delay_steps`` at the starting point
            (a ``timing:ctrl/delay`` parameter fits a delay continuously instead).
        max_delay_steps: largest delay tried when ``delay_steps`` is ``None``.
        delay_profile: with ``delay_steps`` ``None``, after the fit (whose delay is the one
            with the smallest objective at the starting point, judged again at the
            half-budget fit) also fit with the delay held at each of the ``delay_profile``
            delays either side of it, each with the whole budget, and keep the fit that
            predicts the held-out episodes best (without any: the smallest plain training
            error). 0 (default): the first fit's delay. A delay judged at parameters that are
            off is biased toward one that absorbs their error (stronger motors answer sooner,
            as a shorter delay does); a fit at each delay lets the parameters move with it.
            Costs ``2 * delay_profile`` more fits.
        max_evals: simulation budget, in parameter vectors evaluated on all windows.
        polish_evals: after the fit (at its delay), least squares again from it within this
            many more evaluations, the Jacobian a secant over ``polish_step`` prior stds (and
            the start noise's sensitivity measured again there): the coarse secant of
            ``jac_step`` can stop short of the minimum (quadruped-walk: the objective lower at
            the truth than at the fit on 5 of 7 worlds). 0 (default): off.
        polish_step: the polish's secant, in prior stds (smaller than ``jac_step``).
        max_iter: least-squares iterations (within the budget).
        jac_step: central-difference step of the Jacobian, as a fraction of each prior std
            (large on purpose: a secant over contact roughness, see :func:`_jacobian`).
        cma_sigma: CMA-ES initial step, as a fraction of each bound width.
        cma_popsize: CMA-ES population. Larger than cma's default ``4 + 3 ln n`` (6 for two
            parameters): contact makes the objective rough, and a larger population averages
            over the roughness (block-push, 3 trajectories: median error 5.1% -> 2.8%).
        holdout_fraction: share of episodes held out for the before/after error when no
            holdout is given (0 keeps all for fitting).
        keep_if_worse: when the fit makes held-out error worse, return the starting point
            (the previous parameters) as the estimate and say so (``Posterior.kept_previous``).
        particles: posterior samples to return (the first is the estimate).
        max_rel_width: identifiability limit on the data-only 95% half-width, relative to
            ``max(|estimate|, 10% of the bound width)``.
        max_corr: |correlation| beyond which a pair is reported confounded.
        null_tol: eigenvalue ratio of the fitted curvature below which a direction is
            unconstrained.
        seed: seed of CMA-ES, the holdout split and the particles.
        acceptance: the control check of the fit on the held-out episodes
            (:class:`~twinloop.calib.acceptance.AcceptanceConfig`): its verdict is
            ``Posterior.acceptance``, and a rejected fit is not planned with; ``None``: no check.
    """

    method: str = "least_squares"
    window: int = 5
    stride: int | None = None
    start_clearance: float | None = 0.003
    start_quiet: int = 1
    pos_scale: float = 1e-3
    angle_scale: float = 5e-2
    vel_scale: float = 2e-2
    use_velocity: bool = True
    errors_in_variables: bool | None = None
    start_samples: int = 0
    start_noise: tuple[float, float, float] | None = None
    noise_from_data: bool = False
    weigh_by_noise: bool = False
    start_iterations: int = 0
    bootstrap: int = 0
    delay_steps: int | None = 0
    max_delay_steps: int = 10
    delay_profile: int = 0
    max_evals: int = 400
    polish_evals: int = 0
    polish_step: float = 0.1
    max_iter: int = 50
    jac_step: float = 0.2
    cma_sigma: float = 0.2
    cma_popsize: int | None = 16
    holdout_fraction: float = 0.0
    keep_if_worse: bool = True
    particles: int = 16
    max_rel_width: float = 0.25
    max_corr: float = 0.9
    null_tol: float = 1e-6
    seed: int = 0
    acceptance: AcceptanceConfig | None = AcceptanceConfig()

    def __post_init__(self):
        choose("calibration method", self.method, METHODS)
        ints = {"window": 1, "max_delay_steps": 0, "max_evals": 2, "polish_evals": 0, "max_iter": 1, "particles": 1,
                "seed": 0, "start_samples": 0, "start_iterations": 0, "start_quiet": 0, "bootstrap": 0,
                "delay_profile": 0}
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
        for k in ("jac_step", "polish_step"):
            object.__setattr__(self, k, number(getattr(self, k), f"{k} (prior stds)", low=0, high=10, low_open=True))
        object.__setattr__(self, "cma_sigma", number(self.cma_sigma, "cma_sigma (fraction of the bound width)",
                                                     low=0, high=1, low_open=True))
        object.__setattr__(self, "holdout_fraction", number(self.holdout_fraction, "holdout_fraction",
                                                            low=0, high=1, high_open=True))
        object.__setattr__(self, "max_corr", number(self.max_corr, "max_corr", low=0, high=1, low_open=True))
        object.__setattr__(self, "null_tol", number(self.null_tol, "null_tol", low=0, high=1, low_open=True,
                                                    high_open=True))
        if self.start_noise is not None:
            if not isinstance(self.start_noise, (tuple, list, np.ndarray)) or len(self.start_noise) != 3:
                raise TwinloopError(f"start_noise must be (position m, angle rad, velocity m/s) stds, got "
                                    f"{self.start_noise!r}")
            object.__setattr__(self, "start_noise", tuple(
                number(v, f"start_noise {what}", low=0) for v, what in zip(
                    self.start_noise, ("position (m)", "angle (rad)", "velocity (m/s)"), strict=True)))
        if isinstance(self.acceptance, dict):  # a config read back from JSON (or asdict)
            object.__setattr__(self, "acceptance", AcceptanceConfig(**self.acceptance))
        if self.acceptance is not None and not isinstance(self.acceptance, AcceptanceConfig):
            raise TwinloopError(f"acceptance must be an AcceptanceConfig or None, got {type(self.acceptance).__name__}")
        for k in ("use_velocity", "errors_in_variables", "keep_if_worse", "noise_from_data", "weigh_by_noise"):
            v = getattr(self, k)
            if not isinstance(v, (bool, np.bool_)) and not (k == "errors_in_variables" and v is None):
                raise TwinloopError(f"{k} must be True or False{' or None' * (k == 'errors_in_variables')}, got {v!r}")
        if self.weigh_by_noise and self.start_noise is None:
            raise TwinloopError("weigh_by_noise needs the noise of the recorded states: give start_noise (position m, "
                                "angle rad, velocity m/s) stds, e.g. the sensors' specification")


def _error_and_noise(task: Task, train, x0, twin, cfg: CalibConfig) -> tuple[StateError, np.ndarray]:
    """The fit's state error (weighed by the recorded noise with ``cfg.weigh_by_noise``) and
    that noise (:func:`~twinloop.calib.noise.recorded_noise`)."""
    error = StateError.for_task(task, train, cfg.pos_scale, cfg.angle_scale, cfg.vel_scale, cfg.use_velocity)
    noise = recorded_noise(task, train, x0, twin, cfg)
    return (error.in_units(noise) if cfg.weigh_by_noise else error), noise


def calibrate(task: Task, episodes: Sequence, space: ParamSpace | None = None, method: str | None = None,
              *, holdout: Sequence | None = None, config: CalibConfig | None = None, x0=None, twin=None,
              progress: Callable[[int, float], None] | None = None,
              policy: Callable[[int], Callable[[np.ndarray, int], np.ndarray]] | None = None) -> Posterior:
    """Fit ``space`` (default ``task.param_space()``) to recorded ``episodes``.

    Args:
        task: the task the episodes were recorded on (model, substeps, obs -> state).
        episodes: recorded episodes (see :func:`~twinloop.calib.windows.as_trajectories`).
        space: the parameters to fit.
        method: overrides ``config.method``.
        holdout: episodes kept out of the fit for the before/after error (default: a
            ``config.holdout_fraction`` split of ``episodes``).
        config: :class:`CalibConfig`.
        x0: ``(n,)`` starting point, the previous parameters (default: the space's nominal
            values).
        twin: a twin of ``task.model`` with ``rollout_many`` over ``space`` (default: a new
            CPU MuJoCo twin).
        progress: ``f(n_evals, best_objective)`` after every batch of evaluations.
        policy: with ``config.bootstrap``, the policy that recorded each episode, by the
            episode's index (``policy(index) -> f(obs, tick) -> action``, e.g.
            ``lambda i: task.excitation(i)`` for excitation episodes recorded with seed ``i``
            from the world's reset for that seed): the simulated data sets then run it closed loop,
            reacting to their own noise as the recording did; ``None``: they replay the actions.

    Returns:
        The :class:`Posterior`.
    """
    t_start = time.perf_counter()
    cfg = replace(config or CalibConfig(), **({} if method is None else {"method": method}))
    space = _space_to_fit(task, space, cfg)
    x0 = space.nominal if x0 is None else space.check(np.asarray(x0, dtype=float), "x0")
    train, held = _train_and_holdout(task, episodes, holdout, cfg)
    twin = _twin_for(task, space, twin)
    error, noise = _error_and_noise(task, train, x0, twin, cfg)
    window_problem = partial(_window_problem, task, twin, cfg, error, space, noise)
    problem, x, n_fit, eiv = _fit_and_delay(window_problem, train, held, cfg, x0, progress)
    problem, x, n_fit = polish(problem, x, n_fit, cfg, progress)
    bias, bias_cov, n_boot = _bootstrap(task, problem, train, x, x0, twin, cfg, policy, window_problem)
    corrected = np.clip(x - bias, space.low, space.high)
    local = Objective(problem)  # the posterior's local fit is simulated outside the fitting budget
    r0, r_fit = problem.residuals(np.stack([x0, corrected]), whiten=False)  # plain state errors, before/after
    post = summarize(local, x, space, jac_step=cfg.jac_step, null_tol=cfg.null_tol, max_rel_width=cfg.max_rel_width,
                     max_corr=cfg.max_corr, particles=cfg.particles, seed=cfg.seed)
    hold_err = _holdout_error(window_problem, held, problem.delay, x0, corrected)
    kept = cfg.keep_if_worse and hold_err[1] > hold_err[0]
    acceptance = None if cfg.acceptance is None else (  # the fit itself, whatever keep_if_worse returns
        control_check(task, held, twin, corrected, x0, problem.delay, 0.0, cfg.acceptance))
    estimate = x0.copy() if kept else corrected
    if kept or cfg.bootstrap:
        recentre(post, estimate, bias_cov, space, cfg.particles, cfg.seed)
    return Posterior(
        names=space.names, estimate=estimate, low=space.low, high=space.high, method=cfg.method,
        train_error=(_rms(r0), _rms(r_fit)), holdout_error=hold_err, n_evals=n_fit,
        sim_steps=n_fit * problem.steps_per_eval, posterior_evals=local.n_evals, delay_steps=int(problem.delay),
        n_windows=sum(len(w) for w in problem.windows), n_transitions=sum(t.ticks for t in train),
        seconds=time.perf_counter() - t_start, x0=x0, kept_previous=bool(kept), fitted=x.copy(),
        errors_in_variables=bool(eiv), bias=bias if cfg.bootstrap else np.zeros(0), bootstrap_evals=n_boot,
        acceptance=acceptance, timestep=float(twin.dt), **post,
    )


def _fit_and_delay(window_problem, train, held, cfg: CalibConfig, x0, progress):
    """The fit at the given (or jointly estimated) delay; with ``cfg.delay_profile`` the
    delays around it fitted too, keeping the one that predicts ``held`` best."""
    fit = _fit(window_problem(train, cfg.delay_steps or 0), cfg, x0, progress)
    if cfg.delay_steps is None and cfg.delay_profile:
        fit = _profile_delay(window_problem, train, held, cfg, x0, fit)
    return fit


def _train_and_holdout(task: Task, episodes: Sequence, holdout: Sequence | None, cfg: CalibConfig):
    """``(train, held)`` trajectories: ``episodes`` and ``holdout``, or a split of ``episodes``."""
    trajs = as_trajectories(task, episodes)
    if holdout is None:
        return split_episodes(trajs, cfg.holdout_fraction, cfg.seed)
    return trajs, (as_trajectories(task, holdout) if len(holdout) else [])


def _window_problem(task: Task, twin, cfg: CalibConfig, error: StateError, space: ParamSpace, noise,
                    data: Sequence[Trajectory], delay) -> WindowProblem:
    """The windows of ``data`` under a fit's error, space, start samples and start ``noise``."""
    return WindowProblem(task, twin, _windows(task, data, cfg), error, space, delay,
                         start_samples=cfg.start_samples, start_noise=noise)


def _profile_delay(window_problem, train: Sequence[Trajectory], held: Sequence[Trajectory], cfg: CalibConfig,
                   x0: np.ndarray, first: tuple) -> tuple[WindowProblem, np.ndarray, int, bool]:
    """``first`` (a :func:`_fit` result) or the fit at one of the ``cfg.delay_profile`` delays
    either side of its delay, whichever predicts ``held`` best (plain RMS state error; without
    held-out episodes, the training data's); the evaluations count every fit."""
    def score(fit) -> float:
        problem, x = fit[0], fit[1]
        if held:
            return _holdout_error(window_problem, held, problem.delay, x, x)[1]
        return _rms(problem.residuals(x[None], whiten=False))

    d0 = int(first[0].delay)
    fits = [first]
    for d in range(d0 - cfg.delay_profile, d0 + cfg.delay_profile + 1):
        if d != d0 and 0 <= d <= cfg.max_delay_steps:
            fits.append(_fit(window_problem(train, d), replace(cfg, delay_steps=d), x0, None))
    best = min(fits, key=score)
    return best[0], best[1], sum(f[2] for f in fits), best[3]


def _holdout_error(window_problem, held: Sequence[Trajectory], delay, x0: np.ndarray,
                   x: np.ndarray) -> tuple[float, float]:
    """RMS error on the ``held`` trajectories at ``x0`` and at ``x`` (``nan`` without any)."""
    if not held:
        return float("nan"), float("nan")
    hr = window_problem(held, delay).residuals(np.stack([x0, x]))
    return _rms(hr[0]), _rms(hr[1])


def _twin_for(task: Task, space: ParamSpace, twin):
    """``twin`` (default: a new CPU MuJoCo twin of ``task.model``), checked to vary ``space``."""
    if twin is None:
        return make_twin("mujoco", task.model, space)
    if list(twin.param_space.names) != space.names:
        raise TwinloopError(f"twin varies {twin.param_space.names} but calibration fits {space.names}")
    return twin


def _space_to_fit(task: Task, space: ParamSpace | None, cfg: CalibConfig) -> ParamSpace:
    """``space`` (default ``task.param_space()``), checked to hold something ``cfg`` can fit."""
    space = space if space is not None else task.param_space()
    if len(space) == 0:
        raise TwinloopError("the parameter space is empty: nothing to calibrate")
    if cfg.bootstrap and space.has_signals:
        raise TwinloopError("bootstrap bias correction simulates model parameters only; fit sensor and timing "
                            "parameters with bootstrap=0")
    return space


def _bootstrap(task: Task, problem: WindowProblem, train: Sequence[Trajectory], x: np.ndarray, x0: np.ndarray,
               twin, cfg: CalibConfig, policy, window_problem) -> tuple[np.ndarray, np.ndarray, int]:
    """``(bias, its covariance, evaluations)`` of the fit ``x`` by ``cfg.bootstrap`` refits of
    data simulated at ``x`` with the noise the recorded data show there (replayed, or run
    closed loop under ``policy``); ``window_problem(data, delay)`` builds each refit's problem.
    Zeros without ``cfg.bootstrap``."""
    if not cfg.bootstrap:
        return np.zeros(len(x)), np.zeros((len(x), len(x))), 0
    if policy is None:
        std = estimate_state_noise(task, train, x, problem.space, int(problem.delay), twin, seed=cfg.seed)

        def simulate(sign: float, rng: np.random.Generator) -> list[Trajectory]:
            return simulate_like(problem, train, x, sign * std, rng)
    else:
        obs_std = estimate_obs_noise(task, train, x, problem.space, int(problem.delay), twin, seed=cfg.seed)

        def simulate(sign: float, rng: np.random.Generator) -> list[Trajectory]:
            return simulate_closed_loop(problem, train, x, sign * obs_std, policy, rng)
    refit_cfg = replace(cfg, delay_steps=int(problem.delay), bootstrap=0)

    def refit(data: list[Trajectory]) -> tuple[np.ndarray, int]:
        return _fit(window_problem(data, problem.delay), refit_cfg, x0, None)[1:3]  # the whole fit again, from where it started

    return bootstrap_bias(x, cfg.bootstrap, simulate, refit, cfg.seed)


def _fit(problem: WindowProblem, cfg: CalibConfig, x0: np.ndarray,
         progress: Callable[[int, float], None] | None) -> tuple[WindowProblem, np.ndarray, int, bool]:
    """One fit of ``problem`` from ``x0`` within ``cfg.max_evals``: the delay (when not given)
    and errors in variables judged at ``x0``, then again at the half-budget fit. Returns the
    final problem, the fit, the evaluations spent and whether errors in variables was on."""
    space = problem.space
    fit = METHODS[cfg.method]
    delays = list(range(0, min(cfg.max_delay_steps, cfg.window * problem.substeps - 1) + 1))
    spent = 0
    if cfg.delay_steps is None:
        d, n = best_delay(problem, x0, delays)
        problem, spent = problem.with_delay(d), spent + n
    eiv = cfg.errors_in_variables
    if eiv is not False:
        later = problem.start_estimate_cost(cfg.start_iterations) if cfg.start_iterations else problem.start_noise_cost
        eiv = eiv or spent + problem.start_noise_cost + later <= cfg.max_evals
    if eiv:
        if spent + problem.start_noise_cost + later > cfg.max_evals:
            raise TwinloopError(
                f"max_evals={cfg.max_evals} is too small for errors in variables: measuring how each window "
                f"responds to its start costs {problem.start_noise_cost} evaluations, and again {later} at the "
                f"half-budget fit (start_iterations={cfg.start_iterations}); raise max_evals to at least "
                f"{spent + problem.start_noise_cost + later} or set errors_in_variables=False"
            )
        problem, spent = _with_starts(problem, x0, cfg), spent + _start_cost(problem, cfg)
    start = x0
    if cfg.delay_steps is None or eiv:
        # the delay and the start-noise sensitivity are judged at x0, which may be off: fit with
        # half the budget, judge them again at that fit, and spend the rest from there
        first = Objective(problem, (cfg.max_evals + spent) // 2 - spent, progress, spent)
        _spend(fit, first, x0, space, cfg)
        spent += first.n_evals
        x1 = first.best_x if first.best_x is not None else x0
        if cfg.delay_steps is None:
            d, n = best_delay(problem, x1, delays)
            problem, spent = problem.with_delay(d), spent + n
        if eiv and spent + _start_cost(problem, cfg) < cfg.max_evals:
            problem, spent = _with_starts(problem, x1, cfg), spent + _start_cost(problem, cfg)
        start = x1
    fn = Objective(problem, max(cfg.max_evals - spent, 2), progress, spent)
    fn(np.unique(np.stack([x0, start]), axis=0))  # the starting points are always candidates
    _spend(fit, fn, fn.best_x, space, cfg)
    return problem, fn.best_x, spent + fn.n_evals, bool(eiv)


def _spend(fit, fn: Objective, x0: np.ndarray, space: ParamSpace, cfg: CalibConfig) -> None:
    """Run one method until it stops or the budget runs out (the best point seen stands)."""
    try:
        fit(fn, x0, space, cfg)
    except BudgetSpent:
        pass


def _with_starts(problem: WindowProblem, x: np.ndarray, cfg: CalibConfig) -> WindowProblem:
    """Errors in variables at ``x``: the start sensitivity first; once a fit has moved off the
    starting point (the problem carries a sensitivity), with ``start_iterations > 0`` the
    starts estimated there and the sensitivity measured again. Never at the starting point:
    there the starts would absorb the parameters' own error."""
    if problem.start_jac is None or not cfg.start_iterations:
        return problem.with_start_noise(x)
    return problem.with_start_estimate(x, cfg.start_iterations)


def _start_cost(problem: WindowProblem, cfg: CalibConfig) -> int:
    """Evaluations :func:`_with_starts` spends at most."""
    if problem.start_jac is None or not cfg.start_iterations:
        return problem.start_noise_cost
    return problem.start_estimate_cost(cfg.start_iterations)


def _windows(task: Task, trajs: Sequence[Trajectory], cfg: CalibConfig) -> list[Windows]:
    ok = None
    if cfg.start_clearance is not None:
        ok = [quiet_starts(free_starts(task.model, t.states, cfg.start_clearance), cfg.start_quiet) for t in trajs]
    return make_windows(trajs, cfg.window, cfg.stride, ok)


def _rms(r: np.ndarray) -> float:
    return float(np.sqrt(np.mean(r**2))) if r.size else float("nan")


__all__ = ["METHODS", "CalibConfig", "Posterior", "calibrate"]
