"""How each kind of physical parameter is written into a model: one modifier per kind.

An address ``OBJECT:NAME/FIELD[i]`` names a parameter's target; its ``(OBJECT, FIELD)`` picks
the modifier, which resolves ``NAME`` in a model to the *cells* it writes (model array, index)
and computes their values from the parameter ``x`` and the cells' nominal values. The value
rules use arithmetic only, so the same rule writes a NumPy ``MjModel`` in place
(:func:`write_model`) and returns a new MJX model under JAX tracing (:func:`write_mjx`): each
kind is said once, for every backend and for calibration.

Kinds (``obj:field``; units in brackets)::

    contact   geom|pair:sliding  torsional  rolling     friction coefficients (a pair's sliding
                                                        writes both tangential directions)
              geom|pair:timeconst  dampratio            solref [s], [-]
              geom|pair:solimp[i]                       impedance (raw field)
    actuator  actuator:kp  kv                           position servo gains [N/m], [N s/m]
              actuator:gear  bias  forcelimit           gear ratio, constant force [N],
                                                        symmetric force limit [N]
    joint     joint:damping  armature  frictionloss  stiffness
    body      body:mass                                 [kg], rotational inertia scaled alike
              body:com[i]                               centre of mass offset [m]
    geometry  geom:size[i]                              [m]; bounding volumes grown to match
    flex      flex:mass                                 total mass of its vertex bodies [kg]
              flex:young  thickness                     a 2D flex's Young's modulus [Pa] and
                                                        shell thickness [m] (see below)
    sensor    sensor:JOINT/bias  gain                   measured = gain * true + bias, for a
                                                        joint's position and velocity
    timing    timing:ctrl/delay                         actuation delay [s] (fractional steps
                                                        blend the neighbouring shifts)

Any other model array is addressed raw: ``geom:block/friction[0]``, ``dof:block_x/damping``
(every dof of the joint: 3 for a ball joint), ``flex:cloth/friction[0]``, ``flex:cloth/damping``, ``jnt:hinge/stiffness``, ``actuator:px/gear[0]``, ``pair:pb/margin``.

MuJoCo combines two geoms' contact parameters (friction: the larger of the two; solref: a
mix), so a geom's friction cannot be set below its partner's. An explicit contact ``pair``
(plus an ``exclude`` of the two bodies' automatic contacts) gives one contact its own values:
``pair:pusher_block/sliding`` sets pusher-block friction while ``geom:floor/sliding`` and
``geom:block/sliding`` set block-floor friction.

Flex materials are compiled into derived arrays: the stretching stiffness ``flex_stiffness`` is
proportional to ``E t`` and the bending stiffness ``flex_bending`` to ``E t^3`` (``E`` Young's
modulus, ``t`` thickness). The model keeps no ``E`` or ``t``, so a scene whose flex materials
are parameters records them first (:func:`record_flex_materials`, as custom numerics
``flex:NAME/young`` and ``flex:NAME/thickness``); a write rescales the derived arrays by new /
recorded and updates the record, so young and thickness compose (``scales``). This equals
recompiling (tests compare). The discrete integrator's constant factor depends on bending,
damping and mass: any flex write refreshes derived constants.

Inertial kinds (mass, centre of mass, armature) and size need derived constants refreshed
(``mj_setConst``; MJX has none, so there they stay nominal, and a size's bounding volumes are
grown conservatively); signal kinds (sensor, timing) write no model cell: calibration applies
them to the replayed controls and the predicted states.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mujoco
import numpy as np

from twinloop.errors import TwinloopError

OBJECTS = {
    "geom": mujoco.mjtObj.mjOBJ_GEOM,
    "pair": mujoco.mjtObj.mjOBJ_PAIR,
    "body": mujoco.mjtObj.mjOBJ_BODY,
    "joint": mujoco.mjtObj.mjOBJ_JOINT,
    "dof": mujoco.mjtObj.mjOBJ_JOINT,
    "jnt": mujoco.mjtObj.mjOBJ_JOINT,
    "actuator": mujoco.mjtObj.mjOBJ_ACTUATOR,
    "sensor": mujoco.mjtObj.mjOBJ_JOINT,  # a sensor parameter names the joint it measures
    "flex": mujoco.mjtObj.mjOBJ_FLEX,
    "timing": None,
}

Cell = tuple[str, tuple[int, ...]]  # (MjModel attribute, index into it)


@dataclass(frozen=True)
class Modifier:
    """One kind of parameter: where it writes and how its value becomes the cells' values.

    Attributes:
        objects: address kinds it serves (``geom``, ``pair`` ...).
        field: the address field (``sliding``, ``kp`` ...).
        doc: what it is, with its unit.
        cells: ``f(model, obj, id, index) -> [(attribute, index), ...]`` the cells written
            (``obj``: the address kind, ``id``: the named object's id, ``index``: the
            address's ``[i]`` or ``None``).
        values: ``f(x, base) -> values`` per cell, from the parameter and the cells' nominal
            values ``base`` (arithmetic only: it runs on NumPy and JAX arrays).
        set_const: the change needs ``mj_setConst`` (derived constants: inertia-derived
            quantities, bounding volumes).
        flags: ``f(model, id) -> [((attribute, index), value)]`` structural flags the NumPy
            form sets once (e.g. "the centre of mass is at the body origin" is no longer true);
            an MJX model must have them already.
        signal: acts on signals (controls, measurements), not on the model.
        inverse: ``f(first cell's value) -> x``, reading the parameter back from a model.
        reader: ``f(model, cells) -> x`` when the first cell alone does not say it (a sum).
        scales: the values rescale cells that other ``scales`` kinds rescale too (a flex's
            stiffness arrays): those cells may be shared, and writes compose in order.
        values_cells: ``f(x, base, cells) -> values`` instead of ``values`` when the rule
            depends on which array a cell is in.
    """

    objects: tuple[str, ...]
    field: str
    doc: str
    cells: Callable = lambda model, obj, oid, i: []
    values: Callable = lambda x, base: [x] * len(base)
    set_const: bool = False
    flags: Callable = lambda model, oid: []
    signal: bool = False
    inverse: Callable = lambda first: first
    reader: Callable | None = None
    scales: bool = False
    values_cells: Callable | None = None

    def read(self, model: mujoco.MjModel, cells: list[Cell]) -> float:
        """The parameter's value in ``model`` (from its first cell; 0 for a signal kind)."""
        if self.reader is not None:
            return float(self.reader(model, cells))
        if not cells:
            return 0.0
        attr, idx = cells[0]
        return float(self.inverse(float(getattr(model, attr)[idx])))


def _one(attr: str, col: int | None = None) -> Callable:
    return lambda model, obj, oid, i: [(attr, (oid,) if col is None else (oid, col))]


_JOINT_DOFS = {int(mujoco.mjtJoint.mjJNT_FREE): 6, int(mujoco.mjtJoint.mjJNT_BALL): 3,
               int(mujoco.mjtJoint.mjJNT_SLIDE): 1, int(mujoco.mjtJoint.mjJNT_HINGE): 1}


def joint_dofs(model: mujoco.MjModel, joint: int) -> list[int]:
    """The dof indices of ``joint`` (3 for a ball joint, 6 for a free one)."""
    adr = int(model.jnt_dofadr[joint])
    return list(range(adr, adr + _JOINT_DOFS[int(model.jnt_type[joint])]))


def _dof(attr: str) -> Callable:
    return lambda model, obj, oid, i: [(attr, (d,)) for d in joint_dofs(model, oid)]


def _indexed(attr: str) -> Callable:
    def cells(model, obj, oid, i):
        if i is None:
            raise TwinloopError(f"{attr} needs an index, e.g. [0]")
        return [(attr, (oid, i))]
    return cells


def _mass_cells(model, obj, oid, i):
    return [("body_mass", (oid,))] + [("body_inertia", (oid, k)) for k in range(3)]


def _mass_values(x, base):
    # the body keeps its density distribution: inertia scales with the mass
    ratio = x / base[0]
    return [x, base[1] * ratio, base[2] * ratio, base[3] * ratio]


def _size_cells(model, obj, oid, i):
    if i is None:
        raise TwinloopError("geom size needs an index, e.g. size[0]")
    return [("geom_size", (oid, i)), ("geom_rbound", (oid,))] + [("geom_aabb", (oid, 3 + k)) for k in range(3)]


def _size_values(x, base):
    # grow the bounding sphere and box by the same factor (a bound larger than the geom only
    # culls fewer pairs; a smaller one would miss contacts); mj_setConst makes them exact
    grow = 1.0 + (x - base[0]) / base[0] * (x > base[0])
    return [x, base[1] * grow, base[2] * grow, base[3] * grow, base[4] * grow]


def _servo_check(model, oid):
    if not (int(model.actuator_gaintype[oid]) == int(mujoco.mjtGain.mjGAIN_FIXED)
            and int(model.actuator_biastype[oid]) == int(mujoco.mjtBias.mjBIAS_AFFINE)
            and model.actuator_gainprm[oid, 0] == -model.actuator_biasprm[oid, 1]):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, oid)
        raise TwinloopError(f"actuator {name!r} is not a position servo (gainprm[0] = -biasprm[1]); kp/kv do not apply")


def _kp_cells(model, obj, oid, i):
    _servo_check(model, oid)
    return [("actuator_gainprm", (oid, 0)), ("actuator_biasprm", (oid, 1))]


def _kv_cells(model, obj, oid, i):
    _servo_check(model, oid)
    return [("actuator_biasprm", (oid, 2))]


def _forcelimit_cells(model, obj, oid, i):
    if not model.actuator_forcelimited[oid]:
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, oid)
        raise TwinloopError(f"actuator {name!r} has no force limit in the scene (forcelimited false); give it a "
                            "forcerange there before fitting one")
    return [("actuator_forcerange", (oid, 0)), ("actuator_forcerange", (oid, 1))]


