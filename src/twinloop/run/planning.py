"""What a run's refiner plans with: the nominal twin, the prior's particles, or a saved
calibration, and only a calibration fit for planning (its control check passed, something
identified); a posterior's fitted actuation delay comes with it."""

from __future__ import annotations

import numpy as np

from twinloop.calib.acceptance import planning_delay, planning_verdict
from twinloop.calib.posterior import Posterior
from twinloop.errors import TwinloopError, choose


def planning_choice(cfg, task, space) -> tuple[np.ndarray | None, float, dict | None]:
    """What the refiner plans with: ``(particles, actuation delay (s), note)``.

    With ``cfg.posterior``: its particles (:func:`planning_particles`) and its fitted actuation
    delay (unless ``cfg.refiner.actuation_delay`` gives one), when the fit is usable for
    planning (:func:`~twinloop.calib.acceptance.planning_verdict`: its control check did not
    reject it and some parameter is identifiable); else the nominal twin (the prior's particles
    with ``cfg.particles``) and ``cfg.refiner``'s delay (``cfg``: a :class:`~twinloop.run.compare.RunConfig`). ``note`` (``None`` without a posterior)
    is what the console and ``summary.json`` say: ``used``, ``reason``, ``actuation_delay``.
    """
    delay = cfg.refiner.actuation_delay
    if cfg.posterior is None:
        return planning_particles(cfg, space), delay, None
    post = load_posterior(cfg, space)
    rec = planning_candidate(cfg, post)
    if rec is not None:  # a candidate twin named by planner.candidate (or chosen by a closed-loop validation)
        used = rec["params"] == "fit"
        if delay == 0:
            delay = float(rec["actuation_delay"])
        return planning_particles(cfg, space, post if used else None), delay, {
            "path": cfg.posterior, "candidate": rec["name"], "contact_model": rec["contact_model"],
            "timestep": planning_timestep(cfg, post), "used": used, "actuation_delay": delay,
            "reason": f"candidate {rec['name']} of the posterior's ranked twins (planner.candidate)"}
    usable, why = planning_verdict(post)
    if post.structure is not None:  # the structure choice ranked the fit against the nominal twin itself
        usable, why = post.structure.get("params") == "fit", post.structure["choice"]["reason"]
        note = {"path": cfg.posterior, "contact_model": post.structure.get("contact_model")}
        if not usable:
            return planning_particles(cfg, space), delay, {**note, "used": False, "reason": why,
                                                           "actuation_delay": delay}
        if delay == 0:
            delay = planning_delay(post, task.model.opt.timestep)
        return planning_particles(cfg, space, post), delay, {**note, "used": True, "reason": why,
                                                             "actuation_delay": delay}
    if not usable:
        return planning_particles(cfg, space), delay, {"path": cfg.posterior, "used": False, "reason": why,
                                                       "actuation_delay": delay}
    if delay == 0:
        delay = planning_delay(post, task.model.opt.timestep)
    return planning_particles(cfg, space, post), delay, {"path": cfg.posterior, "used": True, "reason": why,
                                                         "actuation_delay": delay}


def planning_model(cfg, task):
    """The scene the refiner plans in: ``task.model``, or the contact model a posterior's
    structure choice picked (:func:`~twinloop.calib.structure.choose_structure`)."""
    if cfg.posterior is None:
        return task.model
    post = load_posterior(cfg, task.param_space())
    rec = planning_candidate(cfg, post)
    name = rec["contact_model"] if rec is not None else None if post.structure is None else post.structure.get(
        "contact_model")
    if name is None:
        return task.model
    from twinloop.calib.structure import named_contact_model

    return named_contact_model(task.model, name)


def planning_timestep(cfg, post: Posterior | None = None) -> float | None:
    """The twin step (s) the refiner plans at: the named candidate's (``planner.candidate``) where
    it records one, else ``planner.twin_timestep``."""
    if cfg.posterior is not None and cfg.planner.candidate is not None:
        post = post if post is not None else Posterior.load(cfg.posterior)
        step = planning_candidate(cfg, post)["timestep"]
        if step is not None:
            return float(step)
    return cfg.planner.twin_timestep


def posterior_candidates(cfg, post: Posterior) -> list[dict]:
    """The candidate twins a posterior's structure choice ranked (each a
    :func:`~twinloop.calib.structure.candidate_record`); a posterior without any is refused."""
    recs = (post.structure or {}).get("candidates")
    if not recs:
        raise TwinloopError(f"posterior {cfg.posterior!r} records no candidate twins: rank some with "
                            "`twinloop calibrate DATASET --structures elliptic,hard` (its posterior.json keeps them)")
    return list(recs)


def planning_candidate(cfg, post: Posterior) -> dict | None:
    """The record of the candidate twin ``planner.candidate`` names, or ``None`` (none named)."""
    name = cfg.planner.candidate
    if name is None:
        return None
    by_name = {r["name"]: r for r in posterior_candidates(cfg, post)}
    return by_name[choose(f"candidate twin of posterior {cfg.posterior!r}", name, tuple(by_name))]


def planning_message(note: dict) -> str:
    """The console's line on a posterior's use (``note`` of :func:`planning_choice`)."""
    values = "the calibrated values" if note["used"] else "the nominal values"
    if note.get("candidate"):
        model = note["contact_model"] or "the scene's contact model"
        step = "" if note.get("timestep") is None else f", twin step {1000 * note['timestep']:g} ms"
        return f"planning with candidate twin {note['candidate']} ({model}, {values}{step}; {note['path']}): {note['reason']}"
    if note.get("contact_model"):
        return f"planning with contact model {note['contact_model']} and {values} ({note['path']}): {note['reason']}"
    if note["used"]:
        return (f"planning with the calibrated twin {note['path']} (actuation delay "
                f"{1000 * note['actuation_delay']:.0f} ms): {note['reason']}")
    return f"planning with the NOMINAL twin, not {note['path']}: {note['reason']}"


def load_posterior(cfg, space) -> Posterior:
    """``cfg.posterior``, checked to fit ``space``."""
    if not len(space):
        raise TwinloopError(f"posterior={cfg.posterior!r}: task {cfg.task!r} has no parameters to plan with")
    return Posterior.load(cfg.posterior, space)


def planning_particles(cfg, space, post: Posterior | None = None) -> np.ndarray | None:
    """``(P, n)`` parameter particles of ``space`` the refiner plans under, or ``None`` (the
    nominal twin): ``post``'s estimate (or, with ``cfg.particles`` >= 2, its first samples);
    without one, the prior's particles (:attr:`RunConfig.particles`) or the nominal twin."""
    if post is not None:
        if cfg.particles < 2:
            return post.estimate[None].copy()
        if cfg.particles > len(post.particles):
            raise TwinloopError(f"particles={cfg.particles}: posterior {cfg.posterior!r} holds "
                                f"{len(post.particles)} samples")
        return post.particles[:cfg.particles].copy()
    if cfg.particles < 2:
        return None
    if not len(space):
        raise TwinloopError(f"particles={cfg.particles}: task {cfg.task!r} has no parameters to draw particles of")
    return space.prior_particles(np.random.default_rng([cfg.seed, 3]), cfg.particles)


__all__ = ["load_posterior", "planning_candidate", "planning_choice", "planning_message", "planning_particles",
           "planning_timestep", "posterior_candidates"]
