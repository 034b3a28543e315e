"""The twin a run plans with, settled by control (``twinloop run --posterior P --set planner.validate.episodes=N``).

A calibration with ``--structures`` ranks candidate twins (the nominal twin, the fit, contact
models with the nominal and the fitted values) by a prediction check, and keeps what rebuilds
each (:func:`~twinloop.calib.structure.candidate_record`). A twin can predict the task's cost
terms better and still plan worse, so before its measured episodes a run can settle the choice
in its own world: the nominal twin and the ``validate.top`` candidates the check ranks best
above it each drive ``validate.episodes`` refined episodes on seeds held out from the measured
ones, and the run plans with the one that controls best only if it controls strictly better
than the nominal twin (:func:`~twinloop.calib.structure.validate_closed_loop`). The cost:
``validate.episodes x (validate.top + 1)`` episodes at most.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from twinloop.calib.structure import (
    ClosedLoopScore,
    TwinCandidate,
    TwinChoice,
    validate_closed_loop,
)
from twinloop.errors import TwinloopError
from twinloop.run.experiment import run_episode

if TYPE_CHECKING:
    from twinloop.run.compare import RunConfig


def validation_seeds(cfg: RunConfig) -> list[int]:
    """Seeds of a run's closed-loop validation episodes: ``validate.seed + i`` (default
    ``seed * 100000 + 70000 + i``), apart from the measured episodes' block."""
    v = cfg.planner.validate
    first = v.seed if v.seed is not None else cfg.experiment.seed * 100_000 + 70_000
    return [first + i for i in range(v.episodes)]


def check_validation(cfg: RunConfig, monitor_seeds: Sequence[int] = ()) -> None:
    """Refuse a validation the run cannot do: without a posterior, beside a named candidate, or
    on seeds that meet the measured episodes' (or the monitor's ``monitor_seeds``)."""
    if not cfg.planner.validate.episodes:
        return
    if cfg.planner.posterior is None:
        raise TwinloopError(f"planner.validate.episodes={cfg.planner.validate.episodes} chooses among a calibration's candidate "
                            "twins: give posterior (a posterior.json of `twinloop calibrate --structures ...`)")
    if cfg.planner.candidate is not None:
        raise TwinloopError(f"planner.candidate={cfg.planner.candidate!r} names the twin to plan with and "
                            f"planner.validate.episodes={cfg.planner.validate.episodes} chooses one: pass one of them")
    v = cfg.planner.validate
    if v.seed is None and v.episodes > 30_000:
        raise TwinloopError(f"planner.validate.episodes must be <= 30000 on the default seeds (seed * 100000 + 70000 + "
                            f"i, the seed's block ends at 100000), got {v.episodes}: give validate.seed for more")
    seeds = set(validation_seeds(cfg))
    for what, other in (("measured episodes'", cfg.experiment.episode_seeds()), ("monitor's", monitor_seeds)):
        clash = sorted(seeds & set(other))
        if clash:
            raise TwinloopError(f"the validation episodes' seeds {clash[:3]} are among the {what} seeds: choose "
                                "validate.seed elsewhere (they must be held out)")


def closed_loop_choice(choice: TwinChoice, candidates: Sequence[TwinCandidate], world,
                       controller_of: Callable[[TwinCandidate], object], seeds: Sequence[int], *, top: int = 3,
                       max_ticks: int | None = None, log: Callable[[str], None] | None = None) -> TwinChoice:
    """``choice`` settled in closed loop in one call: the nominal twin and the ``top`` candidates
    the prediction check passed each drive one episode per seed of ``seeds`` in ``world`` with
    their refined controller (``controller_of(candidate)``), scored by successes and the median
    final error (:func:`~twinloop.calib.structure.validate_closed_loop`'s rule); ``log`` hears
    each score."""

    def score(c: TwinCandidate) -> ClosedLoopScore:
        ctl = controller_of(c)
        res = [run_episode(world, ctl, s, max_ticks=max_ticks, record=False) for s in seeds]
        sc = ClosedLoopScore(c.name, sum(bool(r.success) for r in res), len(res),
                             float(np.median([r.final_error for r in res])))
        if log is not None:
            log(f"  validate {c.name}: {sc.successes}/{sc.episodes} (median final error {sc.final_error_median:.3g})")
        return sc

    return validate_closed_loop(choice, candidates, score, top)


def validate_planning_twin(cfg: RunConfig, log: Callable[[str], None] = print) -> tuple[RunConfig, dict]:
    """Settle which of ``cfg.planner.posterior``'s candidate twins the run plans with, by
    ``cfg.planner.validate.episodes`` refined episodes each in the run's world (no monitor, nothing
    recorded). Returns the run's config planning with the winner (``planner.candidate``) and
    what ``summary.json`` says of it (``twin_validation``); the config no longer validates (it
    names its twin)."""
    from twinloop.run.build import build, controller_in_world
    from twinloop.run.compare import world_ticks
    from twinloop.run.planning import load_posterior, posterior_candidates
    from twinloop.run.sections import TwinValidationConfig

    check_validation(cfg)
    e = cfg.experiment
    off = replace(cfg.planner, validate=TwinValidationConfig())
    quiet = replace(cfg, monitor=None, planner=off, experiment=replace(e, record=False, video=False, view=False))
    task, world, _, refiner = build(quiet)
    try:
        post = load_posterior(quiet, refiner.twin.param_space)
        cands = [TwinCandidate(r["name"], r["kind"], task, None, note=r) for r in posterior_candidates(quiet, post)]
        choice = TwinChoice.from_dict(post.structure["choice"], cands)
        seeds = validation_seeds(cfg)
        log(f"closed-loop validation: the nominal twin and up to {cfg.planner.validate.top} candidates the prediction check "
            f"passed, {len(seeds)} episodes each (seeds {seeds[0]}..{seeds[-1]})")

        def controller_of(c: TwinCandidate):
            own, ctl = controller_in_world(replace(quiet, planner=replace(quiet.planner, candidate=c.name)), "refined")
            own.close()  # the episodes run in the one world below
            return ctl

        settled = closed_loop_choice(choice, cands, world, controller_of, seeds, top=cfg.planner.validate.top,
                                     max_ticks=world_ticks(quiet, task, world), log=log)
    finally:
        world.close()
    info = {"episodes": cfg.planner.validate.episodes, "top": cfg.planner.validate.top, "seeds": seeds,
            "chosen": settled.chosen.name, "reason": settled.reason,
            "scores": [s._asdict() for s in settled.closed_loop],
            "prediction_check_choice": choice.chosen.name}
    return replace(cfg, planner=replace(off, candidate=settled.chosen.name)), info


__all__ = ["check_validation", "closed_loop_choice", "validate_planning_twin", "validation_seeds"]