def _friction(geom_col: int, pair_cols: tuple[int, ...]) -> Callable:
    # a geom holds (sliding, torsional, rolling); a pair (sliding x2, torsional, rolling x2)
    def cells(model, obj, oid, i):
        if obj == "pair":
            return [("pair_friction", (oid, c)) for c in pair_cols]
        return [("geom_friction", (oid, geom_col))]
    return cells


def _solref(col: int) -> Callable:
    return lambda model, obj, oid, i: [(f"{obj}_solref", (oid, col))]


FLEX_MATERIAL = ("young", "thickness")


def record_flex_materials(spec: mujoco.MjSpec) -> mujoco.MjSpec:
    """Record every named 2D flex's Young's modulus and thickness in ``spec`` as custom numerics
    ``flex:NAME/young`` and ``flex:NAME/thickness`` (what those parameters rescale from);
    returns ``spec``, to compile."""
    for f in spec.flexes:
        if f.dim == 2 and f.name:
            for fld in FLEX_MATERIAL:
                spec.add_numeric(name=f"flex:{f.name}/{fld}", data=[float(getattr(f, fld))])
    return spec


def _span(adr: np.ndarray, total: int, f: int) -> range:
    """Flex ``f``'s entries in an array laid out by per-flex start addresses."""
    later = adr[f + 1:]
    return range(int(adr[f]), int(later.min()) if len(later) else total)


