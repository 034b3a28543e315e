"""Plane geometry shared by the planar pushing tasks and their scripted proposers, and the
scene options they share (explicit pusher contacts, a kinematic pusher)."""

from __future__ import annotations

import mujoco
import numpy as np

from twinloop.errors import choose

CONTACTS = ("geoms", "pairs")
PUSHERS = ("pd", "kinematic")


def wrap(a):
    """Angle(s) wrapped to (-pi, pi]."""
    return np.arctan2(np.sin(a), np.cos(a))


def rotate(v, yaw) -> np.ndarray:
    """Rotate ``(..., 2)`` vectors counter-clockwise by ``yaw`` (rad, broadcast)."""
    v = np.asarray(v, dtype=float)
    c, s = np.cos(yaw), np.sin(yaw)
    return np.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], axis=-1)


def cross(a, b) -> np.ndarray:
    """z of the cross product of ``(..., 2)`` vectors."""
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def on_floor(xy) -> np.ndarray:
    """``(..., n, 2)`` floor points -> ``(..., n, 3)`` at height 0."""
    xy = np.asarray(xy, dtype=float)
    return np.concatenate([xy, np.zeros((*xy.shape[:-1], 1))], axis=-1)


def edit_pusher_scene(spec: mujoco.MjSpec, contacts: str, pusher: str, pusher_body: str = "pusher",
                      block_body: str = "block") -> None:
    """Scene options of a planar pushing task.

    ``contacts="pairs"``: every pusher-block contact becomes an explicit contact pair (named
    ``{pusher geom}_{block geom}``) and the bodies' automatic contacts are excluded. MuJoCo
    combines two geoms' frictions by taking the larger, so with geom contacts the pusher-block
    friction cannot be set apart from the block-floor one; a pair has its own. The pairs start
    with the values the automatic contacts had (friction: the larger; solref, solimp: the mean),
    so the nominal scene behaves the same.

    ``pusher="kinematic"``: the stage's position servos become stiff and unlimited (bandwidth
    60 rad/s, critically damped, no force limit): the pusher follows the command whatever the
    block pushes back, as a kinematic or velocity-controlled pusher of another simulator does.
    """
    choose("contacts", contacts, CONTACTS)
    choose("pusher", pusher, PUSHERS)
    if contacts == "pairs":
        spec.add_exclude(bodyname1=pusher_body, bodyname2=block_body)
        model = spec.compile()
        for g1 in _body_geoms(model, pusher_body):
            for g2 in _body_geoms(model, block_body):
                a, b = model.geom(g1), model.geom(g2)
                spec.add_pair(name=f"{a.name}_{b.name}", geomname1=a.name, geomname2=b.name, condim=3,
                              friction=[*[max(a.friction[0], b.friction[0])] * 2, max(a.friction[1], b.friction[1]),
                                        *[max(a.friction[2], b.friction[2])] * 2],
                              solref=(a.solref + b.solref) / 2, solimp=(a.solimp + b.solimp) / 2)
    if pusher == "kinematic":
        model = spec.compile()
        mass = float(model.body(pusher_body).mass[0])
        w = 60.0  # rad/s: settles within ~0.1 s, one control tick
        for act in spec.actuators:
            kp, kv = mass * w**2, 2 * mass * w
            act.gainprm[0], act.biasprm[1], act.biasprm[2] = kp, -kp, -kv
            act.forcelimited = mujoco.mjtLimited.mjLIMITED_FALSE


def _body_geoms(model: mujoco.MjModel, body: str) -> list[int]:
    b = model.body(body).id
    return [int(g) for g in np.flatnonzero(model.geom_bodyid == b) if model.geom_contype[g] or model.geom_conaffinity[g]]
