"""A parameter space read off a scene: what :meth:`ParamSpace.from_model
<twinloop.params.ParamSpace.from_model>` builds, without hand-written addresses.

Per body: its mass and centre of mass; per group of its colliding geoms (one parameter
where they agree): the contact kinds and the size; per explicit contact pair touching it:
the contact kinds; per joint: the joint kinds and the sensor's bias and gain; per actuator
driving such a joint: the actuator kinds it supports; and one actuation delay.
"""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np

from twinloop.errors import TwinloopError, number
from twinloop.params import KINDS, Param

_GEOM, _JOINT, _ACTUATOR = mujoco.mjtObj.mjOBJ_GEOM, mujoco.mjtObj.mjOBJ_JOINT, mujoco.mjtObj.mjOBJ_ACTUATOR
#: model column of each contact kind, for geoms and for explicit pairs
_GEOM_COLUMN = {"sliding": ("geom_friction", 0), "torsional": ("geom_friction", 1), "rolling": ("geom_friction", 2),
                "timeconst": ("geom_solref", 0), "dampratio": ("geom_solref", 1)}
_PAIR_COLUMN = {"sliding": ("pair_friction", 0), "torsional": ("pair_friction", 2), "rolling": ("pair_friction", 3),
                "timeconst": ("pair_solref", 0), "dampratio": ("pair_solref", 1)}


def wanted_kinds(kinds: Sequence[str]) -> list[str]:
    """The parameter kinds named by ``kinds`` (kinds or groups of :data:`~twinloop.params.KINDS`)."""
    want: list[str] = []
    for k in kinds:
        if k in KINDS:
            want += KINDS[k]
        elif any(k in v for v in KINDS.values()):
            want.append(k)
        else:
            raise TwinloopError(f"unknown parameter kind {k!r}; kinds: {sorted(set(sum(KINDS.values(), ())) | set(KINDS))}")
    return want


def moving_bodies(model: mujoco.MjModel, bodies: Sequence[str] | None) -> list[int]:
    """Ids of ``bodies`` (default: every body neither welded to the world nor a mocap body)."""
    if bodies is None:
        return [b for b in range(1, model.nbody) if model.body_weldid[b] != 0 and model.body_mocapid[b] < 0]
    ids = []
    for b in bodies:
        i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, b)
        if i < 0:
            raise TwinloopError(f"from_model: no body named {b!r} in the model")
        ids.append(i)
    return ids