def _flex_body_ids(model, f: int) -> np.ndarray:
    """The bodies that carry flex ``f``'s vertices (not the world or a parent they are pinned to)."""
    ids = np.unique(model.flex_vertbodyid[model.flex_vertadr[f]: model.flex_vertadr[f] + model.flex_vertnum[f]])
    return ids[(ids > 0) & (model.body_mass[ids] > 0)]


def _flex_mass_cells(model, obj, oid, i):
    return [c for b in _flex_body_ids(model, oid)
            for c in [("body_mass", (int(b),))] + [("body_inertia", (int(b), k)) for k in range(3)]]


def _flex_mass_values(x, base):
    ratio = x / sum(base[0::4])  # every vertex body's mass and inertia scale alike
    return [b * ratio for b in base]


def _flex_material_cells(fld: str) -> Callable:
    def cells(model, obj, oid, i):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_FLEX, oid)
        if int(model.flex_dim[oid]) != 2:
            raise TwinloopError(f"{fld} is supported for 2D flexes only")
        rec = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_NUMERIC, f"flex:{name}/{fld}")
        if rec < 0:
            raise TwinloopError(f"the model records no {fld} of flex {name!r}; compile it from a spec passed "
                                "through twinloop.modifiers.record_flex_materials")
        # the record first (the value read back), then the derived arrays it scales
        return ([("numeric_data", (int(model.numeric_adr[rec]),))]
                + [("flex_stiffness", (k,)) for k in _span(model.flex_stiffnessadr, model.nflexstiffness, oid)]
                + [("flex_bending", (k,)) for k in _span(model.flex_bendingadr, model.nflexbending, oid)])
    return cells


