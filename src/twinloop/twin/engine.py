"""Engine settings: the solver choices of a scene that are not physical parameters.

Two simulators of one scene can differ without any mass or friction changing: the integrator,
the friction cone, how soft contacts are (``solref``: time constant and damping ratio), how
many solver iterations run, the timestep. A cross-engine study asks whether a twin's verdicts
(which policy is better, which plan to take) survive such a swap. :class:`Engine` names one
setting of those knobs and writes it into a copy of a model::

    Engine(integrator="euler", timeconst=2.0).apply(model)     # a new MjModel
    Engine.parse("integrator=euler+timeconst=2")               # the same, from a CLI string

``timeconst`` multiplies every geom's contact time constant (``geom_solref[:, 0]``; 2 = twice
as soft); ``dampratio`` replaces its damping ratio (``geom_solref[:, 1]``); ``iterations`` is
the constraint solver's iteration limit; ``timestep`` replaces the physics step (it must
divide the task's control period).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields

import mujoco

from twinloop.errors import TwinloopError, choose

INTEGRATORS = {"euler": mujoco.mjtIntegrator.mjINT_EULER, "rk4": mujoco.mjtIntegrator.mjINT_RK4,
               "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
               "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST}
CONES = {"pyramidal": mujoco.mjtCone.mjCONE_PYRAMIDAL, "elliptic": mujoco.mjtCone.mjCONE_ELLIPTIC}


@dataclass(frozen=True)
class Engine:
    """One setting of the solver knobs; ``None`` / 1.0 keep the model's own.

    Attributes:
        integrator: ``euler`` | ``rk4`` | ``implicit`` | ``implicitfast``.
        cone: ``pyramidal`` | ``elliptic``.
        timeconst: factor on every geom's contact time constant (> 0).
        dampratio: every geom's contact damping ratio (> 0).
        iterations: constraint solver iterations (>= 1).
        timestep: physics timestep (s, > 0).
    """

    integrator: str | None = None
    cone: str | None = None
    timeconst: float = 1.0
    dampratio: float | None = None
    iterations: int | None = None
    timestep: float | None = None

    def __post_init__(self):
        if self.integrator is not None:
            choose("integrator", self.integrator, tuple(INTEGRATORS))
        if self.cone is not None:
            choose("cone", self.cone, tuple(CONES))
        if not self.timeconst > 0:
            raise TwinloopError(f"timeconst must be a factor > 0, got {self.timeconst}")
        if self.dampratio is not None and not self.dampratio > 0:
            raise TwinloopError(f"dampratio must be > 0, got {self.dampratio}")
        if self.iterations is not None and self.iterations < 1:
            raise TwinloopError(f"iterations must be >= 1, got {self.iterations}")
        if self.timestep is not None and not self.timestep > 0:
            raise TwinloopError(f"timestep must be > 0 s, got {self.timestep}")

    @classmethod
    def parse(cls, text: str) -> Engine:
        """``"knob=value+knob=value"`` (e.g. ``"cone=elliptic+timeconst=2"``); ``"default"`` or
        ``""`` is the model's own settings."""
        text = text.strip()
        if text in ("", "default"):
            return cls()
        kinds = {f.name: f for f in fields(cls)}
        kw: dict = {}
        for item in text.split("+"):
            key, sep, value = (s.strip() for s in item.partition("="))
            if not sep or key not in kinds:
                raise TwinloopError(f"engine setting {item!r}: use knob=value with a knob of {', '.join(kinds)}")
            try:
                kw[key] = value if key in ("integrator", "cone") else (int(value) if key == "iterations" else float(value))
            except ValueError as exc:
                raise TwinloopError(f"engine setting {item!r}: {value!r} is not a number") from exc
        return cls(**kw)

    @property
    def label(self) -> str:
        """``knob=value+...`` of the knobs that differ from the model's own (``default``)."""
        parts = [f"{f.name}={getattr(self, f.name):g}" if isinstance(getattr(self, f.name), float)
                 else f"{f.name}={getattr(self, f.name)}"
                 for f in fields(self) if getattr(self, f.name) != f.default]
        return "+".join(parts) or "default"

    def apply(self, model: mujoco.MjModel) -> mujoco.MjModel:
        """A copy of ``model`` with these settings (the original is untouched)."""
        m = copy.copy(model)
        if self.integrator is not None:
            m.opt.integrator = INTEGRATORS[self.integrator]
        if self.cone is not None:
            m.opt.cone = CONES[self.cone]
        if self.timeconst != 1.0:
            m.geom_solref[:, 0] *= self.timeconst
        if self.dampratio is not None:
            m.geom_solref[:, 1] = self.dampratio
        if self.iterations is not None:
            m.opt.iterations = self.iterations
        if self.timestep is not None:
            m.opt.timestep = self.timestep
        return m


__all__ = ["CONES", "INTEGRATORS", "Engine"]
