"""The configuration of ``twinloop evaluate`` (:mod:`twinloop.run.evaluate`): the policies, the
twin-worlds, the calibration, with the experiment section ``twinloop run`` uses."""

from __future__ import annotations

from dataclasses import dataclass, field

from twinloop.calib.fit import CalibConfig
from twinloop.errors import TwinloopError, choose, number
from twinloop.run.config import composed
from twinloop.run.policy import PolicySpec
from twinloop.run.sections import ExperimentConfig
from twinloop.twin import BACKENDS
from twinloop.twin.engine import Engine
from twinloop.worlds import WORLDS

TWINS = ("nominal", "calibrated", "calibrated-physics")

#: eight push-t policies from hopeless to strong (scripted with noise, refinement at growing K)
DEFAULT_POLICIES = (
    "scripted@noise=0.3", "scripted@noise=0.1", "scripted", "scripted+mppi@k=4", "scripted+mppi@k=8",
    "scripted+mppi@k=16", "scripted+mppi@k=32", "scripted+cem@k=32,iterations=2",
)


@composed()
@dataclass(frozen=True)
class EvaluateConfig:
    """Every choice of an evaluation (``twinloop evaluate``'s options are generated from these fields).

    Flat construction reaches the experiment's fields (``EvaluateConfig(task="block-push",
    episodes=2)``).

    Attributes:
        experiment: the task, the world the twin should predict (its ``severity``, its hidden
            physics seeded by ``world_seed``: 0 unless set; ``None`` is ``seed``), episodes per
            policy and side (the same seeds everywhere), the seed of the episodes (``seed *
            100000 + i``, as ``run``), calibration and bootstrap, the episode length, the output
            folder and whether the world episodes are written to ``out/episodes/world`` (none with
            ``world_from``) (:class:`~twinloop.run.sections.ExperimentConfig`).
        policies: policy specs (text form, see :mod:`twinloop.run.policy`); at least two.
        twins: the twin-worlds to compare (``nominal``, ``calibrated``, ``calibrated-physics``);
            the last one listed is the headline of ``summary["evaluation"]``.
        calib: the calibration of the calibrated twins (``delay_steps=None`` estimates the delay).
        calib_episodes: excitation episodes recorded in the world for calibration (at most
            10000, on seeds ``calib_seed * 100000 + 90000 + i``; the evaluation's episodes, at
            most 90000, stay below them).
        calib_ticks: their length (ticks).
        calib_seed: seeds the excitation episodes and the noise estimate (default: ``seed``); runs
            that pool into one evaluation (new seeds, same twin) pass the same one.
        posterior: a saved posterior (``posterior.json`` of ``twinloop calibrate``) to use
            instead of calibrating; ``"nominal"``: the nominal twin, uncalibrated.
        models: saved learned twins as more twin-worlds, ``backend=path`` (``learned=l.pt``,
            ``hybrid=h.pt``), each stepped as a :class:`~twinloop.worlds.twin.ModelWorld`.
        engines: engine variants for the cross-engine report (``Engine.parse`` strings).
        plan_states: world states at which refinement's selected plan is compared across engines.
        n_boot: bootstrap resamples.
        world_from: an earlier evaluation's ``summary.json`` whose world episodes are reused
            instead of running the world (see the module docstring for what must match).
    """

    experiment: ExperimentConfig = field(default_factory=lambda: ExperimentConfig(
        world_seed=0, episodes=10, out="twinloop-eval", video=False))
    policies: tuple[str, ...] = DEFAULT_POLICIES
    twins: tuple[str, ...] = ("nominal", "calibrated")
    calib: CalibConfig = field(default_factory=lambda: CalibConfig(method="cma", max_evals=300, delay_steps=None))
    calib_episodes: int = 10
    calib_ticks: int = 60
    calib_seed: int | None = None
    posterior: str | None = None
    models: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    plan_states: int = 30
    n_boot: int = 1000
    world_from: str | None = None

    def __post_init__(self):
        if not isinstance(self.experiment, ExperimentConfig):
            raise TwinloopError(f"experiment must be an ExperimentConfig, got {type(self.experiment).__name__}")
        choose("world", self.experiment.world, tuple(WORLDS))
        self.experiment.refuse("evaluate", world_per_episode=False, first_episode=0, video=False)
        for name in ("policies", "twins", "engines", "models"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if len(self.policies) < 2:
            raise TwinloopError(f"policies: need at least two to compare rankings, got {len(self.policies)}")
        specs = [PolicySpec.parse(p) for p in self.policies]
        labels = [s.label for s in specs]
        if len(set(labels)) != len(labels):
            raise TwinloopError(f"policies must differ, got duplicates in {labels}")
        if not self.twins:
            raise TwinloopError("twins: name at least one twin-world")
        for t in self.twins:
            choose("twin", t, TWINS)
        for e in self.engines:
            Engine.parse(e)
        for m in self.models:
            backend, sep, path = m.partition("=")
            choose("backend", backend, tuple(BACKENDS))
            if not sep or not path:
                raise TwinloopError(f"models: entries look like backend=path, got {m!r}")
        for name in ("calib_episodes", "calib_ticks", "n_boot"):
            if getattr(self, name) < 1:
                raise TwinloopError(f"{name} must be >= 1, got {getattr(self, name)}")
        # the seed's block: evaluation episodes below 90000, calibration's 90000-99999
        if self.experiment.episodes > 90_000 or self.calib_episodes > 10_000:
            raise TwinloopError(f"episodes <= 90000 and calib_episodes <= 10000 (each has its own range of episode "
                                f"seeds, seed * 100000 + i and calib_seed * 100000 + 90000 + i), got "
                                f"{self.experiment.episodes} and {self.calib_episodes}")
        if self.calib_seed is not None:
            object.__setattr__(self, "calib_seed", number(self.calib_seed, "calib_seed", low=0, integer=True))
        if self.plan_states < 0:
            raise TwinloopError(f"plan_states must be >= 0, got {self.plan_states}")
        if not isinstance(self.calib, CalibConfig):
            raise TwinloopError(f"calib must be a CalibConfig, got {type(self.calib).__name__}")

    def specs(self) -> list[PolicySpec]:
        return [PolicySpec.parse(p) for p in self.policies]

    def episode_seeds(self) -> list[int]:
        return [self.seed * 100_000 + i for i in range(self.episodes)]

    def calib_base_seed(self) -> int:
        return self.seed if self.calib_seed is None else self.calib_seed

    def calib_seeds(self) -> list[int]:
        return [self.calib_base_seed() * 100_000 + 90_000 + i for i in range(self.calib_episodes)]
