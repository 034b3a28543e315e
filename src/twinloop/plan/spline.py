"""Plans: action sequences stored as spline knots over the horizon.

A plan has N knots at times ``linspace(0, horizon, N)``. The world receives one action per
control tick and holds it (zero-order hold), so the twin does the same: the spline is
evaluated at the H tick times and each value is held for ``substeps`` physics steps.
Evaluation is a fixed linear map of the knots (``W @ knots``), so a batch of K plans is one
matrix product.

A plan made from a per-tick action chunk (a base proposal) may keep what its N knots cannot
express as ``detail`` (``PlanBasis.plan_from_ticks``; the refiner does so with
``RefinerConfig.exact_prior``), ``(H, nu)`` per-tick actions added to the spline's: a grasp that closes
between two ticks, a fast swing. Without it the plan the refiner rehearses and sends in place
of the proposal is a smoothed copy of it, and an open-loop chunk replayed tick by tick drifts
from its own timeline one smoothing error at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.interpolate import CubicSpline

from twinloop.errors import TwinloopError, as_array, choose, number

KINDS = ("zero", "linear", "cubic")


def interpolation_matrix(knot_times: np.ndarray, t: np.ndarray, kind: str) -> np.ndarray:
    """``W`` with ``values(t) = W @ knots`` for the given spline kind; shape ``(len(t), N)``.

    Times past the last knot hold the last value (no extrapolation).
    """
    choose("spline kind", kind, KINDS)
    n = len(knot_times)
    t = np.clip(t, knot_times[0], knot_times[-1])
    if n == 1:
        return np.ones((len(t), 1))
    if kind == "zero":
        idx = np.clip(np.searchsorted(knot_times, t, side="right") - 1, 0, n - 1)
        return np.eye(n)[idx]
    if kind == "linear":
        return np.stack([np.interp(t, knot_times, e) for e in np.eye(n)], axis=1)
    if n < 3:
        return interpolation_matrix(knot_times, t, "linear")
    # a clamped cubic is linear in the knot values, so its matrix is the image of the identity
    return CubicSpline(knot_times, np.eye(n), bc_type="clamped")(t)


@dataclass(frozen=True)
class PlanSpec:
    """How a plan is laid out in time.

    Attributes:
        horizon_ticks: H, control ticks covered by the plan.
        control_period: seconds per tick.
        substeps: physics steps per tick.
        n_knots: N spline knots over the horizon.
        kind: ``zero`` | ``linear`` | ``cubic``.
        low, high: ``(nu,)`` action bounds; an action whose bounds are equal is held at that
            value (never sampled), e.g. an arm's tool orientation while a task moves only its
            position.
        binary: indices of actions that are open/closed commands (a pinch gripper's grasp):
            every action the plan yields there (rehearsed and sent) is ``low`` below the middle
            of its range and ``high`` from the middle up (:meth:`bound`); the knots and the
            samples around them stay continuous, thresholded as a gripper command is. ``()``:
            none.
    """

    horizon_ticks: int
    control_period: float
    substeps: int
    n_knots: int
    kind: str
    low: np.ndarray
    high: np.ndarray
    binary: tuple[int, ...] = ()

    def __post_init__(self):
        choose("spline kind", self.kind, KINDS)
        for k in ("horizon_ticks", "substeps", "n_knots"):
            object.__setattr__(self, k, number(getattr(self, k), k, low=1, integer=True))
        object.__setattr__(self, "control_period", number(self.control_period, "control_period", low=0, low_open=True))
        lo, hi = as_array(self.low, "action low"), as_array(self.high, "action high")
        if lo.shape != hi.shape or lo.ndim != 1 or np.any(lo > hi) or np.all(lo == hi):
            raise TwinloopError(f"action bounds need low <= high (low < high for at least one action), same shape (nu,), got {lo} and {hi}")
        object.__setattr__(self, "low", lo)
        object.__setattr__(self, "high", hi)
        if not isinstance(self.binary, (tuple, list)):
            raise TwinloopError(f"binary must be a tuple of action indices, got {self.binary!r}")
        binary = tuple(number(i, "binary (action index)", low=0, high=len(lo) - 1, integer=True) for i in self.binary)
        if len(set(binary)) != len(binary) or any(lo[i] == hi[i] for i in binary):
            raise TwinloopError(f"binary must name distinct actions with low < high (nu={len(lo)}), got {self.binary}")
        object.__setattr__(self, "binary", binary)

    def bound(self, actions: np.ndarray) -> np.ndarray:
        """``(..., nu)`` actions clipped to the bounds, the :attr:`binary` ones snapped to
        ``low`` or ``high`` at the middle of their range."""
        a = np.clip(actions, self.low, self.high)
        if self.binary:
            b = list(self.binary)
            a[..., b] = np.where(a[..., b] >= (self.low[b] + self.high[b]) / 2, self.high[b], self.low[b])
        return a

    @property
    def nu(self) -> int:
        return len(self.low)

    @property
    def horizon(self) -> float:
        return self.horizon_ticks * self.control_period

    @property
    def knot_times(self) -> np.ndarray:
        # the last tick starts at (H-1) * period; knots span the ticks, not the final instant
        return np.linspace(0.0, (self.horizon_ticks - 1) * self.control_period, self.n_knots)

    @property
    def tick_times(self) -> np.ndarray:
        return np.arange(self.horizon_ticks) * self.control_period

    def tick_matrix(self) -> np.ndarray:
        """``(H, N)`` map from knots to the action at each tick."""
        return interpolation_matrix(self.knot_times, self.tick_times, self.kind)

    def shift_matrix(self, dt: float) -> np.ndarray:
        """``(N, N)`` map from knots to the knots of the same plan started ``dt`` later."""
        return interpolation_matrix(self.knot_times, self.knot_times + dt, self.kind)

    def fit_matrix(self) -> np.ndarray:
        """``(N, H)`` least-squares map from per-tick actions to knots."""
        return np.linalg.pinv(self.tick_matrix())


class PlanBasis:
    """Precomputed maps for one :class:`PlanSpec`: knots -> tick actions -> physics controls."""

    def __init__(self, spec: PlanSpec):
        self.spec = spec
        self.W = spec.tick_matrix()
        self.shift = spec.shift_matrix(spec.control_period)
        self.fit = spec.fit_matrix()

    def ticks(self, knots: np.ndarray, detail: np.ndarray | None = None) -> np.ndarray:
        """``(..., N, nu)`` knots (plus ``(H, nu)`` per-tick ``detail``, see :class:`Plan`) ->
        ``(..., H, nu)`` actions per tick, within bounds (:meth:`PlanSpec.bound`)."""
        a = np.einsum("hn,...nu->...hu", self.W, knots)
        if detail is not None:
            a = a + detail
        return self.spec.bound(a)

    def controls(self, knots: np.ndarray, detail: np.ndarray | None = None) -> np.ndarray:
        """``(K, N, nu)`` knots (plus ``(H, nu)`` detail) -> ``(K, H*substeps, nu)`` controls per
        physics step."""
        return np.repeat(self.ticks(knots, detail), self.spec.substeps, axis=-2)

    def knots_from_ticks(self, actions: np.ndarray) -> np.ndarray:
        """``(H', nu)`` per-tick actions (padded/truncated to H by holding) -> ``(N, nu)`` knots."""
        a = self.horizon_chunk(actions)
        if self.spec.kind == "zero" and self.spec.n_knots == self.spec.horizon_ticks:
            return a
        return np.clip(self.fit @ a, self.spec.low, self.spec.high)

    def horizon_chunk(self, actions: np.ndarray) -> np.ndarray:
        """``(H', nu)`` per-tick actions -> ``(H, nu)``: held past their end, cut at H, clipped."""
        a = as_array(actions, "actions")
        if a.ndim != 2 or a.shape[1] != self.spec.nu:
            raise TwinloopError(f"action chunk must have shape (H, {self.spec.nu}), got {a.shape}")
        H = self.spec.horizon_ticks
        if len(a) < H:
            a = np.concatenate([a, np.repeat(a[-1:], H - len(a), axis=0)])
        return np.clip(a[:H], self.spec.low, self.spec.high)

    def plan_from_ticks(self, actions: np.ndarray) -> Plan:
        """The plan that sends exactly the ``(H', nu)`` per-tick actions (held to the horizon):
        their least-squares knots, and the rest as ``detail``."""
        a = self.horizon_chunk(actions)
        knots = self.knots_from_ticks(a)
        return Plan(knots, self.spec, a - self.W @ knots)


@dataclass(frozen=True)
class Plan:
    """An action sequence: ``knots (N, nu)`` under a :class:`PlanSpec`, plus optional per-tick
    ``detail (H, nu)`` added to the spline's actions (what the knots of a chunk it was made
    from cannot express; ``None``: the spline alone)."""

    knots: np.ndarray
    spec: PlanSpec
    detail: np.ndarray | None = None

    def actions(self) -> np.ndarray:
        """``(H, nu)`` action per control tick."""
        return PlanBasis(self.spec).ticks(self.knots, self.detail)

    def first_action(self) -> np.ndarray:
        return self.actions()[0]

    def shifted(self, ticks: float = 1) -> Plan:
        """The same plan started ``ticks`` control periods later (warm start for the next tick;
        fractional for an asynchronous planner whose plans start between ticks)."""
        S = self.spec.shift_matrix(self.spec.control_period * ticks)
        knots = np.clip(S @ self.knots, self.spec.low, self.spec.high)
        if self.detail is None:
            return replace(self, knots=knots)
        # a plan with detail sends exactly its own actions shifted (per tick, linear between
        # ticks, the last held): the detail is what the shifted knots leave out of them
        a = self.actions()
        at = np.arange(self.spec.horizon_ticks) + ticks
        later = np.stack([np.interp(at, np.arange(len(a)), col) for col in a.T], axis=1)
        return replace(self, knots=knots, detail=later - self.spec.tick_matrix() @ knots)

    @staticmethod
    def constant(spec: PlanSpec, action) -> Plan:
        a = np.clip(as_array(action, "action", (spec.nu,)), spec.low, spec.high)
        return Plan(np.tile(a, (spec.n_knots, 1)), spec)
