"""`twinloop demo`, `twinloop run`, `twinloop tasks`: the comparison experiment and the task list."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer
from rich.table import Table

from twinloop.calib.monitor import ACTIONS as MONITOR_ACTIONS
from twinloop.cli.common import (
    NOISE_HELP,
    OUT_HELP,
    console,
    executor_options,
    guard,
    one_of,
    optimizer_help,
    progress_ticks,
    results_table,
)
from twinloop.control import AsyncConfig
from twinloop.errors import TwinloopError
from twinloop.io import out_mode
from twinloop.plan import OPTIMIZER_NAMES, LLMConfig
from twinloop.policies import PROPOSERS
from twinloop.run.compare import RunConfig, run_comparison
from twinloop.run.executor import EXECUTORS
from twinloop.tasks import TASKS, make_task
from twinloop.twin import BACKENDS
from twinloop.worlds import WORLDS


def _run(cfg, overwrite: bool, executor: str = "serial", address: str | None = None) -> dict:
    twin = f"{cfg.backend}" + (f", {1000 * cfg.twin_timestep:g} ms twin step" if cfg.twin_timestep else "")
    mode = (f" in real time ({'with' if cfg.async_control.latency_comp else 'without'} latency compensation)"
            if cfg.realtime else "")
    console.print(f"[bold]twinloop[/] {cfg.task}: {cfg.proposer} proposer vs + {cfg.optimizer} refinement "
                  f"(K={cfg.refiner.num_samples}, {cfg.refiner.horizon:g} s horizon, {twin}) in a {cfg.world} world{mode}")
    with executor_options(executor, address) as ex, progress_ticks() as tick:
        summary = run_comparison(cfg, progress=tick, log=console.print, mode=out_mode(overwrite=overwrite), executor=ex)
    console.print(results_table(summary))
    out = Path(cfg.out)
    console.print(f"wall time {summary['wall_time_s']:.0f} s; wrote {out / 'summary.json'}, "
                  f"{out / 'comparison.png'}" + (f", {summary['video']}" if "video" in summary else ""))
    return summary


@guard
def demo(
    episodes: int = typer.Option(20, help="Episodes per controller."),
    seed: int = typer.Option(0, help="Seed of the world's hidden physics and the episodes."),
    out: str = typer.Option("twinloop-out", help=OUT_HELP),
    overwrite: bool = typer.Option(False, help="Replace an earlier twinloop output in --out."),
    video: bool = typer.Option(True, help="Render one refined episode with ghost rollouts."),
):
    """Push-T in a shifted world: the scripted proposer alone vs with MPPI refinement (K=32,
    0.5 s horizon, 10 ms twin steps)."""
    _run(RunConfig(episodes=episodes, seed=seed, out=out, video=video), overwrite)


r = RunConfig()  # defaults shown by the options below
a = AsyncConfig()


@guard
def run(
    task: str = typer.Option(r.task, help=one_of(TASKS)),
    optimizer: str = typer.Option(None, help=optimizer_help(OPTIMIZER_NAMES) + "; llm+*: a language model's plans "
                                  "join the batches; needs --iterations >= 2"),
    backend: str = typer.Option(r.backend, help=one_of(BACKENDS)),
    num_samples: int = typer.Option(r.refiner.num_samples, "--num-samples", "-k", help="Candidates per refine iteration (K)."),
    horizon: float = typer.Option(r.refiner.horizon, help="Planning horizon (s)."),
    iterations: int = typer.Option(r.refiner.iterations, help="Refine iterations per control tick."),
    n_knots: int = typer.Option(r.refiner.n_knots, help="Spline knots per plan (over the horizon)."),
    noise: float = typer.Option(0.0, help=NOISE_HELP),
    world: str = typer.Option(r.world, help=one_of(WORLDS)),
    severity: int = typer.Option(r.severity, help="ShiftedWorld severity 0-3."),
    proposer: str = typer.Option(r.proposer, help=one_of(PROPOSERS)),
    checkpoint: str = typer.Option(None, help="The policy file of --proposer distilled (saved by twinloop distill)."),
    proposal_samples: int = typer.Option(r.proposal_samples, help="Samples of a stochastic proposer (distilled, the "
                                         "planar scripts) offered to the refiner each tick besides its proposal (0: none)."),
    repair: bool = typer.Option(r.repair, help="Offer the task's local repair (grasp tasks: re-grasp or place a "
                                "misplaced point near its goal) to the refiner each tick, beside the proposal samples."),
    repair_push: int = typer.Option(r.repair_push, help="With --repair: also offer pushes of this many other points, "
                                    "the farthest from their goals first (grasp tasks: the finger slides them there)."),
    repair_reach: float = typer.Option(0.0, help="With --repair: how far (m) from its goal a point is still repaired "
                                       "(0: the task's; grasp tasks 0.12)."),
    repair_regrasp_reach: float = typer.Option(0.0, help="With --repair: how far (m) from its goal a point let go is "
                                               "still re-grasped (0: --repair-reach); a place stays within that."),
    repair_commit: float = typer.Option(-1.0, help="With --repair: carry a repair on once sent unless a plan costs "
                                        "less by more than this fraction of its cost (-1: off)."),
    episodes: int = typer.Option(r.episodes, help="Episodes per controller."),
    first_episode: int = typer.Option(r.first_episode, help="Index of the first episode (a run split into pieces)."),
    seed: int = typer.Option(r.seed, help="Seeds the episodes (seed * 100000 + i) and, without --world-seed, the "
                             "world's hidden physics."),
    world_seed: int = typer.Option(-1, help="Seed of the world's hidden physics (-1: --seed): new episodes in the "
                                   "same world."),
    world_per_episode: bool = typer.Option(r.world_per_episode, help="A world distribution: each episode in its own "
                                           "world, its world seed the episode's seed (seeded worlds: shifted); "
                                           "base and refined meet the same worlds."),
    max_ticks: int = typer.Option(0, help="Episode length in control ticks (0: the task's)."),
    particles: int = typer.Option(r.particles, help="Parameter particles the refiner plans under: the nominal values and "
                                  "draws from the task's parameter prior (domain randomization); 0: the nominal twin."),
    posterior: str = typer.Option("", help="A saved calibration (posterior.json of twinloop calibrate, evaluate or "
                                  "distill) the refiner plans with: its estimate, or with --particles its samples, "
                                  "in place of the nominal parameters."),
    observer: bool = typer.Option(False, help="The refined controller estimates the state with the task's stateful "
                                  "observer (grasp tasks: the last estimate predicted a tick ahead in the twin, "
                                  "corrected to the keypoints) instead of from each observation alone."),
    risk: str = typer.Option("mean", help="Risk over parameter particles: mean | worst | cvar."),
    twin_timestep: float = typer.Option(r.twin_timestep or 0.0, help="Twin physics timestep (s), coarser than the scene's (0: the scene's); checked for stability and ranking."),
    prune: float = typer.Option(0.0, help="Fraction of the horizon after which only the best candidates continue (0: off)."),
    carry: int = typer.Option(0, help="Last tick's best candidates carried into the next batch."),
    exact_prior: bool = typer.Option(False, help="Rehearse and send the proposer's action chunks exactly, not as their spline fit (see RefinerConfig.exact_prior)."),
    binary_actions: bool = typer.Option(r.refiner.binary_actions, help="Send the task's open/close commands (a gripper's grasp) as open or closed, snapped at mid-range, in the base proposal and every plan rehearsed and sent (see RefinerConfig.binary_actions)."),
    prior_margin: float = typer.Option(r.refiner.prior_margin, help="Trust in the base proposal: the refined plan replaces it only where the twin rates it cheaper by more than this fraction of the base's cost (0: any gain)."),
    realtime: bool = typer.Option(r.realtime, help="The world keeps its own clock; the refined controller plans asynchronously."),
    rate: float = typer.Option(0.0, help="Real-time world ticks per second (0: 10 per control period for simulated worlds, the env's own rate otherwise)."),
    latency_comp: bool = typer.Option(a.latency_comp, help="Real time: plan from the state predicted for when the plan applies."),
    budget: float = typer.Option(0.0, help="Real time: wall seconds each planning cycle takes at least (0: as fast as it goes)."),
    actuation_delay: float = typer.Option(r.refiner.actuation_delay, help="The world's known actuation delay (s): every candidate is rehearsed behind the actions still in the delay line, as the world will execute it (0: none modelled)."),
    monitor: str = typer.Option(None, help=one_of(MONITOR_ACTIONS, "A live gap monitor on the refined controller; "
                                "what its alarm does:") + " (default: none). Its threshold comes from "
                                "--monitor-episodes refined episodes the run records first in the nominal twin "
                                "(with the world's noise and delay); alarms and refits are listed per episode in "
                                "summary.json."),
    monitor_episodes: int = typer.Option(r.monitor_episodes, help="Nominal episodes the monitor's threshold is "
                                         "calibrated on."),
    token: str = typer.Option("", envvar="TWINLOOP_TOKEN", help="Shared token of a remote:ADDRESS world."),
    out: str = typer.Option(r.out, help=OUT_HELP),
    overwrite: bool = typer.Option(False, help="Replace an earlier twinloop output in --out."),
    video: bool = typer.Option(r.video),
    record: bool = typer.Option(r.record, help="Write every episode as Parquet."),
    llm_base_url: str = typer.Option(None, help="llm+*: OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 "
                                     "(default: $TWINLOOP_LLM_BASE_URL). Key: $OPENAI_API_KEY."),
    llm_model: str = typer.Option(None, help="llm+*: model name (default: $TWINLOOP_LLM_MODEL)."),
    llm_timeout: float = typer.Option(30.0, help="llm+*: seconds per request."),
    executor: str = typer.Option("serial", help=one_of(EXECUTORS, "Where episodes run:") + " (same results)."),
    address: str = typer.Option(None, help="Ray cluster address (default: a local Ray instance)."),
):
    """The demo's experiment with every choice as an option."""
    rcfg = replace(r.refiner, num_samples=num_samples, horizon=horizon, iterations=iterations, n_knots=n_knots, risk=risk,
                   prune=prune, carry=carry, exact_prior=exact_prior, binary_actions=binary_actions, prior_margin=prior_margin,
                   actuation_delay=actuation_delay)
    _run(RunConfig(task=task, optimizer=optimizer, backend=backend, refiner=rcfg, world=world, severity=severity,
                   proposer=proposer, checkpoint=checkpoint, proposal_samples=proposal_samples, repair=repair, repair_push=repair_push,
                   repair_reach=repair_reach or None,
                   repair_regrasp_reach=repair_regrasp_reach or None, repair_commit=None if repair_commit < 0 else repair_commit, episodes=episodes, first_episode=first_episode, seed=seed,
                   world_seed=None if world_seed < 0 else world_seed, world_per_episode=world_per_episode, max_ticks=max_ticks or None, out=out,
                   video=video, record=record, twin_timestep=twin_timestep or None,
                   realtime=realtime, rate=rate or None, token=token or None,
                   async_control=AsyncConfig(latency_comp=latency_comp, budget=budget or None),
                   llm=LLMConfig(base_url=llm_base_url, model=llm_model, timeout=llm_timeout), noise=noise or None,
                   particles=particles, posterior=posterior or None, observer=observer, monitor=monitor, monitor_episodes=monitor_episodes),
         overwrite, executor, address)


def tasks():
    """List the registered tasks, what they ask and their default parameters."""
    t = Table(title="tasks")
    for c in ("name", "actions", "control period", "episode ticks", "parameters", "description"):
        t.add_column(c)
    for name in TASKS:
        try:
            task = make_task(name)
            task.model  # noqa: B018 - a task whose scene cannot load says why in its row
        except TwinloopError as exc:
            t.add_row(name, "", "", "", "", f"[red]unavailable:[/] {exc}")
            continue
        t.add_row(name, str(task.nu), f"{task.control_period:g} s", str(task.max_ticks),
                  ", ".join(task.param_space().names), task.description())
    console.print(t)


COMMANDS = (demo, run, tasks)
