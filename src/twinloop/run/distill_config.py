"""The configuration of the distill loop (:mod:`twinloop.run.distill`): its choices, with the
planner and experiment sections ``twinloop run`` uses."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from twinloop.calib.fit import CalibConfig
from twinloop.errors import TwinloopError, choose, number
from twinloop.plan import OPTIMIZERS
from twinloop.policies.distilled import PolicyConfig
from twinloop.run.config import composed
from twinloop.run.evaluate import NOMINAL_TWIN
from twinloop.run.sections import ExperimentConfig, PlannerConfig

WORLDS = ("shifted", "nominal")
TEACHERS = ("scripted", "policy")
#: refinement without a learned base policy, swept over K once: controller name -> proposer
BASELINES = {"refined": "none", "scripted+refined": "scripted"}
#: refined success within this of the sweep's best counts as "as good" for ``min_k``
MIN_K_TOLERANCE = 0.05
#: the ``twin_worlds`` value whose twin-worlds draw their parameters from the task's prior
PRIOR_TWINS = "prior"


@composed({"posterior": "twin_worlds"})
@dataclass(frozen=True)
class DistillConfig:
    """Every choice of a distill run (``twinloop distill``'s options are generated from these fields).

    The planner and the experiment are the sections ``twinloop run`` uses, with its defaults
    (the task's, K=32, 0.5 s horizon, 10 ms twin steps); flat construction reaches their fields
    (``DistillConfig(task="pivot", episodes=2)``; ``posterior=`` sets ``twin_worlds``).

    Attributes:
        experiment: the task, the world the policies are evaluated in and world data come from
            (``shifted`` | ``nominal``, its ``severity``; its hidden physics seeded by
            ``world_seed``, ``None``: ``seed``), evaluation episodes per controller (the same
            seeds every round), their length, the seed of episodes, calibration and training, and
            the output folder (:class:`~twinloop.run.sections.ExperimentConfig`).
        planner: the teacher's and the evaluated controllers' planner
            (:class:`~twinloop.run.sections.PlannerConfig`); ``refiner.num_samples`` is K.
        proposal_samples: policy samples offered to the refiner each tick (they join the first
            batch of any optimizer; see :meth:`~twinloop.control.Refiner.refine`).
        calib: calibration of the twin-worlds the twin data come from.
        calib_episodes: excitation episodes recorded in the world for it.
        calib_ticks: their length (ticks).
        twin_worlds: a saved posterior (``posterior.json``) to use instead of calibrating;
            ``"nominal"``: no calibration, every twin-world is the nominal twin (nominal
            parameters, no delay, no observation noise): a policy trained on the model alone;
            ``"prior"`` (:data:`PRIOR_TWINS`): no calibration either, each twin-world draws its
            parameters from the task's prior (:meth:`~twinloop.params.ParamSpace.sample_prior`,
            seeded by ``seed`` and the world's index; no delay, no observation noise): domain
            randomization, a policy trained on a spread of models and none fitted to the world.
        prior_shift: with ``twin_worlds="prior"`` or ``"nominal"``, each twin-world also draws a
            shift level 0-3 (uniformly, from the same seeded stream) and takes that level's
            actuation delay and observation noise (:func:`~twinloop.worlds.shifted.shift_settings`:
            0-40 ms, the shift model's whole range; not its engine): latency and sensor noise
            randomized too (with ``"nominal"``: around the nominal physics, which stays fixed).
        teacher: who labels twin states: ``scripted`` (the task's scripted proposer refined at
            K; refinement alone for a task without one) | ``policy`` (the current policy
            refined at K; round 1's data always come from the scripted teacher).
        teacher_warm: the teacher starts each tick's refinement from its last plan shifted
            (MPPI then samples around a mix of it and the proposal). False: from the proposal
            alone, so that a label depends on the state and that tick's samples, not on the
            teacher's earlier plans, which the learner never sees (and, under DAgger, were
            never executed).
        collect: teacher episodes in twin-worlds before round 1 (about 1 s each on shifted
            push-t at K=32: the cheapest data there is).
        collect_noise: standard deviation of the noise added to the teacher's actions while
            collecting, a fraction of each action's range (DART: its labels then show how to
            recover from a learner's errors); 0: none.
        twin_dagger: episodes after each round but the last in which the policy alone drives in
            twin-worlds and the teacher labels its states.
        dagger_episodes: episodes after each round but the last of policy + refinement in the
            world (robot time), its refined plans as labels.
        episodes: evaluation episodes per controller (the same seeds every round).
        alone_episodes: evaluation episodes of the policy alone, the first of the same seeds
            (``None``: ``episodes``); alone is cheap (no refinement), so a task may ask for more
            episodes there than for its refined controllers, where a round's rise is measured.
        rounds: R, train/evaluate/aggregate rounds.
        k_sweep: Ks at which policy + refinement (and the baselines) are evaluated (K itself
            is always included).
        baselines: refinement without the learned policy swept over the Ks once: ``refined``
            (no proposer) and ``scripted+refined`` (the scripted proposer refined).
        goal_success: the success level ``k_at_goal`` asks for.
        policy: the distilled policy's architecture and training (``chunk=None``: the
            refiner's horizon; its ``seed`` becomes ``seed``). The default holds out 10% of
            the episodes and keeps the weights of the lowest held-out loss, stopping after 4
            evaluations without one (at most 6000 steps): on 40 push-t teacher episodes the
            held-out loss is lowest after 500 steps and 3.4x higher after 3000. A task's defaults
            may choose another learner (push-t's: a residual memory in the block's frame).
    """

    experiment: ExperimentConfig = field(default_factory=lambda: ExperimentConfig(out="twinloop-distill",
                                                                                  video=False))
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    proposal_samples: int = 0
    calib: CalibConfig = field(default_factory=lambda: CalibConfig(method="cma", max_evals=200, delay_steps=None))
    calib_episodes: int = 10
    calib_ticks: int = 60
    twin_worlds: str | None = None
    prior_shift: bool = False
    teacher: str = "scripted"
    teacher_warm: bool = True
    collect: int = 400
    collect_noise: float = 0.0
    twin_dagger: int = 40
    dagger_episodes: int = 10
    alone_episodes: int | None = None
    rounds: int = 3
    k_sweep: tuple[int, ...] = (4, 8, 16, 32)
    baselines: tuple[str, ...] = tuple(BASELINES)
    goal_success: float = 0.9
    policy: PolicyConfig = field(default_factory=lambda: PolicyConfig(steps=6000, val_fraction=0.1, patience=4))

    def __post_init__(self):
        for name, kind in (("planner", PlannerConfig), ("experiment", ExperimentConfig), ("policy", PolicyConfig),
                           ("calib", CalibConfig)):
            if not isinstance(getattr(self, name), kind):
                raise TwinloopError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        e = self.experiment
        choose("world", e.world, WORLDS)
        e.refuse("distill", world_per_episode=False, first_episode=0, video=False, record=True)
        if self.planner.particles or self.planner.posterior is not None:
            raise TwinloopError("distill plans in its twin-worlds' nominal twin: planner.particles and "
                                "planner.posterior are not used (twin_worlds chooses the twin-worlds)")
        planner = self.planner.for_task(e.task)
        choose("optimizer", planner.optimizer, tuple(OPTIMIZERS))
        if planner.noise is not None:
            number(planner.noise, "noise", low=0, low_open=True)
        object.__setattr__(self, "planner", planner)
        self._check_counts()
        object.__setattr__(self, "k_sweep", tuple(sorted({*self.k_sweep, self.planner.refiner.num_samples})))
        if self.prior_shift and self.twin_worlds not in (PRIOR_TWINS, NOMINAL_TWIN):
            raise TwinloopError(f"prior_shift randomizes uncalibrated twin-worlds: it needs posterior={PRIOR_TWINS!r} "
                                f"or {NOMINAL_TWIN!r}, got {self.twin_worlds!r}")

    def _check_counts(self) -> None:
        choose("teacher", self.teacher, TEACHERS)
        object.__setattr__(self, "baselines", tuple(self.baselines))
        for b in self.baselines:
            choose("baseline", b, tuple(BASELINES))
        for name, low in (("rounds", 1), ("collect", 1), ("twin_dagger", 0), ("dagger_episodes", 0),
                          ("proposal_samples", 0), ("calib_episodes", 1), ("calib_ticks", 2)):
            object.__setattr__(self, name, number(getattr(self, name), name, low=low, integer=True))
        object.__setattr__(self, "goal_success", number(self.goal_success, "goal_success", low=0, high=1))
        if self.alone_episodes is not None:
            object.__setattr__(self, "alone_episodes", number(self.alone_episodes, "alone_episodes", low=1,
                                                              high=50_000, integer=True))
        object.__setattr__(self, "collect_noise", number(self.collect_noise, "collect_noise", low=0, high=1))
        object.__setattr__(self, "k_sweep", tuple(number(k, "k_sweep value", low=2, integer=True) for k in self.k_sweep))
        # the seed ranges below must not overlap: twin DAgger's rounds are 2000 apart, the world's 1000,
        # and the last round's twin DAgger must stay below calibration's seeds
        if (self.experiment.episodes > 50_000 or self.collect > 9_000 or self.twin_dagger > 2_000
                or self.dagger_episodes > 1_000 or self.rounds > 10 or self.calib_episodes > 10_000):
            raise TwinloopError("episodes <= 50000, collect <= 9000, twin_dagger <= 2000 a round, dagger_episodes "
                                "<= 1000 a round, rounds <= 10 and calib_episodes <= 10000 (each purpose has its own "
                                "range of episode seeds)")
        if self.rounds > 1 and self.twin_dagger + self.dagger_episodes < 1:
            raise TwinloopError("rounds > 1 need twin_dagger or dagger_episodes >= 1 (no new data otherwise)")

    def policy_config(self, task) -> PolicyConfig:
        ticks = max(1, int(round(self.refiner.horizon / task.control_period)))
        return replace(self.policy, seed=self.seed, chunk=self.policy.chunk or ticks)

    # one seed range per purpose, so evaluation never sees a training episode's start
    def eval_seeds(self, alone: bool = False) -> list[int]:
        n = self.alone_episodes if alone and self.alone_episodes is not None else self.episodes
        return [self.seed * 100_000 + i for i in range(n)]

    def collect_seeds(self) -> list[int]:
        return [self.seed * 100_000 + 50_000 + i for i in range(self.collect)]

    def dagger_seeds(self, round_: int) -> list[int]:
        return [self.seed * 100_000 + 60_000 + 1_000 * round_ + i for i in range(self.dagger_episodes)]

    def twin_dagger_seeds(self, round_: int) -> list[int]:
        return [self.seed * 100_000 + 70_000 + 2_000 * round_ + i for i in range(self.twin_dagger)]

    def calib_seeds(self) -> list[int]:
        return [self.seed * 100_000 + 90_000 + i for i in range(self.calib_episodes)]
