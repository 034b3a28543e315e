"""The configuration of ``twinloop calibrate``: which episodes, which parameters, which fit."""

from __future__ import annotations

from dataclasses import dataclass, field

from twinloop.calib.fit import CalibConfig
from twinloop.errors import TwinloopError, choose, number
from twinloop.run.config import composed
from twinloop.tasks import check_task


@composed()
@dataclass(frozen=True)
class CalibrateConfig:
    """Every choice of a calibration from recorded episodes (``twinloop calibrate``'s options are
    generated from these fields).

    Attributes:
        task: the task the episodes were recorded on (``None``: the dataset's own; needed for
            LeRobot data).
        params: the parameters to fit (``None``: the task's parameter space).
        kinds: build the space from the scene instead: parameter kinds or groups (``mass``,
            ``sliding``, ``kp`` ...; see ``twinloop.params.KINDS``).
        bodies: with ``kinds``, the bodies (``None``: every moving body).
        calib: the fit (:class:`~twinloop.calib.fit.CalibConfig`): its method, windows, budget,
            held-out share and seed; the replay's actuation delay is estimated unless given, and
            so is the noise on the recorded starts (``noise_from_data``; compare with
            ``benchmarks/param_recovery.py --noise-from-data``).
        lerobot: read foreign LeRobot Parquet instead of a twinloop dataset.
        column_map: LeRobot columns, e.g. ``obs=observation.state,action=action``.
        fps: frames per second of LeRobot data without timestamps (``None``: the task's).
        out: output folder (``summary.json``, ``posterior.json``); must be new or empty unless
            overwritten.
        structures: contact models (``twinloop.calib.structure.CONTACT_MODELS``: elliptic,
            hard, soft, condim-4, elliptic-hard, noslip) to rank, each with the nominal values and
            with the fit, against the nominal twin and the fit by the control check on the
            held-out episodes; the best (the nominal twin unless one beats it) is recorded in
            ``posterior.json`` and ``summary.json`` (``structure``), and ``twinloop run
            --posterior`` plans with it; every ranked candidate is kept (``structure.candidates``)
            for ``run --set planner.validate.episodes=N`` to settle the choice in closed loop. Needs held-out
            episodes (``holdout``).
    """

    task: str | None = None
    params: tuple[str, ...] | None = None
    kinds: tuple[str, ...] | None = None
    bodies: tuple[str, ...] | None = None
    calib: CalibConfig = field(default_factory=lambda: CalibConfig(delay_steps=None, holdout_fraction=0.2,
                                                                  noise_from_data=True))
    lerobot: bool = False
    column_map: str = ""
    fps: float | None = None
    out: str = "twinloop-calib"
    structures: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.task is not None:
            check_task(self.task)
        for name in ("params", "kinds", "bodies", "structures"):
            v = getattr(self, name)
            object.__setattr__(self, name, tuple(v) or None if v is not None else None)
        if self.bodies and not self.kinds:
            raise TwinloopError(f"bodies={list(self.bodies)} choose the bodies of kinds: give kinds too")
        if not isinstance(self.calib, CalibConfig):
            raise TwinloopError(f"calib must be a CalibConfig, got {type(self.calib).__name__}")
        if self.structures:
            from twinloop.calib.structure import CONTACT_MODELS

            for name in self.structures:
                choose("structures", name, tuple(CONTACT_MODELS))
            if self.params or self.kinds:
                raise TwinloopError("structures rank fits of the task's own parameter space: drop params and kinds")
            if not self.calib.holdout_fraction > 0:
                raise TwinloopError("structures are chosen on held-out episodes: give holdout > 0")
        if self.fps is not None:
            object.__setattr__(self, "fps", number(self.fps, "fps", low=0, low_open=True))
