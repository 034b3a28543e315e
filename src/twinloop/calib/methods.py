"""Calibration methods: each minimizes ``|r(x)|^2 / 2`` of an :class:`~twinloop.calib.problem.Objective`
from a start point within its budget; the objective keeps the best point seen.

- ``least_squares``: bounded Levenberg-Marquardt / Gauss-Newton of ``mujoco.minimize`` with a
  central-difference Jacobian (all ``2n`` columns simulated in one batched rollout), restarted
  from the best point while that still helps (one restart loop, shared with ``mjx``).
- ``cma``: CMA-ES (``cma`` package) on the bound-normalized parameters; gradient-free, so it
  does not care how rough contact makes ``r(x)``.
- ``mjx``: the same least squares with a forward-mode (``jax.jacfwd``) Jacobian through MJX;
  needs the ``[gpu]`` extra; model parameters only.

Contact makes ``r(x)`` rough on small scales (a slightly different friction changes which
corner touches first), so the finite-difference slope is a secant over ``jac_step`` prior
standard deviations, not an infinitesimal difference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import cma
import numpy as np
from mujoco import minimize

from twinloop.calib.problem import BudgetSpent, Objective, WindowProblem
from twinloop.calib.windows import window_controls
from twinloop.errors import TwinloopError
from twinloop.params import ParamSpace


def fd_jacobian(fn: Objective, x: np.ndarray, space: ParamSpace, step: float) -> np.ndarray:
    """``(m, n)`` central-difference Jacobian at ``x`` with steps ``step * prior_std`` (one
    batched evaluation of ``2n`` points)."""
    n = len(x)
    h = step * space.prior_std
    X = np.clip(np.concatenate([x + np.diag(h), x - np.diag(h)]), space.low, space.high)
    R = fn(X)
    dx = X[:n].diagonal() - X[n:].diagonal()
    return ((R[:n] - R[n:]) / dx[:, None]).T


def _restarted_least_squares(fn: Objective, x0: np.ndarray, space: ParamSpace, max_iter: int,
                             jacobian: Callable[[np.ndarray], np.ndarray]) -> None:
    """``mujoco.minimize.least_squares`` restarted (fresh regularizer) from the best point
    until a restart gains nothing: contact roughness can stall it in a shallow dent."""

    def residual(x):  # mujoco.minimize: (n, k) points -> (m, k) residuals
        return fn(x.T).T

    x = x0.copy()
    while True:
        f_prev = fn.best_f
        minimize.least_squares(
            x, residual, bounds=[space.low, space.high], jacobian=lambda x, r: jacobian(x[:, 0]),
            max_iter=max_iter, verbose=0, x_scale=space.prior_std,
            mu_factor=4.0,  # the default 1.26 spends most of the budget backing off the roughness
        )
        x = fn.best_x.copy()
        if not fn.best_f < f_prev * (1 - 1e-6):
            return


def fit_least_squares(fn: Objective, x0: np.ndarray, space: ParamSpace, cfg) -> None:
    _restarted_least_squares(fn, x0, space, cfg.max_iter, lambda x: fd_jacobian(fn, x, space, cfg.jac_step))


def polish(problem: WindowProblem, x: np.ndarray, spent: int, cfg,
           progress: Callable[[int, float], None] | None = None) -> tuple[WindowProblem, np.ndarray, int]:
    """With ``cfg.polish_evals`` (a :class:`~twinloop.calib.fit.CalibConfig`): least squares
    again from the fit ``x``, its Jacobian a secant over ``cfg.polish_step`` prior stds (the
    fit's coarser ``jac_step`` secant can stop short of the minimum), the start noise's
    sensitivity measured again at ``x`` first under errors in variables. Returns the problem,
    the best point seen and the evaluations spent in all (``spent`` before the polish)."""
    if not cfg.polish_evals:
        return problem, x, spent
    if problem.start_jac is not None:
        problem, spent = problem.with_start_noise(x), spent + problem.start_noise_cost
    fn = Objective(problem, cfg.polish_evals, progress, spent)
    fn(x[None])
    try:
        fit_least_squares(fn, x, problem.space, replace(cfg, jac_step=cfg.polish_step))
    except BudgetSpent:
        pass
    return problem, fn.best_x, spent + fn.n_evals


def fit_cma(fn: Objective, x0: np.ndarray, space: ParamSpace, cfg) -> None:
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


def fit_mjx(fn: Objective, x0: np.ndarray, space: ParamSpace, cfg) -> None:
    """Least squares whose Jacobian is a forward-mode derivative (``jax.jacfwd``) through MJX.

    Forward mode carries one tangent per parameter through every solver iteration, which stays
    accurate through contact where reverse mode over many solver iterations does not. The
    residual itself (and so the line search and the fit) stays on CPU MuJoCo, the physics the
    other methods fit; MJX only supplies the local slope, with the parameters written by each
    kind's JAX form (:meth:`ParamSpace.mjx_writer`).
    """
    jac = MjxJacobian(fn.problem)
    # MJX differentiates the plain errors; whiten like the residual
    _restarted_least_squares(fn, x0, space, cfg.max_iter, lambda x: fn.problem.whitened(jac(x).T).T)


class MjxJacobian:
    """``x -> (m, n)`` Jacobian of a :class:`WindowProblem`'s plain residual by ``jax.jacfwd``
    through MJX (compiled once per problem; the first call pays the compile)."""

    def __init__(self, problem: WindowProblem):
        try:
            import jax
            import jax.numpy as jnp
            from mujoco import mjx
        except ImportError as exc:
            raise TwinloopError(
                "calibration method 'mjx' needs the [gpu] extra (jax, mujoco-mjx): "
                f"pip install 'twinloop[gpu]' ({exc})"
            ) from exc
        space = problem.space
        if space.has_signals:
            raise TwinloopError("calibration method 'mjx' fits model parameters only; fit sensor and timing "
                                "parameters with least_squares or cma")
        model = problem.twin.model
        m0 = mjx.put_model(model)
        d0 = mjx.make_data(m0)
        write = space.mjx_writer(model)
        write(m0, jnp.asarray(space.nominal))  # a static field fails here, with its name
        err = problem.error
        scale = jnp.asarray(err.scale)
        mask = np.flatnonzero(err.mask)
        hinge = jnp.asarray(err.hinge)
        groups = [(jnp.asarray(w.starts), jnp.asarray(window_controls(w, problem.substeps, problem.delay)),
                   jnp.asarray(w.targets)) for w in problem.windows]
        nq, nv, sub = model.nq, model.nv, problem.substeps

        def window(m, start, ctrl):
            d = d0.replace(qpos=start[:nq], qvel=start[nq : nq + nv])

            def step(d, u):
                d = mjx.step(m, d.replace(ctrl=u))
                return d, jnp.concatenate([d.qpos, d.qvel])

            _, traj = jax.lax.scan(step, d, ctrl)
            return traj[sub - 1 :: sub]  # state after each tick

        def residual(x):
            m = write(m0, x)
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


METHODS: dict[str, Callable] = {"least_squares": fit_least_squares, "cma": fit_cma, "mjx": fit_mjx}

__all__ = ["METHODS", "MjxJacobian", "fd_jacobian", "fit_cma", "fit_least_squares", "fit_mjx", "polish"]