def _flex_material_values(bending_power: int) -> Callable:
    # stretching ~ E t, bending ~ E t^3: young scales both by E/E0, thickness by t/t0 and (t/t0)^3
    def values(x, base, cells):
        ratio = x / base[0]
        return [x] + [b * (ratio ** bending_power if attr == "flex_bending" else ratio)
                      for b, (attr, _) in zip(base[1:], cells[1:], strict=True)]
    return values


MODIFIERS: dict[tuple[str, str], Modifier] = {}


def register(modifier: Modifier) -> Modifier:
    """Add a kind (one entry per address kind it serves)."""
    for obj in modifier.objects:
        MODIFIERS[(obj, modifier.field)] = modifier
    return modifier


for _m in (
    Modifier(("geom", "pair"), "sliding", "sliding friction coefficient", _friction(0, (0, 1))),
    Modifier(("geom", "pair"), "torsional", "torsional friction coefficient (m)", _friction(1, (2,))),
    Modifier(("geom", "pair"), "rolling", "rolling friction coefficient (m)", _friction(2, (3, 4))),
    Modifier(("geom", "pair"), "timeconst", "contact stiffness: solref time constant (s)", _solref(0)),
    Modifier(("geom", "pair"), "dampratio", "contact damping: solref damping ratio", _solref(1)),
    Modifier(("actuator",), "kp", "position servo stiffness (N/m or N m/rad)", _kp_cells, lambda x, b: [x, -x]),
    Modifier(("actuator",), "kv", "position servo damping (N s/m)", _kv_cells, lambda x, b: [-x],
             inverse=lambda first: -first),
    Modifier(("actuator",), "gear", "transmission gear ratio", _one("actuator_gear", 0)),
    Modifier(("actuator",), "bias", "constant actuator force offset (N)", _one("actuator_biasprm", 0)),
    Modifier(("actuator",), "forcelimit", "symmetric actuator force limit (N)", _forcelimit_cells,
             lambda x, b: [-x, x], inverse=lambda first: -first),
    Modifier(("joint",), "damping", "joint damping (N s/m or N m s/rad)", _dof("dof_damping")),
    Modifier(("joint",), "armature", "joint armature (kg or kg m^2)", _dof("dof_armature"), set_const=True),
    Modifier(("joint",), "frictionloss", "joint dry friction (N or N m)", _dof("dof_frictionloss")),
    Modifier(("joint",), "stiffness", "joint spring stiffness (N/m or N m/rad)", _one("jnt_stiffness")),
    Modifier(("body",), "mass", "body mass (kg), rotational inertia scaled alike", _mass_cells, _mass_values,
             set_const=True),
    Modifier(("body",), "com", "centre of mass offset in the body frame (m)", _indexed("body_ipos"), set_const=True,
             flags=lambda model, oid: [(("body_sameframe", (oid,)), 0), (("body_simple", (oid,)), 0)]),
    Modifier(("geom",), "size", "geom size (m); bounding volumes grown to match", _size_cells, _size_values,
             set_const=True),
    Modifier(("flex",), "mass", "total mass of a flex's vertex bodies (kg), each body's inertia scaled alike",
             _flex_mass_cells, _flex_mass_values, set_const=True,
             reader=lambda model, cells: sum(float(model.body_mass[idx]) for a, idx in cells if a == "body_mass")),
    Modifier(("flex",), "young", "Young's modulus of a 2D flex (Pa)", _flex_material_cells("young"),
             set_const=True, scales=True, values_cells=_flex_material_values(1)),
    Modifier(("flex",), "thickness", "shell thickness of a 2D flex (m): its stiffness, not its collision radius",
             _flex_material_cells("thickness"), set_const=True, scales=True, values_cells=_flex_material_values(3)),
    Modifier(("sensor",), "bias", "measurement offset of a joint's position (m or rad)", signal=True),
    Modifier(("sensor",), "gain", "measurement gain of a joint's position and velocity", signal=True),
    Modifier(("timing",), "delay", "actuation delay (s)", signal=True),
):
    register(_m)


