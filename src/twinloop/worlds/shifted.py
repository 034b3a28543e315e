"""A stand-in real world: the task's scene with hidden physics the twin does not know.

``ShiftedWorld(task, severity, seed)`` differs from the nominal twin by

- **physical parameters** (every parameter of ``task.param_space()``): each moved from its
  nominal value by a factor ``exp(d * m)``, with a seeded direction ``d = +-1`` and a
  magnitude ``m ~ U(0.7, 1) * LOG_SHIFT[severity]`` (a parameter whose nominal is 0 moves up
  by ``m / 4`` of its bound width), clipped to the parameter's bounds;
- **observation noise**: Gaussian, per observation entry (positions m, angles rad,
  velocities m/s or rad/s; none on dimensionless ``1`` entries, such as a grasp activation the
  robot commands), seeded by ``reset(seed)``;
- **actuation delay**: each action reaches the actuators ``delay_steps`` physics steps late
  (a queue of per-step controls, filled with the hold action at reset);
- at severity >= 3, **other solver settings**: Euler integrator instead of the twin's, an
  elliptic friction cone and contacts twice as soft (``geom_solref`` time constant x2), at the
  task's ``euler_step`` where it declares one (:func:`severe_engine`; the deformables' 2 ms, so
  that an explicit step integrates their gram-scale points stably) and at the scene's own
  timestep otherwise.

Severity 0 is the nominal twin exactly (no noise, no delay). Levels::

    severity          0     1      2 (demo)   3
    log-shift         0     0.2    0.45       0.8     (factors ~1.2, ~1.6, ~2.2)
    position noise    0     0.3mm  0.5mm      1mm
    angle noise       0     0.003  0.005      0.01 rad
    velocity noise    0     0.005  0.01       0.02 (m/s or rad/s)
    delay (steps)     0     2      4          8       (x timestep: 10, 20, 40 ms at 5 ms)

The delay is counted in steps of the task's timestep and kept in seconds when the severe
engine's step differs (:class:`TwinWorld` rescales it: 8 steps of 10 ms = 40 steps of 2 ms).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from twinloop.errors import TwinloopError, number
from twinloop.tasks.base import Task
from twinloop.twin.engine import Engine
from twinloop.worlds.base import check_task
from twinloop.worlds.twin import TwinWorld

LOG_SHIFT = (0.0, 0.2, 0.45, 0.8)
POS_NOISE = (0.0, 0.0003, 0.0005, 0.001)
ANG_NOISE = (0.0, 0.003, 0.005, 0.01)
VEL_NOISE = (0.0, 0.005, 0.01, 0.02)
DELAY_STEPS = (0, 2, 4, 8)
SEVERE_ENGINE = Engine(integrator="euler", cone="elliptic", timeconst=2.0)  # severity >= 3


def severe_engine(task: Task) -> Engine:
    """The solver settings of ``task``'s severity-3 world: :data:`SEVERE_ENGINE` at the task's
    ``euler_step`` (``None``: the scene's own timestep)."""
    return SEVERE_ENGINE if task.euler_step is None else replace(SEVERE_ENGINE, timestep=task.euler_step)


def shifted_params(task: Task, severity: int, seed: int) -> np.ndarray:
    """Hidden parameter values ``(n,)`` in the order of ``task.param_space()``."""
    space = task.param_space()
    rng = np.random.default_rng([seed, 1])
    d = rng.choice([-1.0, 1.0], len(space))
    m = LOG_SHIFT[severity] * rng.uniform(0.7, 1.0, len(space))
    nom, lo, hi = space.nominal, space.low, space.high
    up = nom + m / 4 * (hi - lo)  # for a nominal of 0, where a factor would do nothing
    v = np.where(nom > 0, nom * np.exp(d * m), up)
    return np.clip(v, lo, hi)


def noise_scales(task: Task, severity: int) -> np.ndarray:
    """Per-entry noise std from the units of the task's observation entries."""
    # "1": dimensionless entries the robot knows exactly (e.g. an actuator activation it commands)
    scale = {"m": POS_NOISE, "rad": ANG_NOISE, "m/s": VEL_NOISE, "rad/s": VEL_NOISE, "1": (0.0,) * 4}
    units = task.obs_units()
    if len(units) != len(task.obs_names) or not set(units) <= set(scale):
        raise TwinloopError(f"task {task.name!r}: obs_units() must give one of {sorted(scale)} per observation entry")
    return np.array([scale[u][severity] for u in units])


def shift_settings(task: Task, severity: int) -> dict:
    """What a shifted world of ``severity`` changes besides the physical parameters, as
    :class:`TwinWorld` keywords: actuation delay, observation noise, engine."""
    return {"delay_steps": DELAY_STEPS[severity], "obs_noise": noise_scales(task, severity),
            "engine": severe_engine(task) if severity >= 3 else None}


def nominal_counterpart(task: Task, severity: int, period: float | None = None) -> TwinWorld:
    """A shifted world of ``severity`` with the twin's own (nominal) parameters: its noise,
    delay and engine, none of its hidden physics. What the twin's one-tick gap looks like when
    its parameters are right (a gap monitor's threshold is calibrated there)."""
    return TwinWorld(task, **shift_settings(task, number(severity, "severity", low=0, high=3, integer=True)),
                     period=period)


class ShiftedWorld(TwinWorld):
    """The task's scene with seeded hidden physics, observation noise and actuation delay.

    Args:
        task: the task (its nominal model is the starting point).
        severity: 0 (identical to nominal) .. 3 (severe); 2 is the demo default.
        seed: draws the hidden parameter values (not the episodes: ``reset(seed)`` seeds
            the start state and the noise).
        period: world time per ``step`` (default: the task's control period), see
            :class:`SimWorld`.

    Attributes:
        hidden_params: ``(n,)`` true parameter values, order of ``param_space``.
        param_space: ``task.param_space()``.
        delay_steps: actuation delay in physics steps.
        obs_noise: ``(len(task.obs_names),)`` observation noise std.
    """

    name = "shifted"

    @staticmethod
    def counterpart(task: Task, severity: int = 2, period: float | None = None) -> TwinWorld:
        """:func:`nominal_counterpart` of ``severity``."""
        return nominal_counterpart(task, severity, period)

    def __init__(self, task: Task, severity: int = 2, seed: int = 0, period: float | None = None):
        check_task(task, type(self).__name__)
        if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or not 0 <= severity <= 3:
            raise TwinloopError(f"severity must be an integer 0..3, got {severity!r}")
        self.severity, self.seed = int(severity), number(seed, "world seed", low=0, integer=True)
        self.hidden_params = shifted_params(task, self.severity, self.seed)
        super().__init__(task, self.hidden_params, **shift_settings(task, self.severity), period=period)

    def describe(self) -> dict:
        """JSON-serializable summary of what is hidden from the twin."""
        return {**super().describe(), "severity": self.severity, "seed": self.seed}
