"""Named physical parameters of a twin: where they live in the model, their bounds and prior.

A parameter addresses one or more model fields with strings such as::

    geom:block/friction[0]      sliding friction of geom "block"
    body:block/mass             mass of body "block" (inertia scaled with it, see below)
    dof:block_x/damping         damping of the dofs of joint "block_x" (all 3 of a ball joint)
    jnt:hinge/stiffness         joint stiffness
    actuator:px/kp              position-actuator stiffness (gainprm[0] and biasprm[1])
    actuator:px/kv              position-actuator damping (biasprm[2])
    actuator:px/gear[0]         any actuator_* field
    flex:cloth/friction[0]      any flex_* field of flex "cloth" (damping, radius, friction ...)
    flex:cloth/mass             total mass of the flex's vertex bodies (each scaled, inertia too)
    flex:cloth/young            Young's modulus (Pa) of a 2D flex
    flex:cloth/thickness        shell thickness (m) of a 2D flex (its stiffness, not its radius)

Changing a mass means the body keeps its density distribution: ``body_inertia`` is scaled by the
same ratio. Every inertial change is followed by ``mj_setConst`` so derived constants
(``body_subtreemass``, ``dof_invweight0``, ``actuator_acc0`` ...) are never stale.

Changing a primitive geom's ``size`` refreshes its bounding radius and box (``geom_rbound``,
``geom_aabb``), which collision detection prunes with.

Flex materials are compiled into derived arrays: the stretching stiffness ``flex_stiffness`` is
proportional to ``E t`` and the bending stiffness ``flex_bending`` to ``E t^3`` (``E`` Young's
modulus, ``t`` thickness), and the discrete integrator's constant factor ``efm0_L`` depends on
bending, damping and mass (``mj_setConst`` recomputes it). The model keeps no ``E`` or ``t``, so a
scene whose flex materials are parameters records them first (:func:`record_flex_materials`, as
custom numerics ``flex:NAME/young`` and ``flex:NAME/thickness``); a write rescales the derived
arrays by new / recorded and updates the record. This equals recompiling (tests compare).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, as_array, number

_ADDRESS = re.compile(r"^(geom|body|dof|jnt|actuator|flex):([^/]+)/([a-z_0-9]+)(?:\[(\d+)\])?$")
_OBJ = {
    "geom": mujoco.mjtObj.mjOBJ_GEOM,
    "body": mujoco.mjtObj.mjOBJ_BODY,
    "dof": mujoco.mjtObj.mjOBJ_JOINT,
    "jnt": mujoco.mjtObj.mjOBJ_JOINT,
    "actuator": mujoco.mjtObj.mjOBJ_ACTUATOR,
    "flex": mujoco.mjtObj.mjOBJ_FLEX,
}
_SAMEFRAME_BODY = int(mujoco.mjtSameFrame.mjSAMEFRAME_BODY)
_INERTIAL = {("body", "mass"), ("body", "inertia"), ("body", "ipos"), ("dof", "armature")}
_JOINT_DOFS = {mujoco.mjtJoint.mjJNT_FREE: 6, mujoco.mjtJoint.mjJNT_BALL: 3,
               mujoco.mjtJoint.mjJNT_SLIDE: 1, mujoco.mjtJoint.mjJNT_HINGE: 1}
_FLEX_MATERIAL = ("young", "thickness")  # rescale derived arrays; their values live in numerics
_PRIMITIVES = {mujoco.mjtGeom.mjGEOM_SPHERE, mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_CYLINDER,
               mujoco.mjtGeom.mjGEOM_BOX, mujoco.mjtGeom.mjGEOM_ELLIPSOID}


def record_flex_materials(spec: mujoco.MjSpec) -> mujoco.MjSpec:
    """Record every 2D flex's Young's modulus and thickness in ``spec`` as custom numerics
    ``flex:NAME/young`` and ``flex:NAME/thickness`` (what ``flex:NAME/young`` and
    ``flex:NAME/thickness`` parameters rescale from); returns ``spec``, to compile."""
    for f in spec.flexes:
        if f.dim == 2 and f.name:
            for fld in _FLEX_MATERIAL:
                spec.add_numeric(name=f"flex:{f.name}/{fld}", data=[float(getattr(f, fld))])
    return spec


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
                    f"with KIND one of {', '.join(_OBJ)}"
                )
        if not self.low < self.high:
            raise TwinloopError(f"param {self.name!r}: need finite low < high, got [{self.low}, {self.high}]")
        if not self.low <= self.nominal <= self.high:
            raise TwinloopError(f"param {self.name!r}: nominal {self.nominal} outside [{self.low}, {self.high}]")

    @property
    def std(self) -> float:
        return self.prior_std if self.prior_std is not None else (self.high - self.low) / 4


@dataclass(frozen=True)
class _Slot:
    kind: str
    field: str
    attr: str  # the model field written; "" for a derived flex quantity (mass, young, thickness)
    row: int | slice  # a slice: the dofs of a multi-dof joint
    col: int | None


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

    def subset(self, names: Sequence[str]) -> ParamSpace:
        """The parameters named in ``names``, in that order."""
        by = {p.name: p for p in self.params}
        missing = [n for n in names if n not in by]
        if missing:
            raise TwinloopError(f"unknown parameter(s) {missing}; this space has {self.names}")
        return ParamSpace(tuple(by[n] for n in names))

    def with_nominal(self, values) -> ParamSpace:
        """A copy whose nominal values are ``values`` (e.g. a calibrated estimate)."""
        v = self.check(values)
        return ParamSpace(tuple(Param(p.name, p.targets, p.low, p.high, float(x), p.prior_std) for p, x in zip(self.params, v)))

    def check(self, values, name: str = "params") -> np.ndarray:
        """Validate a value vector ``(n,)`` or batch ``(P, n)``: shape, finiteness and bounds."""
        v = as_array(values, name)
        if v.shape[-1] != len(self) or v.ndim not in (1, 2):
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

    # -- model access ----------------------------------------------------------------------

    def check_model(self, model: mujoco.MjModel) -> None:
        """Raise if any address does not exist in ``model`` (checked before any rollout)."""
        self._slots(model)

    def _slots(self, model: mujoco.MjModel) -> list[list[_Slot]]:
        out = []
        for p in self.params:
            slots = []
            for t in p.targets:
                kind, obj, fld, idx = _ADDRESS.match(t).groups()
                oid = mujoco.mj_name2id(model, _OBJ[kind], obj)
                if oid < 0:
                    raise TwinloopError(f"param {p.name!r}: no {kind} named {obj!r} in the model ({t})")
                col = None if idx is None else int(idx)
                row = oid
                if kind == "actuator" and fld in ("kp", "kv"):
                    attr = "actuator_gainprm" if fld == "kp" else "actuator_biasprm"
                    col = 0 if fld == "kp" else 2
                elif kind == "flex" and fld in (*_FLEX_MATERIAL, "mass"):
                    if fld in _FLEX_MATERIAL and model.flex_dim[oid] != 2:
                        raise TwinloopError(f"param {p.name!r}: {fld} is supported for 2D flexes only ({t})")
                    if fld in _FLEX_MATERIAL and mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_NUMERIC, f"flex:{obj}/{fld}") < 0:
                        raise TwinloopError(f"param {p.name!r}: the model records no {fld} of flex {obj!r}; "
                                            f"compile it from a spec passed through record_flex_materials ({t})")
                    slots.append(_Slot(kind, fld, "", row, None))  # no field: _flex_read/_flex_write
                    continue
                elif kind == "geom" and fld == "size" and mujoco.mjtGeom(model.geom_type[oid]) not in _PRIMITIVES:
                    raise TwinloopError(f"param {p.name!r}: only a primitive geom's size can be a parameter ({t})")
                elif kind == "dof":  # every dof of the joint (3 for a ball, 6 for a free joint)
                    n = _JOINT_DOFS[mujoco.mjtJoint(model.jnt_type[oid])]
                    attr, row = f"dof_{fld}", slice(int(model.jnt_dofadr[oid]), int(model.jnt_dofadr[oid]) + n)
                else:
                    attr = f"{kind}_{fld}"
                if not hasattr(model, attr):
                    raise TwinloopError(f"param {p.name!r}: model has no field {attr!r} ({t})")
                arr = getattr(model, attr)
                if arr.ndim == 2 and col is None and arr.shape[1] > 1:
                    raise TwinloopError(f"param {p.name!r}: {attr} has {arr.shape[1]} columns; give an index like {t}[0]")
                if kind == "body" and fld == "ipos" and model.body_sameframe[oid] == _SAMEFRAME_BODY:
                    # MuJoCo then skips ipos (a simple body cannot even be refreshed), and a GPU
                    # twin compiles that flag in: every particle must share it
                    raise TwinloopError(f"param {p.name!r}: body {obj!r} has its centre of mass at its own origin, which "
                                        f"MuJoCo compiles as fixed ({t}); give the body an <inertial pos=...> off its origin")
                if col is not None and (arr.ndim == 1 or col >= arr.shape[1]):
                    raise TwinloopError(f"param {p.name!r}: index [{col}] out of range for {attr} ({t})")
                slots.append(_Slot(kind, fld, attr, row, col))
            out.append(slots)
        return out

    def read(self, model: mujoco.MjModel) -> np.ndarray:
        """The current values of the parameters in ``model`` (first target of each)."""
        vals = []
        for slots in self._slots(model):
            s = slots[0]
            if not s.attr:
                vals.append(_flex_read(model, s))
                continue
            arr = getattr(model, s.attr)
            v = arr[s.row] if s.col is None else arr[s.row, s.col]
            vals.append(-float(v) if (s.kind, s.field) == ("actuator", "kv") else float(np.ravel(v)[0]))
        return np.array(vals)

    def apply(self, model: mujoco.MjModel, values) -> mujoco.MjModel:
        """A copy of ``model`` with ``values`` written to every target (derived constants refreshed)."""
        v = self.check(values, "param values")
        if v.ndim != 1:
            raise TwinloopError(f"apply takes one value vector ({len(self)},), got {v.shape}; use models() for a batch")
        m = _copy_model(model)
        inertial = False
        for x, slots in zip(v, self._slots(m)):
            for s in slots:
                arr = getattr(m, s.attr) if s.attr else None
                if not s.attr:
                    _flex_write(m, s, float(x))
                elif (s.kind, s.field) == ("body", "mass"):
                    old = float(arr[s.row])
                    if old > 0:
                        m.body_inertia[s.row] *= x / old
                    arr[s.row] = x
                elif (s.kind, s.field) == ("actuator", "kp"):
                    m.actuator_gainprm[s.row, 0] = x
                    m.actuator_biasprm[s.row, 1] = -x
                elif (s.kind, s.field) == ("actuator", "kv"):
                    m.actuator_biasprm[s.row, 2] = -x
                elif s.col is None:
                    arr[s.row] = x
                else:
                    arr[s.row, s.col] = x
                if (s.kind, s.field) == ("geom", "size"):
                    _refresh_geom_bounds(m, s.row)
                # flex constants (efm0_L) depend on damping, bending and mass: refresh on any flex write
                inertial |= (s.kind, s.field) in _INERTIAL or s.kind == "flex"
        if inertial:
            mujoco.mj_setConst(m, mujoco.MjData(m))
        return m

    def models(self, model: mujoco.MjModel, values) -> list[mujoco.MjModel]:
        """One model per row of ``values`` ``(P, n)``."""
        v = self.check(values, "param values")
        return [self.apply(model, row) for row in np.atleast_2d(v)]


def _flex_bodies(m: mujoco.MjModel, f: int) -> np.ndarray:
    """The bodies that carry flex ``f``'s vertices (not the world or a parent they are pinned to)."""
    ids = np.unique(m.flex_vertbodyid[m.flex_vertadr[f] : m.flex_vertadr[f] + m.flex_vertnum[f]])
    return ids[(ids > 0) & (m.body_mass[ids] > 0)]


