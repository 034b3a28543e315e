"""Running episodes: a controller acting in a world, recorded, summarized.

``run_episodes`` is what every command uses (demo, run, distill, rsr): the same seeds give the
same episodes, each is recorded (optionally to a dataset), and ``summarize`` turns results into a
row of the shared ``summary.json`` schema.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from twinloop.control import Controller
from twinloop.errors import TwinloopError, number


@dataclass
class EpisodeResult:
    """One episode.

    Attributes:
        seed: the episode seed (world reset and controller sampling).
        success: task success held for the task's dwell (``Task.success_dwell``: the test
            met on that many consecutive ticks; episodes stop once it has held, or at the end
            with the test met over the last dwell ticks); the world's own ``info["success"]``
            replaces the task's test when it reports one. Episodes also stop at a task failure
            and when the world reports ``terminated`` (its success at that tick counts).
        final_error: ``task.error`` of the true final state.
        ticks: control ticks taken.
        control_hz: ticks per second of controller compute (``act`` time only).
        fallbacks: ticks where refinement failed and the base proposal was used.
        failure: why the episode failed beyond recovery (the world's ``info["failure"]``, e.g.
            an unstable simulation, else ``task.failure``), or ``""``.
        qpos: ``(ticks+1, nq)`` true positions (for videos); ``None`` for worlds without truth.
        ghosts: per tick, the candidates' rollouts summarized for videos (if recorded).
        recorder: the episode recorder (if recording).
        stats: what the world and controller reported about the episode (real-time statistics;
            see :class:`~twinloop.run.executor.EpisodeBatch`), else empty.
    """

    seed: int
    success: bool
    final_error: float
    ticks: int
    control_hz: float
    fallbacks: int
    failure: str = ""
    qpos: np.ndarray | None = None
    ghosts: list | None = None
    recorder: object = field(default=None, repr=False)
    stats: dict = field(default_factory=dict)


def run_episode(world, controller: Controller, seed: int, *, max_ticks: int | None = None,
                episode_index: int = 0, record: bool = True, ghosts: Callable | None = None,
                stop_on_success: bool = True) -> EpisodeResult:
    """Run one seeded episode of ``controller`` in ``world``.

    The episode ends at success held for the task's dwell (if ``stop_on_success``), a task failure, the world's
    ``terminated`` or ``truncated``, or after ``max_ticks`` world ticks (``info["tick"]`` when
    the world counts them: a real-time world keeps ticking while the controller thinks).

    If the world or the controller raises mid-episode (a lost remote world), the exception
    carries what was recorded so far as ``exc.episode`` (an unfinished
    :class:`EpisodeResult`; its recorder is not finished) before it propagates.

    Args:
        ghosts: optional ``f(tick_info) -> array`` called each tick to keep what a video draws.
    """
    task = _judge(world, controller)
    n = task.max_ticks if max_ticks is None else number(max_ticks, "max_ticks", low=1, integer=True)
    rec = _recorder(task, episode_index) if record else None
    obs = world.reset(seed)
    controller.reset(seed)
    info = world.info()
    ep = _Progress(task, seed, obs, info, [info["qpos"]] if "qpos" in info else None,
                   [] if ghosts is not None else None, rec)
    dwell = task.dwell_ticks()
    try:
        while True:
            ep.k += 1
            t0 = time.perf_counter()
            action = controller.act(ep.obs, ep.info)
            ep.compute += time.perf_counter() - t0
            tick = controller.last
            if ep.ghosts is not None:
                ep.ghosts.append(ghosts(tick))
            seen, state = observed(task, controller, ep.obs)
            if rec is not None:
                rec.add(ep.info.get("time", (ep.k - 1) * task.control_period), seen, action, twin_state=state,
                        world_qpos=ep.info.get("qpos"), world_qvel=ep.info.get("qvel"),
                        cost=tick.cost if tick is not None else float("nan"), tick=tick,
                        plan=plan_row(tick, rec, ep.k == 1, task.nu))
            ep.obs, ep.info = world.step(action)
            if ep.traj is not None:
                ep.traj.append(ep.info["qpos"])
            ep.judge(dwell)
            if ep.over(stop_on_success, n):
                break
    except BaseException as exc:  # a lost world, Ctrl-C: what was recorded travels with the exception
        try:
            exc.episode = ep.result(controller)
        except Exception:  # noqa: BLE001 - the exception on its way out is the one to report
            pass
        raise
    finally:
        controller.stop()
    if rec is not None:
        rec.finish(ep.success)
    return ep.result(controller)


def _judge(world, controller: Controller):
    """The task that judges and records an episode: the world's, when it is the controller's
    task (a controller may plan with it at a coarser resolution:
    :mod:`twinloop.tasks.resolution`); else the controller's."""
    task = controller.task
    if getattr(getattr(world, "task", None), "name", None) == task.name:
        return world.task
    return task


def _recorder(task, episode_index: int):
    from twinloop.data.episodes import EpisodeRecorder  # the data package only where recording

    return EpisodeRecorder.for_task(task, episode_index)