def raw_cells(obj: str, field: str, model: mujoco.MjModel, oid: int, index: int | None) -> list[Cell]:
    """Cells of a raw address (any ``{obj}_{field}`` array of the model; ``dof`` writes every
    dof of the joint)."""
    prefix = {"joint": "jnt"}.get(obj, obj)
    attr = f"{prefix}_{field}"
    if not hasattr(model, attr) or not isinstance(getattr(model, attr), np.ndarray):
        raise TwinloopError(f"model has no field {attr!r}")
    rows = joint_dofs(model, oid) if obj == "dof" else [oid]
    arr = getattr(model, attr)
    if arr.ndim == 2 and index is None and arr.shape[1] > 1:
        raise TwinloopError(f"{attr} has {arr.shape[1]} columns; give an index like [0]")
    if index is not None and (arr.ndim == 1 or index >= arr.shape[1]):
        raise TwinloopError(f"index [{index}] out of range for {attr}")
    return [(attr, (row,) if index is None else (row, index)) for row in rows]


def write_model(model: mujoco.MjModel, cells: list[Cell], values) -> None:
    """Write ``values`` into ``model``'s cells in place (the NumPy form)."""
    for (attr, idx), v in zip(cells, values, strict=True):
        getattr(model, attr)[idx] = v


def write_mjx(model, cells: list[Cell], values):
    """A copy of an MJX model with ``values`` in its cells (the JAX form, traceable)."""
    for (attr, idx), v in zip(cells, values, strict=True):
        arr = getattr(model, attr)
        if isinstance(arr, np.ndarray):
            raise TwinloopError(f"MJX keeps {attr} static; it cannot vary per particle or be differentiated")
        model = model.replace(**{attr: arr.at[idx].set(v)})
    return model


def delay_controls(ctrl: np.ndarray, delay_steps: float, before: np.ndarray) -> np.ndarray:
    """``ctrl (..., T, nu)`` per physics step reaching the actuators ``delay_steps`` (>= 0)
    late; ``before (..., nu)`` fills the start. A fractional delay blends the two neighbouring
    whole shifts, so a fitted delay moves the replay continuously."""
    lo = int(np.floor(delay_steps))
    w = float(delay_steps) - lo
    a = _shift(ctrl, lo, before)
    return a if w == 0 else (1 - w) * a + w * _shift(ctrl, lo + 1, before)


def through_delay_line(ctrl: np.ndarray, line: np.ndarray) -> np.ndarray:
    """``ctrl (..., T, nu)`` per physics step as the actuators receive it behind a delay line
    that holds ``line (..., D, nu)`` (the controls already sent, oldest first, as a world's
    actuation queue holds them): the line's D controls first, then ``ctrl`` D steps late (its
    last D steps fall past T)."""
    T = ctrl.shape[-2]
    line = np.broadcast_to(line, (*ctrl.shape[:-2], *line.shape[-2:]))
    return np.concatenate([line, ctrl], axis=-2)[..., :T, :]


def _shift(ctrl: np.ndarray, k: int, before: np.ndarray) -> np.ndarray:
    if k <= 0:
        return ctrl
    return through_delay_line(ctrl, np.repeat(before[..., None, :], min(k, ctrl.shape[-2]), axis=-2))


__all__ = ["MODIFIERS", "OBJECTS", "Modifier", "delay_controls", "joint_dofs", "raw_cells", "record_flex_materials",
           "register", "through_delay_line", "write_model", "write_mjx"]