class SceneSpace:
    """Collects the parameters of a scene in a fixed order (see the module docstring).

    Args:
        model: the scene.
        kinds: parameter kinds (see :func:`wanted_kinds`).
        spread: bounds are ``[nominal / spread, nominal * spread]`` for positive quantities.
    """

    def __init__(self, model: mujoco.MjModel, kinds: Sequence[str], spread: float):
        self.model, self.want = model, wanted_kinds(kinds)
        self.spread = number(spread, "spread", low=1, low_open=True)
        self.contact = [k for k in self.want if k in KINDS["contact"]]
        self.params: list[Param] = []

    def name(self, obj, i) -> str:
        """An object's name; unnamed objects cannot be addressed and are left out."""
        return mujoco.mj_id2name(self.model, obj, i) or ""

    def add(self, pname: str, targets: list[str], nominal: float, low: float, high: float) -> None:
        low, high = min(low, nominal), max(high, nominal)
        if high > low and all(":/" not in t for t in targets):
            self.params.append(Param(pname, tuple(targets), low, high, nominal))

    def scaled(self, pname: str, targets: list[str], nominal: float, floor: float) -> None:
        """Positive quantities within a factor; a zero nominal gets the range ``[0, floor]``."""
        if nominal > 0:
            self.add(pname, targets, nominal, nominal / self.spread, nominal * self.spread)
        else:
            self.add(pname, targets, nominal, 0.0, floor)

    def body(self, b: int) -> None:
        """Body ``b``'s inertial, contact, size, joint, sensor and actuator parameters."""
        model, want = self.model, self.want
        bname = self.name(mujoco.mjtObj.mjOBJ_BODY, b)
        if "mass" in want and model.body_mass[b] > 0:
            self.scaled(f"{bname}_mass", [f"body:{bname}/mass"], float(model.body_mass[b]), 1.0)
        if "com" in want:
            reach = float(max(model.geom_rbound[model.geom_bodyid == b], default=0.05))
            for k, axis in enumerate("xyz"):
                c = float(model.body_ipos[b, k])
                self.add(f"{bname}_com_{axis}", [f"body:{bname}/com[{k}]"], c, c - 0.5 * reach, c + 0.5 * reach)
        geoms = [g for g in np.flatnonzero(model.geom_bodyid == b) if model.geom_contype[g] or model.geom_conaffinity[g]]
        self.geom_contacts(bname, geoms)
        if "size" in want:
            self.geom_sizes(geoms)
        for j in np.flatnonzero(model.jnt_bodyid == b):
            if int(model.jnt_type[j]) not in (int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL)):
                self.joint(j)  # a free or ball joint: one value for several dofs would need its own kind

    def geom_contacts(self, bname: str, geoms: list[int]) -> None:
        """Contact kinds of a body's colliding geoms, one parameter per group of equal values."""
        for kind in self.contact:
            column, i = _GEOM_COLUMN[kind]
            groups: dict[float, list[str]] = {}
            for g in geoms:
                groups.setdefault(float(getattr(self.model, column)[g, i]), []).append(self.name(_GEOM, g))
            for nominal, gnames in groups.items():
                label = bname if len(groups) == 1 else gnames[0]
                self.scaled(f"{label}_{kind}", [f"geom:{g}/{kind}" for g in gnames], nominal, 0.01)

    def geom_sizes(self, geoms: list[int]) -> None:
        """The size values each geom's type uses, within half of their nominal."""
        T = mujoco.mjtGeom
        used_by = {int(T.mjGEOM_SPHERE): 1, int(T.mjGEOM_CAPSULE): 2, int(T.mjGEOM_CYLINDER): 2,
                   int(T.mjGEOM_BOX): 3, int(T.mjGEOM_ELLIPSOID): 3}
        for g in geoms:
            gname = self.name(_GEOM, g)
            for k in range(used_by.get(int(self.model.geom_type[g]), 0)):
                s = float(self.model.geom_size[g, k])
                self.add(f"{gname}_size{k}", [f"geom:{gname}/size[{k}]"], s, 0.5 * s, 1.5 * s)

    def joint(self, j: int) -> None:
        """A hinge or slide joint's kinds, its sensor's bias and gain, and its actuators."""
        model, want = self.model, self.want
        jn, d = self.name(_JOINT, j), int(model.jnt_dofadr[j])
        for kind, nominal, floor in (("damping", model.dof_damping[d], 1.0),
                                     ("armature", model.dof_armature[d], 0.01),
                                     ("frictionloss", model.dof_frictionloss[d], 0.5),
                                     ("stiffness", model.jnt_stiffness[j], 10.0)):
            if kind in want:
                self.scaled(f"{jn}_{kind}", [f"joint:{jn}/{kind}"], float(nominal), floor)
        if "sensor_bias" in want:
            self.add(f"{jn}_sensor_bias", [f"sensor:{jn}/bias"], 0.0, -0.01, 0.01)
        if "sensor_gain" in want:
            self.add(f"{jn}_sensor_gain", [f"sensor:{jn}/gain"], 1.0, 0.9, 1.1)
        for a in range(model.nu):
            if int(model.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT) and model.actuator_trnid[a, 0] == j:
                self.actuator(a)

    def actuator(self, a: int) -> None:
        """The kinds actuator ``a`` supports (``kp``/``kv`` only on a position servo)."""
        model, want, an = self.model, self.want, self.name(_ACTUATOR, a)
        servo = (int(model.actuator_biastype[a]) == int(mujoco.mjtBias.mjBIAS_AFFINE)
                 and model.actuator_gainprm[a, 0] == -model.actuator_biasprm[a, 1])
        if "kp" in want and servo:
            self.scaled(f"{an}_kp", [f"actuator:{an}/kp"], float(model.actuator_gainprm[a, 0]), 1.0)
        if "kv" in want and servo:
            self.scaled(f"{an}_kv", [f"actuator:{an}/kv"], float(-model.actuator_biasprm[a, 2]), 1.0)
        if "gear" in want:
            g0 = float(model.actuator_gear[a, 0])
            self.add(f"{an}_gear", [f"actuator:{an}/gear"], g0, 0.5 * g0, 1.5 * g0)
        if "bias" in want:
            f0 = float(model.actuator_biasprm[a, 0])
            lim = float(np.max(np.abs(model.actuator_forcerange[a]))) if model.actuator_forcelimited[a] else 1.0
            self.add(f"{an}_bias", [f"actuator:{an}/bias"], f0, f0 - 0.2 * lim, f0 + 0.2 * lim)
        if "forcelimit" in want and model.actuator_forcelimited[a]:
            self.scaled(f"{an}_forcelimit", [f"actuator:{an}/forcelimit"], float(-model.actuator_forcerange[a, 0]), 1.0)

    def pairs(self, ids: list[int]) -> None:
        """Contact kinds of every explicit contact pair touching one of the bodies ``ids``."""
        model = self.model
        for pr in range(model.npair):
            g1, g2 = model.pair_geom1[pr], model.pair_geom2[pr]
            if model.geom_bodyid[g1] not in ids and model.geom_bodyid[g2] not in ids:
                continue
            pn = self.name(mujoco.mjtObj.mjOBJ_PAIR, pr)
            for kind in self.contact:
                column, i = _PAIR_COLUMN[kind]
                self.scaled(f"{pn}_{kind}", [f"pair:{pn}/{kind}"], float(getattr(model, column)[pr, i]), 0.01)


def scene_params(model: mujoco.MjModel, bodies: Sequence[str] | None, kinds: Sequence[str],
                 spread: float) -> tuple[Param, ...]:
    """The parameters :meth:`ParamSpace.from_model <twinloop.params.ParamSpace.from_model>` builds."""
    space = SceneSpace(model, kinds, spread)
    ids = moving_bodies(model, bodies)
    for b in ids:
        space.body(b)
    space.pairs(ids)
    if "delay" in space.want:
        space.add("ctrl_delay", ["timing:ctrl/delay"], 0.0, 0.0, 0.05)
    return tuple(space.params)
