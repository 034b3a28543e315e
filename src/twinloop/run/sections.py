"""The sections the loops' configs share: the planner, the experiment, the grasp tasks' options.

Each field is defined here once, with its description (the help text of its command-line
option); ``RunConfig``, ``RSRConfig``, ``DistillConfig`` and ``EvaluateConfig`` hold the
sections they use (see :mod:`twinloop.run.config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from twinloop.control import RefinerConfig
from twinloop.errors import TwinloopError, choose, number
from twinloop.perception.model import SHIFTS
from twinloop.plan import OPTIMIZER_NAMES, LLMConfig
from twinloop.tasks import check_task, task_defaults
from twinloop.twin import BACKENDS
from twinloop.worlds import SEEDED_WORLDS, resolve_world


@dataclass(frozen=True)
class TwinValidationConfig:
    """The closed-loop validation of a posterior's candidate twins before a run's measured episodes.

    Attributes:
        episodes: with ``posterior`` a calibration that ranked candidate twins (``twinloop
            calibrate --structures``): before the measured episodes, the nominal twin and the
            ``top`` candidates its prediction check ranks best above the nominal twin each run
            this many refined episodes in the run's world, on seeds held out from the measured
            ones (``seed``), and the run plans with the one that controls best (more successes,
            then a smaller median final error) only if it controls strictly better than the
            nominal twin; ``summary.json`` (``twin_validation``) and the console say which and
            why. Costs up to ``episodes x (top + 1)`` episodes. 0: plan with the posterior's own
            choice.
        top: candidates the closed-loop validation runs besides the nominal twin.
        seed: the first validation episode's seed (``None``: the run's ``seed * 100000 +
            70000``); the validation's seeds must not meet the measured episodes' or the
            monitor's.
    """

    episodes: int = 0
    top: int = 3
    seed: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "episodes", number(self.episodes, "planner.validate.episodes", low=0, integer=True))
        object.__setattr__(self, "top", number(self.top, "planner.validate.top", low=0, integer=True))
        if self.seed is not None:
            object.__setattr__(self, "seed", number(self.seed, "planner.validate.seed", low=0, integer=True))


@dataclass(frozen=True)
class PlannerConfig:
    """How the refined controller plans: the optimizer, the twin and the refiner's knobs.

    Attributes:
        optimizer: a registered optimizer (``twinloop.plan.OPTIMIZERS``), or ``llm+<one of
            them>`` (a language model's plans join the batches; needs ``refiner.iterations >= 2``).
            ``None``: the task's (its ``planner.optimizer`` default: ``mppi``, ``predictive``
            for the arm tasks).
        noise: the optimizer's sampling noise, a fraction of each action's half-range. ``None``:
            the task's (its ``planner.noise`` default: 0.05 for the arm tasks), else the
            optimizer's own default.
        backend: the twin's rollout backend (``twinloop.twin.BACKENDS``).
        twin_timestep: the twin's physics timestep (s), coarser than the scene's to simulate
            fewer steps per tick (``None``, or not coarser than the scene's: the scene's);
            checked once for stability and candidate ranking.
        refiner: the refiner's knobs (K candidates, horizon, iterations per tick, risk, prune,
            carry, exact prior ...; :class:`~twinloop.control.RefinerConfig`).
        particles: parameter particles the refiner plans under (domain randomization): the
            nominal values and ``particles - 1`` draws from the task's parameter prior; each
            candidate's costs over them are aggregated by ``refiner.risk``. 0 or 1: the nominal
            twin. With ``posterior``: the posterior's first ``particles`` samples instead.
        posterior: a saved calibration (``posterior.json`` of ``twinloop calibrate``,
            ``evaluate`` or ``distill``) the refiner plans with: its estimate (or, with
            ``particles`` >= 2, its samples) in place of the nominal parameters. ``None``: the
            nominal twin.
        candidate: with ``posterior``, plan with this one of the candidate twins its structure
            choice ranked (``twinloop calibrate --structures``; its ``posterior.json`` names them:
            ``nominal``, ``calibrated``, ``contact:elliptic``, ``contact:elliptic+fit`` ...) instead
            of the one it chose. ``None``: its choice.
        validate: with ``posterior``, settle its candidate twins in closed loop before the
            measured episodes (:class:`TwinValidationConfig`; ``twinloop run`` only).
        llm: the language model of an ``llm+...`` optimizer (:class:`~twinloop.plan.LLMConfig`).
    """

    optimizer: str | None = None
    noise: float | None = None
    backend: str = "mujoco"
    twin_timestep: float | None = 0.01
    refiner: RefinerConfig = field(default_factory=lambda: RefinerConfig(num_samples=32, horizon=0.5))
    particles: int = 0
    posterior: str | None = None
    candidate: str | None = None
    validate: TwinValidationConfig = field(default_factory=TwinValidationConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)

    def __post_init__(self):
        if self.optimizer is not None:
            choose("optimizer", self.optimizer, OPTIMIZER_NAMES)
        choose("backend", self.backend, BACKENDS)
        object.__setattr__(self, "particles", number(self.particles, "particles", low=0, integer=True))
        if self.twin_timestep is not None:
            object.__setattr__(self, "twin_timestep", number(self.twin_timestep, "twin_timestep (s)", low=0,
                                                             low_open=True))
        if not isinstance(self.refiner, RefinerConfig):
            raise TwinloopError(f"refiner must be a RefinerConfig, got {type(self.refiner).__name__}")
        if self.candidate is not None and self.posterior is None:
            raise TwinloopError(f"candidate={self.candidate!r} names one of a posterior's candidate twins: give "
                                "posterior too")
        if not isinstance(self.validate, TwinValidationConfig):
            raise TwinloopError(f"validate must be a TwinValidationConfig, got {type(self.validate).__name__}")
        if not isinstance(self.llm, LLMConfig):
            raise TwinloopError(f"llm must be an LLMConfig, got {type(self.llm).__name__}")
        if self.optimizer is not None and self.optimizer.startswith("llm") and self.refiner.iterations < 2:
            raise TwinloopError(f"optimizer {self.optimizer!r} adds the model's plans to the next iteration's "
                                f"batch: it needs iterations >= 2, got {self.refiner.iterations}")

    def for_task(self, task: str) -> PlannerConfig:
        """This section with the optimizer and noise it leaves open filled in from the task's
        defaults (:attr:`Task.defaults <twinloop.tasks.Task.defaults>`), so a config names the
        ones that run."""
        d = task_defaults(task)
        optimizer = self.optimizer or d.get("planner.optimizer", "mppi")
        noise = self.noise if self.noise is not None else d.get("planner.noise")
        if (optimizer, noise) == (self.optimizer, self.noise):
            return self
        return replace(self, optimizer=optimizer, noise=noise)


@dataclass(frozen=True)
class ExperimentConfig:
    """What runs where: the task, the world, the episodes and their seeds, the outputs.

    Attributes:
        task: a registered task (``twinloop.tasks.TASKS``).
        world: a registered world (``twinloop.worlds.WORLDS``): ``shifted`` (hidden physics,
            noise, delay) | ``nominal`` (the twin itself) | ``gym`` / ``gym:ENV_ID`` /
            ``gym:MODULE:ENV_ID`` (a gymnasium env through the task's maps; ``MODULE`` is
            imported first, which registers a third-party env) | ``remote:ADDRESS``
            (``serve-world``).
        severity: ShiftedWorld severity (0-3).
        world_seed: seed of the world's hidden physics, if not ``seed``: new episodes (another
            ``seed``) in the same world. ``None``: ``seed``. Not with ``world_per_episode``.
        world_per_episode: a world distribution: each episode in its own world, whose world seed
            is the episode's seed (``seed * 100000 + index``); every controller meets the same
            world on the same episode. Needs a world a seed draws (``shifted``). With ``seed`` 0
            the worlds are world seeds 0, 1, ...: a single world ``world_seed=k`` is held out
            from such a run only if ``k`` is at least its episode count.
        episodes: episodes per controller.
        first_episode: index of the first episode: a run split into pieces (``first_episode``
            0 and 10 of ``episodes`` 10) runs the episodes one run of 20 does. ``first_episode +
            episodes`` is at most 100000, the seed's block of episode seeds.
        seed: seeds the world's hidden physics (unless ``world_seed``) and, with the episode
            index, each episode (``seed * 100000 + i``).
        max_ticks: episode length in control ticks (``None``: the task's).
        out: output folder; must be new or empty unless overwritten.
        record: write every episode as Parquet (``out/episodes``).
        video: render one refined episode with ghost rollouts.
        view: serve a live view of the episodes in the browser while they run (needs the
            ``view`` extra: ``pip install 'twinloop[view]'``): the scene, each tick's candidate
            rollouts, the cost, success and gap over time, which plan was sent and why, and
            the refined controller's planner settings as controls. Serial executor only; not
            in real time.
        view_port: the live view's port (0: any free port; the URL is printed).
        view_host: the live view's address (``0.0.0.0`` serves every network interface).
    """

    task: str = "push-t"
    world: str = "shifted"
    severity: int = 2
    world_seed: int | None = None
    world_per_episode: bool = False
    episodes: int = 20
    first_episode: int = 0
    seed: int = 0
    max_ticks: int | None = None
    out: str = "twinloop-out"
    record: bool = True
    video: bool = True
    view: bool = False
    view_port: int = 8080
    view_host: str = "127.0.0.1"

    def __post_init__(self):
        check_task(self.task)
        object.__setattr__(self, "view_port", number(self.view_port, "view_port", low=0, high=65535, integer=True))
        resolve_world(self.world)
        object.__setattr__(self, "episodes", number(self.episodes, "episodes", low=1, integer=True))
        object.__setattr__(self, "first_episode", number(self.first_episode, "first_episode", low=0, high=99_999,
                                                         integer=True))
        if self.first_episode + self.episodes > 100_000:  # past it, the next seed's episodes
            raise TwinloopError("first_episode + episodes must be <= 100000 (a seed's block of episode seeds, "
                                f"seed * 100000 + index), got {self.first_episode} + {self.episodes}")
        object.__setattr__(self, "severity", number(self.severity, "severity", low=0, high=3, integer=True))
        object.__setattr__(self, "seed", number(self.seed, "seed", low=0, integer=True))
        if self.world_seed is not None:
            object.__setattr__(self, "world_seed", number(self.world_seed, "world_seed", low=0, integer=True))
            if self.world_per_episode:
                raise TwinloopError(f"world_seed={self.world_seed} names one world, but world_per_episode draws each "
                                    "episode's world from the episode's seed: pass one of them")
        if self.max_ticks is not None:
            object.__setattr__(self, "max_ticks", number(self.max_ticks, "max_ticks", low=1, integer=True))
        if self.world_per_episode and self.world not in SEEDED_WORLDS:
            raise TwinloopError(f"world_per_episode draws each episode's world from a seed; world {self.world!r} "
                                f"takes none (seeded worlds: {', '.join(SEEDED_WORLDS)})")

    @property
    def one_world_seed(self) -> int:
        """The seed of the run's one world: ``world_seed``, else ``seed``."""
        return self.seed if self.world_seed is None else self.world_seed

    def episode_seeds(self) -> list[int]:
        """The episodes' seeds: ``seed * 100000 + first_episode + i``."""
        return [self.seed * 100_000 + self.first_episode + i for i in range(self.episodes)]

    def refuse(self, loop: str, **unused) -> None:
        """Raise if a field this loop does not use was changed from ``unused``'s value."""
        for name, value in unused.items():
            if getattr(self, name) != value:
                raise TwinloopError(f"{loop} does not use experiment.{name} (got {getattr(self, name)!r})")


@dataclass(frozen=True)
class GraspConfig:
    """The grasp tasks' options of the refined controller (cloth-fold, rope-shape).

    Attributes:
        repair: offer the task's local repair (:meth:`Task.repair_primitive
            <twinloop.tasks.Task.repair_primitive>`: re-grasp or place a misplaced point near its
            goal) to the refined controller each tick, beside the proposal samples; the base row
            is the proposer alone either way. A task without one is refused.
        push: with ``repair``, how many pushes of the points farthest from their goals the
            repair offers besides the grasped point's (0: none).
        reach: with ``repair``, how far (m, horizontally) from its goal a point is still
            repaired (``None``: the task's, 12 cm).
        regrasp_reach: with ``repair``, the same for a re-grasp of a point let go (``None``:
            ``reach``): a dropped point is re-grasped from farther while a place stays within
            ``reach``.
        commit: with ``repair``, carry a repair on once sent unless a plan costs less by more
            than this fraction of its cost (``None``: off, each tick rates the repairs afresh).
            Not in real time.
        observer: the refined controller estimates the state with the task's stateful observer
            (the last estimate predicted a tick ahead in the twin, at the planning parameters'
            first particle, and corrected to the keypoints) instead of from each observation
            alone; the base controller keeps the stateless map. Not in real time.
        twin_resolution: the refined controller plans in a twin whose deformable has this
            resolution (cloth-fold: towel vertices per side, 3 5 7 9, the world's 5; rope-shape:
            rope links, 4 8 16, the world's 8), the same object (size, mass, material) and
            keypoints: its proposer, estimator, twin and cost all work at that resolution from
            the world's keypoint observations (:mod:`twinloop.tasks.resolution`); the base row
            is unchanged. ``None``: the world's resolution. Not with parameter particles or a
            posterior (their values are the world mesh's).
    """

    repair: bool = False
    push: int = 0
    reach: float | None = None
    regrasp_reach: float | None = None
    commit: float | None = None
    observer: bool = False
    twin_resolution: int | None = None

    def __post_init__(self):
        if self.twin_resolution is not None:
            object.__setattr__(self, "twin_resolution", number(self.twin_resolution, "twin_resolution", low=2,
                                                               integer=True))
        object.__setattr__(self, "push", number(self.push, "repair_push", low=0, integer=True))
        if self.push and not self.repair:
            raise TwinloopError(f"repair_push={self.push} needs repair=True")
        for name, low_open in (("reach", True), ("regrasp_reach", True), ("commit", False)):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, number(v, f"repair_{name}", low=0.0, low_open=low_open))
                if not self.repair:
                    raise TwinloopError(f"repair_{name}={v} needs repair=True")


@dataclass(frozen=True)
class CameraConfig:
    """How a run from camera images (``observe='rgb'``) reads them.

    Attributes:
        perception: the perception checkpoint (``twinloop perception train``) that reads the
            images; ``None``: the task's shipped model (``push-t``, ``rope-shape``, ``cloth-fold``).
        appearance: the appearance shift's severity (0..3; ``None``: the world's ``severity``),
            drawn by the world's seed.
        shifts: how many copies of each image the perception model reads, the image and the
            image moved by 1 px, its estimates averaged (test-time shift averaging,
            :attr:`~twinloop.perception.Perception.shifts`: 1 to 4; 1: the image only). Costs that
            many forward passes a frame.
    """

    perception: str | None = None
    appearance: int | None = None
    shifts: int = 1

    def __post_init__(self):
        if self.appearance is not None:
            object.__setattr__(self, "appearance", number(self.appearance, "appearance", low=0, high=3, integer=True))
        object.__setattr__(self, "shifts", number(self.shifts, "camera.shifts", low=1, high=len(SHIFTS), integer=True))
