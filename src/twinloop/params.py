"""Named physical parameters of a twin: where they live in the model, their bounds and prior.

A parameter writes one value to one or more target addresses ``OBJECT:NAME/FIELD[i]``::

    body:block/mass             mass of body "block" (rotational inertia scaled alike)
    geom:block/sliding          sliding friction of geom "block"
    pair:pusher_block/sliding   friction of one explicit contact pair only
    joint:block_x/damping       damping of joint "block_x"
    actuator:px/kp              position-servo stiffness (gainprm[0] and biasprm[1])
    timing:ctrl/delay           actuation delay (s)
    geom:block/friction[0]      any model array, raw

Every kind is one modifier in :mod:`twinloop.modifiers` (the list of kinds is there). After
an inertial change ``mj_setConst`` refreshes the derived constants (``body_subtreemass``,
``dof_invweight0``, ``actuator_acc0`` ...), so a model is never stale.
:meth:`ParamSpace.from_model` builds a space from a scene without hand-written addresses.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number
from twinloop.modifiers import (  # noqa: F401 - record_flex_materials: re-exported
    MODIFIERS,
    OBJECTS,
    Cell,
    Modifier,
    raw_cells,
    record_flex_materials,
    write_mjx,
    write_model,
)

_ADDRESS = re.compile(rf"^({'|'.join(OBJECTS)}):([^/]+)/([a-z_0-9]+)(?:\[(\d+)\])?$")

#: the parameter kinds :meth:`ParamSpace.from_model` knows, by group
KINDS = {
    "contact": ("sliding", "torsional", "rolling", "timeconst", "dampratio"),
    "actuator": ("kp", "kv", "gear", "bias", "forcelimit"),
    "joint": ("damping", "armature", "frictionloss", "stiffness"),
    "body": ("mass", "com"),
    "geometry": ("size",),
    "sensor": ("sensor_bias", "sensor_gain"),
    "timing": ("delay",),
}


@dataclass(frozen=True)
class Param:
    """One physical parameter: a value written to every target address.

    Attributes:
        name: short name used in reports (e.g. ``"block_friction"``).
        targets: model addresses the value is written to (see module docstring).
        low, high: hard bounds; values outside are an error.
        nominal: the value the nominal twin uses.
        prior_std: standard deviation of the Gaussian prior around ``nominal``
            (default: a quarter of the bound width).
    """

    name: str
    targets: tuple[str, ...]
    low: float
    high: float
    nominal: float
    prior_std: float | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TwinloopError(f"a param name must be a non-empty string, got {self.name!r}")
        if isinstance(self.targets, str):
            object.__setattr__(self, "targets", (self.targets,))
        if not isinstance(self.targets, (tuple, list)) or not self.targets:
            raise TwinloopError(f"param {self.name!r} needs a target address or a tuple of them, got {self.targets!r}")
        object.__setattr__(self, "targets", tuple(self.targets))
        for k in ("low", "high", "nominal"):
            object.__setattr__(self, k, number(getattr(self, k), f"param {self.name!r}: {k}"))
        if self.prior_std is not None:  # NaN here would make every prior sample NaN
            object.__setattr__(self, "prior_std", number(self.prior_std, f"param {self.name!r}: prior_std",
                                                         low=0, low_open=True))
        for t in self.targets:
            if not isinstance(t, str) or not _ADDRESS.match(t):
                raise TwinloopError(
                    f"param {self.name!r}: cannot parse address {t!r}; expected KIND:NAME/FIELD[i] "
                    f"with KIND one of {', '.join(OBJECTS)}"
                )
        if not self.low < self.high:
            raise TwinloopError(f"param {self.name!r}: need finite low < high, got [{self.low}, {self.high}]")
        if not self.low <= self.nominal <= self.high:
            raise TwinloopError(f"param {self.name!r}: nominal {self.nominal} outside [{self.low}, {self.high}]")

    @property
    def std(self) -> float:
        return self.prior_std if self.prior_std is not None else (self.high - self.low) / 4

    @property
    def signal(self) -> bool:
        """Acts on controls or measurements (sensor, timing), not on the model."""
        mod = _modifier(self.targets[0])[0]
        return mod is not None and mod.signal


def _modifier(address: str) -> tuple[Modifier | None, str, str, str, int | None]:
    obj, name, fld, idx = _ADDRESS.match(address).groups()
    return MODIFIERS.get((obj, fld)), obj, name, fld, None if idx is None else int(idx)


@dataclass(frozen=True)
class Target:
    """A resolved address: the modifier (``None``: a raw array) and the cells it writes."""

    modifier: Modifier | None
    cells: list[Cell]
    obj: str
    oid: int

    @property
    def set_const(self) -> bool:
        # a flex's derived constants (the discrete integrator's factor) depend on its damping too
        return self.obj == "flex" if self.modifier is None else self.modifier.set_const

    def flags(self, model: mujoco.MjModel) -> list:
        return [] if self.modifier is None else self.modifier.flags(model, self.oid)

    def values(self, x, base) -> list:
        if self.modifier is None:
            return [x] * len(base)
        if self.modifier.values_cells is not None:
            return self.modifier.values_cells(x, base, self.cells)
        return self.modifier.values(x, base)

    def read(self, model: mujoco.MjModel) -> float:
        if self.modifier is None:
            attr, idx = self.cells[0]
            return float(getattr(model, attr)[idx])
        return self.modifier.read(model, self.cells)


@dataclass(frozen=True)
class ParamSpace:
    """An ordered set of :class:`Param`; values are vectors of length ``len(space)``."""

    params: tuple[Param, ...] = field(default_factory=tuple)

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        for i, p in enumerate(self.params):
            if not isinstance(p, Param):
                raise TwinloopError(f"ParamSpace takes Param objects; params[{i}] is a {type(p).__name__}")
        names = [p.name for p in self.params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise TwinloopError(f"duplicate parameter names: {sorted(dup)}")
        for p in self.params:
            if len({Param(p.name, (t,), p.low, p.high, p.nominal).signal for t in p.targets}) > 1:
                raise TwinloopError(f"param {p.name!r} mixes signal (sensor, timing) and model targets")
        delays = [p.name for p in self.params if any(_modifier(t)[1] == "timing" for t in p.targets)]
        if len(delays) > 1:
            raise TwinloopError(f"at most one timing parameter (the actuation delay), got {delays}")

    def __len__(self) -> int:
        return len(self.params)

    def __iter__(self):
        return iter(self.params)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    @property
    def low(self) -> np.ndarray:
        return np.array([p.low for p in self.params])

    @property
    def high(self) -> np.ndarray:
        return np.array([p.high for p in self.params])

    @property
    def nominal(self) -> np.ndarray:
        return np.array([p.nominal for p in self.params])

    @property
    def prior_std(self) -> np.ndarray:
        return np.array([p.std for p in self.params])

    @property
    def has_signals(self) -> bool:
        """Whether any parameter acts on controls or measurements (sensor, timing)."""
        return any(p.signal for p in self.params)

    def subset(self, names: Sequence[str]) -> ParamSpace:
        """The parameters named in ``names``, in that order."""
        by = {p.name: p for p in self.params}
        missing = [n for n in names if n not in by]
        if missing:
            raise TwinloopError(f"unknown parameter(s) {missing}; this space has {self.names}")
        return ParamSpace(tuple(by[n] for n in names))

    def on(self, kind: str) -> list[str]:
        """Names of the parameters whose every target is an object of ``kind`` (``actuator``,
        ``geom``, ``body`` ...: the ``KIND`` of ``KIND:NAME/FIELD``)."""
        if kind not in OBJECTS:
            raise TwinloopError(f"kind must be one of {', '.join(OBJECTS)}, got {kind!r}")
        return [p.name for p in self.params if all(_ADDRESS.match(t).group(1) == kind for t in p.targets)]

    def __add__(self, other: ParamSpace) -> ParamSpace:
        return ParamSpace(self.params + tuple(other.params))

    def check(self, values, name: str = "params") -> np.ndarray:
        """Validate a value vector ``(n,)`` or batch ``(P, n)``: shape, finiteness and bounds."""
        v = as_array(values, name)
        if v.ndim not in (1, 2) or v.shape[-1] != len(self):
            raise TwinloopError(f"{name} must have shape ({len(self)},) or (P, {len(self)}) for {self.names}, got {v.shape}")
        lo, hi = self.low, self.high
        bad = (v < lo) | (v > hi)
        if bad.any():
            j = int(np.argwhere(bad)[0][-1])
            x = float(v.reshape(-1, len(self))[np.any(bad.reshape(-1, len(self)), axis=1)][0, j])
            raise TwinloopError(f"{name}: {self.params[j].name}={x:g} is outside its bounds [{lo[j]:g}, {hi[j]:g}]")
        return v

    def sample_prior(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``(n, len(self))`` draws from the Gaussian prior, clipped to the bounds."""
        if not isinstance(rng, np.random.Generator):
            raise TwinloopError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        n = number(n, "n", low=1, integer=True)
        x = self.nominal + rng.standard_normal((n, len(self))) * self.prior_std
        return np.clip(x, self.low, self.high)

    def prior_particles(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``(n, len(self))`` parameter particles for planning under the prior (domain
        randomization): the nominal values, then ``n - 1`` draws of :meth:`sample_prior` (the
        nominal takes the first draw's row, so ``n`` fixes the stream)."""
        x = self.sample_prior(rng, n)
        x[0] = self.nominal
        return x

    # -- serialization ---------------------------------------------------------------------

    def to_dict(self) -> dict:
        """JSON-ready description (names, targets, bounds, nominal, prior)."""
        return {"params": [{"name": p.name, "targets": list(p.targets), "low": p.low, "high": p.high,
                            "nominal": p.nominal, "prior_std": p.prior_std} for p in self.params]}

    @classmethod
    def from_dict(cls, d: dict) -> ParamSpace:
        if not isinstance(d, dict) or not isinstance(d.get("params"), list):
            raise TwinloopError("a parameter space dict needs a 'params' list (see ParamSpace.to_dict)")
        return cls(tuple(Param(p["name"], tuple(p["targets"]), p["low"], p["high"], p["nominal"], p.get("prior_std"))
                         for p in d["params"]))

    # -- model access ----------------------------------------------------------------------

    def check_model(self, model: mujoco.MjModel) -> None:
        """Raise if any address does not exist in ``model`` (checked before any rollout)."""
        self.resolve(model)

    def resolve(self, model: mujoco.MjModel) -> list[list[Target]]:
        """Per parameter, its resolved targets in ``model``; no model cell is written by two
        parameters (or twice by one)."""
        if not isinstance(model, mujoco.MjModel):
            raise TwinloopError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        out, seen = [], {}
        for p in self.params:
            targets = []
            for t in p.targets:
                mod, obj, name, fld, idx = _modifier(t)
                kind = OBJECTS[obj]
                oid = 0 if kind is None else mujoco.mj_name2id(model, kind, name)
                if oid < 0:
                    what = "joint" if obj in ("dof", "jnt", "sensor") else obj
                    raise TwinloopError(f"param {p.name!r}: no {what} named {name!r} in the model ({t})")
                try:
                    cells = mod.cells(model, obj, oid, idx) if mod is not None else raw_cells(obj, fld, model, oid, idx)
                except TwinloopError as exc:
                    raise TwinloopError(f"param {p.name!r}: {exc} ({t})") from None
                shared = mod is not None and mod.scales  # rescales cells other such kinds rescale too
                for c in cells:
                    if c in seen and not (shared and seen[c][1] and c[0] != "numeric_data"):
                        raise TwinloopError(f"params {seen[c][0]!r} and {p.name!r} both write {c[0]}{list(c[1])} ({t})")
                    seen[c] = (p.name, shared)
                targets.append(Target(mod, cells, obj, oid))
            out.append(targets)
        return out

    def read(self, model: mujoco.MjModel) -> np.ndarray:
        """The current values of the parameters in ``model`` (first target of each; a signal
        parameter, which no model holds, reads as its nominal value)."""
        return np.array([p.nominal if p.signal else ts[0].read(model)
                         for p, ts in zip(self.params, self.resolve(model), strict=True)])

    def apply(self, model: mujoco.MjModel, values) -> mujoco.MjModel:
        """A copy of ``model`` with ``values`` written to every target (derived constants refreshed)."""
        v = self.check(values, "param values")
        if v.ndim != 1:
            raise TwinloopError(f"apply takes one value vector ({len(self)},), got {v.shape}; use models() for a batch")
        m = copy.copy(model)
        refresh = False
        for x, targets in zip(v, self.resolve(m), strict=True):
            for t in targets:
                base = [float(getattr(m, a)[i]) for a, i in t.cells]  # as written so far: scales compose
                for (attr, idx), flag in t.flags(m):
                    getattr(m, attr)[idx] = flag
                write_model(m, t.cells, t.values(float(x), base))
                refresh |= t.set_const
        if refresh:
            mujoco.mj_setConst(m, mujoco.MjData(m))
        return m

    def models(self, model: mujoco.MjModel, values) -> list[mujoco.MjModel]:
        """One model per row of ``values`` ``(P, n)``."""
        v = self.check(values, "param values")
        return [self.apply(model, row) for row in np.atleast_2d(v)]

    def mjx_writer(self, model: mujoco.MjModel):
        """``f(mjx_model, x) -> mjx_model`` writing the model parameters ``x (n,)`` (JAX
        arrays, traceable for ``jax.jacfwd``) into an MJX model of ``model``. Derived
        constants stay nominal (MJX has no ``mj_setConst``): after a mass change
        ``body_subtreemass`` and ``dof_invweight0`` are stale, a small error in a slope only."""
        plan = []
        for i, targets in enumerate(self.resolve(model)):
            for t in targets:
                for (attr, idx), flag in t.flags(model):
                    if getattr(model, attr)[idx] != flag:
                        raise TwinloopError(f"param {self.params[i].name!r}: MJX cannot change the static {attr}; "
                                            f"compile the scene with it set (e.g. body simple='false')")
                if t.modifier is None or not t.modifier.signal:
                    plan.append((i, t, [float(getattr(model, a)[k]) for a, k in t.cells]))

        def write(mx, x):
            for i, t, base in plan:
                mx = write_mjx(mx, t.cells, t.values(x[i], base))
            return mx

        return write

    # -- signals (sensor and timing parameters) --------------------------------------------

    def delay(self, values) -> np.ndarray:
        """``(P,)`` actuation delay (s) of each row of ``values (P, n)`` (0 without a timing
        parameter)."""
        v = np.atleast_2d(np.asarray(values, dtype=float))
        for j, p in enumerate(self.params):
            if _modifier(p.targets[0])[1] == "timing":
                return v[:, j].copy()
        return np.zeros(len(v))

    def measurement(self, model: mujoco.MjModel, values) -> tuple[np.ndarray, np.ndarray]:
        """``(P, nstate)`` gain and bias of each row of ``values`` on the twin state:
        ``measured = gain * true + bias`` (sensor parameters; identity without any)."""
        v = np.atleast_2d(np.asarray(values, dtype=float))
        n = model.nq + model.nv + model.na
        gain, bias = np.ones((len(v), n)), np.zeros((len(v), n))
        for j, targets in enumerate(self.resolve(model)):
            for t in targets:
                if t.obj != "sensor":
                    continue
                qa, va = int(model.jnt_qposadr[t.oid]), model.nq + int(model.jnt_dofadr[t.oid])
                if t.modifier.field == "gain":
                    gain[:, qa] = gain[:, va] = v[:, j]
                else:
                    bias[:, qa] = v[:, j]
        return gain, bias

    # -- building a space from a scene -----------------------------------------------------

    @classmethod
    def from_model(cls, model: mujoco.MjModel, bodies: Sequence[str] | None = None,
                   kinds: Sequence[str] = ("mass", "sliding", "damping"), spread: float = 4.0) -> ParamSpace:
        """A space for ``bodies`` of ``model`` without hand-written addresses.

        Args:
            model: the scene.
            bodies: body names (default: every body that moves, i.e. neither welded to the world
                nor a mocap body).
            kinds: parameter kinds or groups of :data:`KINDS` (``"contact"``, ``"joint"`` ...).
                Per body: ``mass``, ``com`` (3 params); per geom group of a body (its colliding
                geoms, one parameter when they agree): contact kinds and ``size``; per
                explicit contact pair touching a body: contact kinds; per joint of a body:
                joint kinds and ``sensor_bias``/``sensor_gain``; per actuator driving a
                joint of a body: actuator kinds it supports; ``delay``: one.
            spread: bounds are ``[nominal / spread, nominal * spread]`` for positive
                quantities (absolute ranges for those that may be 0, see the code).

        Returns:
            The space; names like ``block_mass``, ``block_sliding``, ``block_x_damping``,
            ``pusher_block_sliding`` (a pair), ``pusher_x_kp``.
        """
        from twinloop.scene_space import scene_params  # builds Params: imports this module

        return cls(scene_params(model, bodies, kinds, spread))


__all__ = ["KINDS", "Param", "ParamSpace", "Target"]