@dataclass
class _Progress:
    """What a running episode has seen: the last observation and info, the true positions and
    ghosts kept, the compute time, the ticks, and the verdict so far."""

    task: object
    seed: int
    obs: object
    info: dict
    traj: list | None
    ghosts: list | None
    rec: object
    compute: float = 0.0
    success: bool = False
    failure: str = ""
    k: int = 0
    held: int = 0  # consecutive ticks that met the task's success test

    def judge(self, dwell: int) -> None:
        """The verdict after a world step: a world's own, when it gives one; else the task's test."""
        info, task = self.info, self.task
        truth = info.get("qpos")
        q = truth if truth is not None else task.state_from_obs(self.obs)[: task.model.nq]
        self.failure = info.get("failure") or ""  # the world's own: no state after it counts
        met = not self.failure and (bool(info["success"]) if "success" in info else bool(task.success(q)))
        self.failure = self.failure or ("" if met else task.failure(q))
        self.held = self.held + 1 if met else 0
        # success must hold for the task's dwell (an object sliding through its goal has not
        # reached it); a world that ends the episode itself gives its verdict there
        self.success = self.held >= dwell or (met and bool(info.get("terminated")))

    def over(self, stop_on_success: bool, max_ticks: int) -> bool:
        info = self.info
        return bool((self.success and stop_on_success) or self.failure or info.get("terminated")
                    or info.get("truncated") or info.get("tick", self.k) >= max_ticks)

    def result(self, controller: Controller) -> EpisodeResult:
        task, final_q = self.task, self.info.get("qpos")
        if final_q is None:
            final_q = task.state_from_obs(self.obs)[: task.model.nq]
        return EpisodeResult(
            seed=self.seed, success=self.success, final_error=float(task.error(final_q)), ticks=self.k,
            failure=self.failure, control_hz=self.k / self.compute if self.compute > 0 else float("inf"),
            fallbacks=controller.n_fallbacks, qpos=None if self.traj is None else np.asarray(self.traj),
            ghosts=self.ghosts, recorder=self.rec,
        )


def observed(task, controller: Controller, obs) -> tuple[np.ndarray, np.ndarray]:
    """``(observation, twin state)`` a tick recorded: the world's observation and its map, or,
    for a camera world's images, the observation the controller's camera estimator completed
    from them and the state it gave (mapped by the recording ``task`` where the controller plans
    at another resolution: the same observation, a state of another size)."""
    if getattr(obs, "images", None) is None:
        return obs, task.state_from_obs(obs)
    seen, state = controller.estimator.last_obs, controller.last_state
    if np.size(state) != task.nstate:
        state = task.state_from_obs(seen)
    return seen, state


def plan_row(tick, rec, first: bool, nu: int) -> np.ndarray | None:
    """The ``(H, nu)`` actions of the plan a tick sent (the ``refine.plan`` column a distilled
    policy imitates), shaped as the episode's first: a tick without a plan (a fallback of a
    controller that has none) is recorded as NaN, and an episode whose first tick had none
    records no plans."""
    plan = getattr(tick, "plan", None)
    actions = None if plan is None else np.asarray(plan.actions(), dtype=float)
    if first:
        return actions
    if rec.plan_size is None:
        return None
    out = np.full(rec.plan_size, np.nan)
    if actions is not None:
        flat = actions.ravel()[: out.size]
        out[: flat.size] = flat
    return out.reshape(-1, nu)


def run_episodes(world, controller: Controller, seeds: Sequence[int], *, dataset=None, first_index: int = 0,
                 progress: Callable[[EpisodeResult], None] | None = None, **kw) -> list[EpisodeResult]:
    """Run one episode per seed; write each to ``dataset`` (if given) as soon as it ends.

    Episodes are numbered from ``first_index`` (from the dataset's length when writing to one);
    ``progress(result)`` is called after each. Every command's episodes go through here, in this
    process or on an executor's worker (:mod:`twinloop.run.executor`).
    """
    if len(seeds) == 0:
        raise TwinloopError("no seeds given: need at least one episode")
    record = kw.pop("record", True) or dataset is not None
    out = []
    for i, seed in enumerate(seeds):
        index = first_index + i if dataset is None else len(dataset)
        try:
            r = run_episode(world, controller, number(seed, "seed", low=0, integer=True), episode_index=index,
                            record=record, **kw)
        except BaseException as exc:  # Ctrl-C too: the frames it recorded are kept
            write_partial(dataset, exc)
            raise
        if dataset is not None:
            dataset.write(r.recorder)
        out.append(r)
        if progress is not None:
            progress(r)
    return out


def write_partial(dataset, exc: BaseException) -> None:
    """Write the frames an interrupted episode recorded (``exc.episode``) to ``dataset``: an
    episode cut short by a lost world loses nothing it had recorded (``next.done`` stays
    false on its last frame)."""
    ep = getattr(exc, "episode", None)
    if dataset is not None and ep is not None and ep.recorder is not None and len(ep.recorder):
        dataset.write(ep.recorder)


def summarize(controller_name: str, results: Sequence[EpisodeResult]) -> dict:
    """One ``results`` row of the shared summary schema."""
    from twinloop.stats import wilson

    n = len(results)
    k = sum(r.success for r in results)
    lo, hi = wilson(k, n)
    hz = [r.control_hz for r in results if np.isfinite(r.control_hz)]
    return {
        "controller": controller_name,
        "episodes": n,
        "successes": k,
        "success_rate": k / n,
        "success_ci": [lo, hi],
        "mean_final_error": float(np.mean([r.final_error for r in results])),
        "control_hz": float(np.median(hz)) if hz else float("inf"),
        "fallbacks": int(sum(r.fallbacks for r in results)),
        "failures": {f: sum(r.failure == f for r in results) for f in sorted({r.failure for r in results} - {""})},
    }
