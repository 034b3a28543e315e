"""The outer loop: distill refined actions into a base policy, refine around it, repeat.

Round 1 trains on refined episodes collected in the nominal twin (the refined controller
acting in ``SimWorld(task)``). Each round then::

    policy_r   = fit(all demos so far)
    evaluate   policy_r alone, and policy_r + refinement at K (and at each K of the sweep),
               in the world, on the same evaluation seeds every round
    aggregate  the refined controller's actions at the states policy_r + refinement visited
               in the world (DAgger-style: new seeds, never the evaluation ones)

so the refined actions taken in the world become training data for the next base policy.
Per round it records the base policy's success, the refined success at K, and ``min_k``: the
smallest K of the sweep whose refined success is within 5 points of the sweep's best.

Writes to ``cfg.out``: ``summary.json`` (shared schema + ``rounds``), ``policy_round<r>.pt``,
``comparison.png`` and ``rounds.png`` (when the plotting module is present).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.errors import TwinloopError, choose, number
from twinloop.io import output_folder, write_json
from twinloop.plan import OPTIMIZERS, make_optimizer
from twinloop.policies.distilled import Demo, DistilledPolicy, PolicyConfig
from twinloop.run.experiment import run_episodes, summarize
from twinloop.stats import wilson
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.viz.plots import plot_comparison, plot_rounds
from twinloop.worlds import SimWorld, make_world

WORLDS = ("shifted", "nominal")
#: refined success within this of the sweep's best counts as "as good" for ``min_k``
MIN_K_TOLERANCE = 0.05

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class DistillConfig:
    """Every choice of a distill run (``twinloop distill`` mirrors these fields).

    Attributes:
        task: ``push-t`` | ``block-push``.
        world: world the policies are evaluated in: ``shifted`` | ``nominal``.
        severity: ShiftedWorld severity (0-3).
        collect: refined episodes collected in the nominal twin to train round 1.
        episodes: evaluation episodes per controller (same seeds every round).
        dagger_episodes: episodes of policy + refinement in the world whose refined actions are
            added to the training data after each round but the last.
        rounds: R, train/evaluate/aggregate rounds.
        refiner: the refiner's knobs; ``refiner.num_samples`` is K, the candidates per refine
            iteration.
        k_sweep: Ks at which policy + refinement is also evaluated to find ``min_k`` (empty:
            skip; K itself is always included).
        optimizer: ``mppi`` | ``cem`` | ``predictive`` | ``best_of_n``.
        proposal_samples: policy samples offered to the optimizer each tick (best-of-N uses them).
        baseline: also evaluate refinement without a base policy (controller ``refined``).
        policy: the distilled policy's architecture and training (its ``seed`` becomes ``seed``).
        max_ticks: episode length (default: the task's).
        seed: seeds the world's hidden physics, the episodes and training.
        out: output folder.
    """

    task: str = "push-t"
    world: str = "shifted"
    severity: int = 2
    collect: int = 10
    episodes: int = 10
    dagger_episodes: int = 10
    rounds: int = 1
    refiner: RefinerConfig = field(default_factory=lambda: RefinerConfig(num_samples=32))
    k_sweep: tuple[int, ...] = (8, 16, 32)
    optimizer: str = "mppi"
    proposal_samples: int = 0
    baseline: bool = True
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    max_ticks: int | None = None
    seed: int = 0
    out: str = "twinloop-distill"

    def __post_init__(self):
        choose("world", self.world, WORLDS)
        choose("optimizer", self.optimizer, tuple(OPTIMIZERS))
        for name, low in (("collect", 1), ("episodes", 1), ("rounds", 1), ("dagger_episodes", 0),
                          ("proposal_samples", 0), ("seed", 0)):
            object.__setattr__(self, name, number(getattr(self, name), name, low=low, integer=True))
        object.__setattr__(self, "severity", number(self.severity, "severity", low=0, high=3, integer=True))
        if self.max_ticks is not None:
            object.__setattr__(self, "max_ticks", number(self.max_ticks, "max_ticks", low=1, integer=True))
        object.__setattr__(self, "k_sweep", tuple(number(k, "k_sweep value", low=2, integer=True) for k in self.k_sweep))
        if self.episodes > 50_000 or self.collect > 10_000 or self.dagger_episodes > 1_000:
            raise TwinloopError("episodes <= 50000, collect <= 10000 and dagger_episodes <= 1000 (seed ranges)")
        if self.rounds > 1 and self.dagger_episodes < 1:
            raise TwinloopError("rounds > 1 need dagger_episodes >= 1 (no new data otherwise)")
        for name, kind in (("refiner", RefinerConfig), ("policy", PolicyConfig)):
            if not isinstance(getattr(self, name), kind):
                raise TwinloopError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        object.__setattr__(self, "k_sweep", tuple(sorted({int(k) for k in self.k_sweep})))

    def policy_config(self) -> PolicyConfig:
        return replace(self.policy, seed=self.seed)

    # one seed range per purpose, so evaluation never sees a training episode's start
    def eval_seeds(self) -> list[int]:
        return [self.seed * 100_000 + i for i in range(self.episodes)]

    def collect_seeds(self) -> list[int]:
        return [self.seed * 100_000 + 50_000 + i for i in range(self.collect)]

    def dagger_seeds(self, round_: int) -> list[int]:
        return [self.seed * 100_000 + 60_000 + 1_000 * round_ + i for i in range(self.dagger_episodes)]


class _Recording:
    """A controller that also keeps what it saw and did: the behaviour-cloning labels."""

    def __init__(self, controller: Controller):
        self.controller, self.task = controller, controller.task
        self._obs: list[np.ndarray] = []
        self._act: list[np.ndarray] = []

    @property
    def last(self):
        return self.controller.last

    @property
    def n_fallbacks(self) -> int:
        return self.controller.n_fallbacks

    def reset(self, seed: int | None = None) -> None:
        self._obs, self._act = [], []
        self.controller.reset(seed)

    def stop(self) -> None:
        self.controller.stop()

    def act(self, obs, info: dict | None = None) -> np.ndarray:
        a = self.controller.act(obs, info)
        self._obs.append(np.array(obs, dtype=float))
        self._act.append(np.array(a, dtype=float))
        return a

    def demo(self, success: bool) -> Demo:
        return Demo(np.stack(self._obs), np.stack(self._act), bool(success))


def min_k(success: dict[int, float], tolerance: float = MIN_K_TOLERANCE) -> int | None:
    """Smallest K whose success rate is within ``tolerance`` of the best rate (None if empty)."""
    if not success:
        return None
    best = max(success.values())
    return min(k for k, s in success.items() if s >= best - tolerance - 1e-12)


class DistillRun:
    """State of one distill run: task, world, twin, data, and the episode runner."""

    def __init__(self, cfg: DistillConfig, progress: Progress | None = None, log: Callable[[str], None] = print):
        self.cfg, self.progress, self.log = cfg, progress, log
        self.task = make_task(cfg.task)
        self.world = make_world(self.task, cfg.world, severity=cfg.severity, seed=cfg.seed)
        self.twin = make_twin("mujoco", self.task.model, self.task.param_space())
        self.demos: list[Demo] = []
        self.last_loss = float("nan")

    def refiner(self, k: int) -> Refiner:
        rcfg = replace(self.cfg.refiner, num_samples=k)
        return Refiner(self.task, self.twin, make_optimizer(self.cfg.optimizer), rcfg)

    def controller(self, policy: DistilledPolicy | None, k: int, refine: bool = True) -> Controller:
        n_prop = self.cfg.proposal_samples if policy is not None else 0
        return Controller(self.refiner(k), policy, refine=refine, proposal_samples=n_prop)

    def episodes(self, label: str, world, controller: Controller, seeds: Sequence[int], keep: bool = False):
        """Run one episode per seed; ``keep`` adds each episode's (obs, action) to the demos."""
        ctl = _Recording(controller) if keep else controller
        done = []

        def after(r):
            if keep:
                self.demos.append(ctl.demo(r.success))
            done.append(r)
            if self.progress is not None:
                self.progress(label, len(done), len(seeds))

        return run_episodes(world, ctl, seeds, max_ticks=self.cfg.max_ticks, record=False, progress=after)

    def train(self, round_: int) -> DistilledPolicy:
        label = f"train r{round_}"
        cb = None
        if self.progress is not None:
            def cb(epoch, loss):
                self.progress(label, epoch, self.cfg.policy.epochs)
        policy, log = DistilledPolicy.fit(self.task, self.demos, self.cfg.policy_config(), progress=cb)
        self.last_loss = log.losses[-1]
        self.log(f"round {round_}: trained on {len(self.demos)} episodes ({log.samples} ticks), "
                 f"loss {log.losses[0]:.3f} -> {log.losses[-1]:.3f} in {log.seconds:.0f} s")
        return policy


def run_distill(cfg: DistillConfig, progress: Progress | None = None, log: Callable[[str], None] = print,
                mode: str = "new") -> dict:
    """Collect in the twin, then ``cfg.rounds`` of train -> evaluate -> aggregate; write outputs.

    ``progress(label, done, total)`` is called after each episode and epoch (progress bars).
    ``mode``: ``new`` needs an absent or empty ``cfg.out``; ``overwrite`` replaces an earlier
    run there (see :func:`twinloop.io.output_folder`).
    Returns the summary written to ``cfg.out/summary.json``.
    """
    t_start = time.perf_counter()
    run = DistillRun(cfg, progress, log)
    out = output_folder(cfg.out, mode)  # before the first episode: a bad --out fails now
    task, world, K = run.task, run.world, cfg.refiner.num_samples
    eval_seeds = cfg.eval_seeds()

    # round 1's data: the refined controller acting in the nominal twin
    collected = run.episodes("collect", SimWorld(task), run.controller(None, K), cfg.collect_seeds(), keep=True)
    log(f"collected {len(collected)} refined episodes in the twin: "
        f"{sum(r.success for r in collected)}/{len(collected)} succeeded")

    results: dict[str, list] = {}
    if cfg.baseline:
        results["refined"] = run.episodes("refined", world, run.controller(None, K), eval_seeds)

    summary = {
        "task": task.name,
        "world": world.describe(),
        "seed": cfg.seed,
        "episodes": cfg.episodes,
        "config": asdict(cfg),
        "collect": {"episodes": len(collected), "successes": int(sum(r.success for r in collected))},
        "rounds": [],
    }
    for r in range(1, cfg.rounds + 1):
        policy = run.train(r)
        policy.save(out / f"policy_round{r}.pt")
        results["distilled"] = run.episodes(f"base r{r}", world, run.controller(policy, K, refine=False), eval_seeds)
        sweep, sweep_err = {}, {}
        for k in sorted({*cfg.k_sweep, K}):
            eps = run.episodes(f"K={k} r{r}", world, run.controller(policy, k), eval_seeds)
            sweep[k], sweep_err[k] = _rate(eps), _error(eps)
            if k == K:
                results["distilled+refined"] = eps
        base_rate = _rate(results["distilled"])
        n = len(eval_seeds)
        summary["rounds"].append({
            "round": r, "train_episodes": len(run.demos),
            "train_ticks": int(sum(len(d.actions) for d in run.demos)),
            "train_loss": run.last_loss,
            "base_success": base_rate, "refined_success": sweep[K],
            "base_ci": list(wilson(round(base_rate * n), n)), "refined_ci": list(wilson(round(sweep[K] * n), n)),
            "min_k": min_k(sweep) if cfg.k_sweep else None,
            # success saturates (at 0 or 1) on hard or easy tasks; the error still tells
            "base_error": _error(results["distilled"]), "refined_error": sweep_err[K],
            "k_success": {str(k): v for k, v in sweep.items()},
            "k_error": {str(k): v for k, v in sweep_err.items()},
        })
        log(f"round {r}: base {100 * base_rate:.0f}%, refined (K={K}) {100 * sweep[K]:.0f}%, "
            f"min K {summary['rounds'][-1]['min_k']}")
        _write(summary, results, out, t_start)
        if r < cfg.rounds:
            # DAgger: the refined controller's actions at the states base + refinement visits
            run.episodes(f"dagger r{r}", world, run.controller(policy, K), cfg.dagger_seeds(r), keep=True)

    summary = _write(summary, results, out, t_start)
    _plots(summary, out)
    return summary


def _rate(episodes) -> float:
    return float(np.mean([e.success for e in episodes]))


def _error(episodes) -> float:
    return float(np.mean([e.final_error for e in episodes]))


def _write(summary: dict, results: dict, out: Path, t_start: float) -> dict:
    order = [n for n in ("distilled", "distilled+refined", "refined") if n in results]
    summary["results"] = [summarize(n, results[n]) for n in order]
    summary["per_episode"] = {n: [{"seed": e.seed, "success": e.success, "final_error": e.final_error,
                                   "ticks": e.ticks} for e in results[n]] for n in order}
    summary["wall_time_s"] = time.perf_counter() - t_start
    write_json(out / "summary.json", summary)
    return summary


def _plots(summary: dict, out: Path) -> None:
    plot_comparison(summary, out / "comparison.png")
    plot_rounds(summary["rounds"], out / "rounds.png")