def _span(adr: np.ndarray, total: int, f: int) -> slice:
    """The slice of flex ``f``'s entries in an array laid out by per-flex start addresses."""
    later = adr[f + 1 :]
    return slice(int(adr[f]), int(later.min()) if len(later) else total)


def _flex_read(m: mujoco.MjModel, s: _Slot) -> float:
    if s.field == "mass":
        return float(m.body_mass[_flex_bodies(m, s.row)].sum())
    name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_FLEX, s.row)
    return float(m.numeric(f"flex:{name}/{s.field}").data[0])


def _flex_write(m: mujoco.MjModel, s: _Slot, x: float) -> None:
    """Write a flex's total mass, Young's modulus or thickness (see the module docstring)."""
    old = _flex_read(m, s)
    if s.field == "mass":
        bodies = _flex_bodies(m, s.row)
        m.body_mass[bodies] *= x / old
        m.body_inertia[bodies] *= x / old
        return
    ratio = x / old
    bend = ratio if s.field == "young" else ratio**3
    m.flex_stiffness[_span(m.flex_stiffnessadr, m.nflexstiffness, s.row)] *= ratio
    m.flex_bending[_span(m.flex_bendingadr, m.nflexbending, s.row)] *= bend
    name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_FLEX, s.row)
    m.numeric(f"flex:{name}/{s.field}").data[0] = x


def _refresh_geom_bounds(m: mujoco.MjModel, g: int) -> None:
    """Bounding radius and local box of primitive geom ``g`` from its size (as the compiler sets them)."""
    r, a, b = m.geom_size[g]
    t = mujoco.mjtGeom(m.geom_type[g])
    half = {mujoco.mjtGeom.mjGEOM_SPHERE: (r, r, r), mujoco.mjtGeom.mjGEOM_CAPSULE: (r, r, r + a),
            mujoco.mjtGeom.mjGEOM_CYLINDER: (r, r, a)}.get(t, (r, a, b))
    m.geom_aabb[g, 3:] = half
    m.geom_rbound[g] = {mujoco.mjtGeom.mjGEOM_SPHERE: r, mujoco.mjtGeom.mjGEOM_CAPSULE: r + a,
                        mujoco.mjtGeom.mjGEOM_CYLINDER: float(np.hypot(r, a)),
                        mujoco.mjtGeom.mjGEOM_ELLIPSOID: max(r, a, b)}.get(t, float(np.linalg.norm([r, a, b])))


def _copy_model(model: mujoco.MjModel) -> mujoco.MjModel:
    import copy

    return copy.copy(model)
