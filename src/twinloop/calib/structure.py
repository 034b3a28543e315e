"""Corrections for what parameters cannot express, and the best twin chosen by the control check.

A world built on another engine differs from the MuJoCo twin in *structure* (how contacts
resolve, how friction is shaped, how the pusher is driven), not only in parameter values. Three
kinds of correction can express such a gap, and each is a :class:`TwinCandidate`: a twin the
refiner could plan in, with the task it plans with, its parameter values and its actuation delay.

- a **structural variant** of the scene (:data:`CONTACT_MODELS`, :func:`contact_model`: the
  friction cone pyramidal or elliptic, the contacts' ``solref``/``solimp`` softness, the
  contacts' friction dimensionality ``condim``, MuJoCo's no-slip solver), or a task option
  that changes the scene (the planar pushers' ``pusher="kinematic"`` stage);
- a **calibration** of the parameters (of the nominal structure or of a variant);
- a **learned residual** over a physics twin (:class:`~twinloop.twin.learned.HybridTwin`),
  trained on the world's episodes.

:func:`choose_twin` ranks all candidates, the nominal twin among them, by the same held-out
control check that accepts a calibration (:func:`~twinloop.calib.acceptance.horizon_errors`:
the task's cost terms predicted over the planning horizon on held-out windows, weighted near
the goal) and picks the best one, *only* if it beats the nominal twin by the check's margin;
otherwise the nominal twin. So no chosen correction ranks below the nominal twin on the check.
:func:`validate_closed_loop` settles that choice by control itself: the nominal twin and the
best few candidates the check passed each run a short closed-loop validation in the world, and
the one that controls best is kept only if it controls strictly better than the nominal twin.
The twin's time step is a structural candidate too (``fit_candidates(timesteps=...)``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import mujoco
import numpy as np

from twinloop.calib.acceptance import AcceptanceConfig, horizon_errors
from twinloop.calib.windows import twin_substeps
from twinloop.errors import TwinloopError, choose, number
from twinloop.tasks.base import Task

CONES = {"pyramidal": mujoco.mjtCone.mjCONE_PYRAMIDAL, "elliptic": mujoco.mjtCone.mjCONE_ELLIPTIC}

#: named contact models: keyword arguments of :func:`contact_model` ("as authored": the scene's own)
CONTACT_MODELS: dict[str, dict] = {
    "as-authored": {},
    "elliptic": {"cone": "elliptic"},
    "hard": {"solref": (0.002, 1.0), "solimp": (0.95, 0.99, 0.001)},
    "soft": {"solref": (0.03, 1.0)},
    "condim-4": {"condim": 4},
    "elliptic-hard": {"cone": "elliptic", "solref": (0.002, 1.0), "solimp": (0.95, 0.99, 0.001)},
    "noslip": {"noslip": 10},
}


def contact_model(model: mujoco.MjModel, cone: str | None = None, solref: Sequence[float] | None = None,
                  solimp: Sequence[float] | None = None, condim: int | None = None,
                  noslip: int | None = None) -> mujoco.MjModel:
    """A copy of ``model`` with another contact model (``None``: keep the scene's).

    Args:
        cone: friction cone, ``pyramidal`` or ``elliptic`` (``opt.cone``).
        solref: ``(timeconst s, dampratio)`` of every geom and explicit contact pair: how
            stiff and how damped contacts are (smaller time constant: harder).
        solimp: ``(dmin, dmax, width)`` (+ optional midpoint, power) of every geom and pair.
        condim: friction dimensionality of every geom and pair: 1 frictionless, 3 sliding,
            4 + torsional, 6 + rolling.
        noslip: iterations of MuJoCo's no-slip solver after the main one (0: off): removes the
            soft-contact creep, closer to a rigid stick-slip law.
    """
    m = copy.deepcopy(model)
    if cone is not None:
        m.opt.cone = CONES[choose("cone", cone, tuple(CONES))]
    if solref is not None:
        ref = np.asarray(solref, float)
        if ref.shape != (2,) or not np.all(np.isfinite(ref)) or ref[0] <= 0 or ref[1] <= 0:
            raise TwinloopError(f"solref must be (timeconst > 0, dampratio > 0), got {solref}")
        m.geom_solref[:] = ref
        m.pair_solref[:] = ref
    if solimp is not None:
        imp = np.asarray(solimp, float)
        if imp.shape not in ((3,), (5,)) or not (0 < imp[0] <= imp[1] < 1) or imp[2] <= 0:
            raise TwinloopError(f"solimp must be (dmin, dmax, width[, midpoint, power]) with 0 < dmin <= dmax < 1 "
                                f"and width > 0, got {solimp}")
        m.geom_solimp[:, : len(imp)] = imp
        m.pair_solimp[:, : len(imp)] = imp
    if condim is not None:
        c = int(condim) if condim in (1, 3, 4, 6) else None
        if c is None:
            raise TwinloopError(f"condim must be 1, 3, 4 or 6, got {condim!r}")
        m.geom_condim[:] = c
        m.pair_dim[:] = c
    if noslip is not None:
        m.opt.noslip_iterations = int(number(noslip, "noslip iterations", low=0, integer=True))
    return m


def named_contact_model(model: mujoco.MjModel, name: str) -> mujoco.MjModel:
    """:func:`contact_model` of the preset ``name`` of :data:`CONTACT_MODELS`."""
    return contact_model(model, **CONTACT_MODELS[choose("contact model", name, tuple(CONTACT_MODELS))])


@dataclass(frozen=True)
class TwinCandidate:
    """A twin the refiner could plan in.

    Attributes:
        name: how reports name it (``nominal``, ``contact:elliptic``, ``calibrated``, ...).
        kind: ``nominal`` | ``structure`` | ``calibration`` | ``residual``.
        task: the task the refiner plans with (its scene: the candidate's structure; the same
            cost and state map as the world's task).
        twin: the twin (its model may differ from ``task.model`` by a structural edit).
        params: ``(n,)`` values of ``twin.param_space``, or ``None``: the twin's own model.
        delay: actuation delay in the twin's physics steps.
        note: what was fitted or changed (recorded with the choice).
    """

    name: str
    kind: str
    task: Task
    twin: object
    params: np.ndarray | None = None
    delay: float = 0.0
    note: dict = field(default_factory=dict)

    def __post_init__(self):
        choose("candidate kind", self.kind, ("nominal", "structure", "calibration", "residual"))


class ClosedLoopScore(NamedTuple):
    """A candidate's short closed-loop validation: its refined controller's ``successes`` of
    ``episodes`` in the world (seeds held out from every fit and from the measured ones), and
    the median of the task's final error (breaks ties)."""

    name: str
    successes: int
    episodes: int
    final_error_median: float

    def key(self) -> tuple[float, float]:
        """Sort key, best first: a higher success rate, then a smaller final error."""
        err = self.final_error_median if np.isfinite(self.final_error_median) else np.inf
        return (-self.successes / max(self.episodes, 1), err)


@dataclass(frozen=True)
class TwinChoice:
    """:func:`choose_twin`'s verdict.

    Attributes:
        chosen: the candidate the refiner should plan in (the nominal one unless another
            beats it on the check).
        ranking: ``(name, kind, error, beats_nominal)`` of every candidate, best first
            (``error``: ``E`` of the control check; ``inf`` for an unstable replay).
        nominal_error: ``E`` of the nominal candidate.
        windows, horizon_ticks: of the check; reason: one sentence.
        closed_loop: the closed-loop validation's scores (:func:`validate_closed_loop`),
            best first; empty when the choice rests on the prediction check alone.
    """

    chosen: TwinCandidate
    ranking: tuple[tuple[str, str, float, bool], ...]
    nominal_error: float
    windows: int
    horizon_ticks: int
    reason: str
    closed_loop: tuple[ClosedLoopScore, ...] = ()

    def to_dict(self) -> dict:
        return {"chosen": self.chosen.name, "kind": self.chosen.kind, "note": self.chosen.note,
                "nominal_error": self.nominal_error if np.isfinite(self.nominal_error) else None,
                "windows": self.windows, "horizon_ticks": self.horizon_ticks, "reason": self.reason,
                "ranking": [{"name": n, "kind": k, "error": e if np.isfinite(e) else None, "beats_nominal": b}
                            for n, k, e, b in self.ranking],
                "closed_loop": [s._asdict() for s in self.closed_loop]}

    @classmethod
    def from_dict(cls, d: dict, candidates: Sequence[TwinCandidate]) -> TwinChoice:
        """The choice :meth:`to_dict` wrote, over ``candidates`` (rebuilt, e.g. by a run from
        :func:`candidate_record` records): what :func:`validate_closed_loop` settles."""
        by_name = {c.name: c for c in candidates}
        try:
            ranking = tuple((r["name"], r["kind"], np.inf if r["error"] is None else float(r["error"]),
                             bool(r["beats_nominal"])) for r in d["ranking"])
            chosen = by_name[d["chosen"]]
            scores = tuple(ClosedLoopScore(**s) for s in d.get("closed_loop", ()))
            nominal = np.inf if d["nominal_error"] is None else float(d["nominal_error"])
            return cls(chosen, ranking, nominal, int(d["windows"]), int(d["horizon_ticks"]), str(d["reason"]), scores)
        except (KeyError, TypeError, ValueError) as exc:
            raise TwinloopError(f"not a recorded twin choice over candidates {sorted(by_name)}: {exc!r}") from exc


def candidate_record(c: TwinCandidate) -> dict:
    """What rebuilds ``c`` in another process (``posterior.json``'s ``structure.candidates``;
    ``twinloop run --posterior`` plans with one): its name and kind, its contact model (a name of
    :data:`CONTACT_MODELS`; ``None``: the scene's), its twin step (s; ``None``: the run's), which
    values it plans with (``params``: ``fit`` | ``nominal``) and what they are (``values``, by
    parameter name; ``None``: the nominal ones), and its actuation delay (s)."""
    space = getattr(c.twin, "param_space", None)
    values = None if c.params is None else dict(zip(space.names, map(float, c.params), strict=True))
    return {"name": c.name, "kind": c.kind, "contact_model": c.note.get("contact_model"),
            "timestep": c.note.get("timestep"), "params": c.note.get("params", "nominal" if values is None else "fit"),
            "values": values, "actuation_delay": float(c.delay * c.twin.dt)}


def choose_twin(task: Task, episodes: Sequence, candidates: Sequence[TwinCandidate],
                config: AcceptanceConfig | None = None) -> TwinChoice:
    """The candidate the control check ranks best on held-out ``episodes`` (world episodes not
    used to fit any candidate), if it beats the nominal candidate by ``config.margin``;
    otherwise the nominal one. Exactly one candidate must be of kind ``nominal``.

    Raises :class:`~twinloop.errors.TwinloopError` when the episodes give fewer windows than
    ``config.min_windows`` (no verdict: hold out more episodes)."""
    cfg = config or AcceptanceConfig()
    nominal = [c for c in candidates if c.kind == "nominal"]
    if len(nominal) != 1:
        raise TwinloopError(f"choose_twin needs exactly one candidate of kind 'nominal', got {len(nominal)}")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise TwinloopError(f"candidate names must differ, got {names}")
    errors, n, L = horizon_errors(task, episodes, [(c.twin, c.params, c.delay) for c in candidates], cfg)
    if errors is None:
        raise TwinloopError(f"the held-out episodes give {n} windows of {L} ticks; the check needs at least "
                            f"{cfg.min_windows}: hold out more or longer episodes")
    nom = float(errors[candidates.index(nominal[0])])
    beats = [bool(np.isfinite(e) and e < (1 - cfg.margin) * nom) and c.kind != "nominal"
             for c, e in zip(candidates, errors, strict=True)]
    order = sorted(range(len(candidates)), key=lambda i: (errors[i], i))
    ranking = tuple((candidates[i].name, candidates[i].kind, float(errors[i]), beats[i]) for i in order)
    best = next((i for i in order if beats[i]), None)
    chosen = nominal[0] if best is None else candidates[best]
    why = (f"no candidate predicts the task's cost terms better than the nominal twin ({nom:.3g})" if best is None
           else f"{chosen.name} predicts the task's cost terms with error {errors[best]:.3g} against the nominal "
                f"twin's {nom:.3g}")
    return TwinChoice(chosen, ranking, nom, n, L, f"chose {chosen.name}: {why} over {L}-tick horizons on {n} "
                                                    "held-out windows (weighted near the goal)")


def validate_closed_loop(choice: TwinChoice, candidates: Sequence[TwinCandidate],
                         score: Callable[[TwinCandidate], ClosedLoopScore], top: int = 3) -> TwinChoice:
    """Settle ``choice`` (of :func:`choose_twin` over ``candidates``) by control itself.

    The prediction check ranks coarsely: a twin can predict the task's cost terms better and
    still plan worse. So the nominal twin and the ``top`` candidates the check ranks best
    *among those it ranks above the nominal twin* each drive a short closed-loop run in the
    world (``score``: the caller's, on world seeds held out from every fit and from the
    measured ones), and the chosen twin is the one that controls best (higher success rate,
    then a smaller median final error), only if it controls strictly better than the nominal
    twin; otherwise the nominal twin. A candidate the check ranks below the nominal twin is
    never run, so never chosen.
    """
    top = int(number(top, "closed-loop candidates", low=0, integer=True))
    by_name = {c.name: c for c in candidates}
    nominal = next(c for c in candidates if c.kind == "nominal")
    if {r[0] for r in choice.ranking} != set(by_name):
        raise TwinloopError("validate_closed_loop needs the candidates choose_twin ranked")
    passed = [by_name[r[0]] for r in choice.ranking if r[3]][:top]
    scores = [score(c) for c in (nominal, *passed)]
    for c, sc in zip((nominal, *passed), scores, strict=True):
        if sc.name != c.name or sc.episodes < 1:
            raise TwinloopError(f"the closed-loop score of {c.name!r} must name it and count >= 1 episode, "
                                f"got {sc}")
    ranked = tuple(sorted(scores, key=ClosedLoopScore.key))  # stable: the nominal twin wins ties
    best = ranked[0]
    chosen = by_name[best.name] if best.key() < scores[0].key() else nominal
    nom = scores[0]
    why = (f"chose {chosen.name}: in closed loop on held-out world episodes it succeeded {best.successes}/"
           f"{best.episodes} (median final error {best.final_error_median:.3g}) against the nominal twin's "
           f"{nom.successes}/{nom.episodes} ({nom.final_error_median:.3g}); validated: "
           + ", ".join(s.name for s in scores) + "; the prediction check " + choice.reason)
    if chosen is nominal:
        why = (f"chose nominal: no candidate the prediction check passed ({', '.join(c.name for c in passed) or 'none'})"
               f" controlled better than the nominal twin's {nom.successes}/{nom.episodes} (median final error "
               f"{nom.final_error_median:.3g}) in closed loop on held-out world episodes; the prediction check " + choice.reason)
    return replace(choice, chosen=chosen, reason=why, closed_loop=ranked)


def _twin(model: mujoco.MjModel, space, timestep: float | None):
    from twinloop.twin import make_twin

    coarse = timestep is not None and timestep > model.opt.timestep * (1 + 1e-9)
    return make_twin("mujoco", model, space, **({"timestep": timestep} if coarse else {}))


def fit_candidates(task: Task, episodes: Sequence, *, contact_models: Sequence[str] = ("elliptic", "hard"),
                   variants: dict[str, Task] | None = None, calibration=None, spaces: dict | None = None,
                   residual=None, timestep: float | None = None,
                   timesteps: Sequence[float] = ()) -> list[TwinCandidate]:
    """The candidates :func:`choose_twin` ranks, built or fitted from world ``episodes`` (the
    fit set: keep the check's episodes out of it).

    Args:
        task: the world's task (the nominal candidate plans with it).
        contact_models: names of :data:`CONTACT_MODELS`, each a structural candidate.
        variants: ``{name: task}`` structural variants made by task options (e.g.
            ``make_task("push-t", pusher="kinematic")``), same cost and state map.
        calibration: a :class:`~twinloop.calib.fit.CalibConfig`: fit the task's parameters
            to ``episodes`` (candidate ``calibrated``); ``None``: no calibration candidate.
        spaces: ``{name: ParamSpace}`` of ``task.model``: more calibration candidates, each
            space fitted with ``calibration`` (e.g. with the pusher stage's gains).
        residual: an :class:`~twinloop.twin.learned.EnsembleConfig`: learn a residual over the
            nominal twin from ``episodes`` (candidate ``residual``, the ``[learn]`` extra);
            ``None``: none.
        timestep: the refiner's twin step (s), when coarser than the scene's.
        timesteps: other twin steps (s) as structural candidates: the nominal twin and each
            calibration again with that step (``NAME@5ms``; a finer step predicts contacts
            better and costs rollouts in proportion).
    """
    space = task.param_space()
    out = [TwinCandidate("nominal", "nominal", task, _twin(task.model, space, timestep))]
    for name in contact_models:
        model = named_contact_model(task.model, name)
        out.append(TwinCandidate(f"contact:{name}", "structure", task, _twin(model, space, timestep),
                                 note={"contact_model": CONTACT_MODELS[name]}))
    for name, variant in (variants or {}).items():
        out.append(TwinCandidate(f"variant:{name}", "structure", variant,
                                 _twin(variant.model, variant.param_space(), timestep)))
    if calibration is not None:
        from twinloop.calib.fit import calibrate

        for name, sp in {"calibrated": space, **(spaces or {})}.items():
            post = calibrate(task, episodes, sp, config=calibration)
            twin = out[0].twin if sp is space else _twin(task.model, sp, timestep)
            delay = post.delay_steps * (post.timestep or task.model.opt.timestep) / twin.dt
            out.append(TwinCandidate(name, "calibration", task, twin, post.estimate.copy(), delay,
                                     note={"estimate": dict(zip(sp.names, post.estimate.tolist(), strict=True)),
                                           "identifiable": post.identifiable.tolist(),
                                           "delay_steps": post.delay_steps}))
    if residual is not None:
        from twinloop.calib.windows import as_trajectories
        from twinloop.twin.learned import HybridTwin

        twin = HybridTwin.fit(task.model, as_trajectories(task, episodes), task.control_period, residual,
                              param_space=space)
        out.append(TwinCandidate("residual", "residual", task, twin, note={"members": residual.members,
                                                                           "epochs": residual.epochs}))
    return out + _at_timesteps(task, out, timesteps)


def _at_timesteps(task: Task, cands: Sequence[TwinCandidate], timesteps: Sequence[float]) -> list[TwinCandidate]:
    """The nominal and calibration candidates again, each with a twin of every step of ``timesteps``."""
    out = []
    for dt in timesteps:
        dt = number(dt, "twin timestep (s)", low=task.model.opt.timestep * (1 - 1e-9), high=task.control_period)
        for c in cands:
            if c.kind not in ("nominal", "calibration"):
                continue
            from twinloop.twin import make_twin

            twin = make_twin("mujoco", c.twin.model, c.twin.param_space, timestep=dt)  # the same structure
            twin_substeps(task, twin)  # the step must divide the control period
            out.append(TwinCandidate(f"{c.name}@{dt * 1000:g}ms", "structure" if c.kind == "nominal" else c.kind,
                                     c.task, twin, c.params, c.delay * c.twin.dt / twin.dt,
                                     note={**c.note, "timestep": dt}))
    return out


def choose_structure(task: Task, held: Sequence, post, contact_models: Sequence[str],
                     config: AcceptanceConfig | None = None) -> tuple[TwinChoice, dict]:
    """After a calibration ``post`` of ``task.param_space()``: rank the nominal twin, the fit,
    and each contact model of ``contact_models`` with the nominal values and with the fit, on
    ``held`` (episodes held out from the fit), and return the choice and what a posterior
    records of it (``{"contact_model": name or None, "params": "fit" | "nominal",
    "choice": ..., "candidates": [...]}``: what ``twinloop run --posterior`` plans with, and
    every ranked candidate's :func:`candidate_record`, which its closed-loop validation
    rebuilds)."""
    space = task.param_space()
    if list(space.names) != list(post.names):
        raise TwinloopError(f"choose_structure ranks fits of the task's own parameters {space.names}, "
                            f"not {list(post.names)}")
    fit_delay = post.delay_steps * (post.timestep or task.model.opt.timestep) / task.model.opt.timestep
    cands = []
    for name in ("as-authored", *contact_models):
        twin = _twin(named_contact_model(task.model, name), space, None)
        tag = "" if name == "as-authored" else f"contact:{name}"
        cands.append(TwinCandidate(tag or "nominal", "structure" if tag else "nominal", task, twin,
                                   note={"contact_model": None if not tag else name, "params": "nominal"}))
        cands.append(TwinCandidate(f"{tag}+fit" if tag else "calibrated", "calibration", task, twin,
                                   post.estimate.copy(), fit_delay,
                                   note={"contact_model": None if not tag else name, "params": "fit"}))
    choice = choose_twin(task, held, cands, config)
    return choice, {**choice.chosen.note, "choice": choice.to_dict(),
                    "candidates": [candidate_record(c) for c in cands]}


__all__ = ["CONES", "CONTACT_MODELS", "TwinCandidate", "TwinChoice", "candidate_record", "choose_structure", "choose_twin",
           "contact_model", "fit_candidates", "named_contact_model", "ClosedLoopScore", "validate_closed_loop"]
