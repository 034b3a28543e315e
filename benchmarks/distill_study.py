"""Why the distilled policy fails alone: small experiments on the data of a `twinloop distill` run.

Each subcommand reads the folder of an earlier distill run (``--run``: its ``posterior.json``
and its datasets under ``data/``) and runs one small experiment in the same shifted world, on
the standard evaluation seeds (``DistillConfig.eval_seeds``: 0..N-1 for seed 0):

- ``labels``: how predictable the teacher's labels are. Per group of episodes: mean size of a
  label (the plan's first action relative to the pusher), the mean label difference between
  each sample and its nearest neighbour in context space, and how far a tick's plan moved from
  the previous tick's plan shifted by one tick (the teacher's tick-to-tick label noise).
- ``train``: fit a policy on some groups of episodes with a held-out fraction, print the
  held-out loss every 250 steps, evaluate it alone in the world (and in twin-worlds on its own
  training starts), optionally save it.
- ``execute``: a saved policy alone under chunk-execution variants (``execute``, ``ensemble``).
- ``infer``: a saved policy alone under sampling variants (``temperature``, ``average``: the
  mean of several seeded samples per inference, against the flow from zero noise).
- ``refine``: a saved policy refined at some Ks (optionally with policy samples as proposals).
- ``baseline``: refinement without the learned policy (``refined``: no proposer,
  ``scripted+refined``) at some Ks, on the evaluation seeds (``DistillRun.baseline``).
- ``retrieve``: the data check: a proposer that returns the mean label of the k nearest
  training samples in standardized context (the policy's own context, targets and anchor:
  ``--frame``, ``--residual``, ``--labels``, ``--smooth`` as :class:`PolicyConfig`), alone in the
  world (and in twin-worlds on its training starts). ``train`` takes the same options.
- ``memory``: the policy's own memory learners (``PolicyConfig.learner`` ``neighbours``: the
  mean of the k nearest samples; ``local``: their local linear fit, ``ridge`` on its slopes),
  fitted once on some groups and evaluated alone in the world for each ``LEARNER:K[:RIDGE]``,
  on the evaluation seeds from ``--first`` on (0: the standard 20; 20: twenty more).
- ``collect``: teacher episodes (scripted + MPPI at K) in twin-worlds, optionally with DART
  noise, into a dataset.
- ``rounds``: each round's saved policy (``policy_round<r>.pt`` of ``--run``) alone in the
  world on the evaluation seeds from ``--first`` on, with 95% Wilson intervals (``--out``: a
  JSON file): a distill run's "alone" column on more seeds than it evaluated.

Groups: the datasets under ``--run``/data (``twin/collect``, ``twin/dagger_r1``, ...), or
for a run of twinloop <= the stage layout the first 40 twin episodes (``collect``), the next
40s (``dagger1``, ``dagger2``) and the world episodes (``world``); ``--extra`` adds a dataset.

Run each under the shared lock: ``python benchmarks/distill_study.py ...``.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np

from twinloop.data import Dataset
from twinloop.policies.distilled import (
    DistilledPolicy,
    PolicyConfig,
    anchors,
    base_proposer,
    context,
    training_arrays,
    world_chunks,
)
from twinloop.run.distill import DistillConfig, DistillRun, Labelled


def make_run(base: Path, scratch: Path, **kw) -> DistillRun:
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    cfg = DistillConfig(posterior=str(base / "posterior.json"), out=str(scratch), **kw)
    run = DistillRun(cfg, scratch, log=lambda m: None)
    run.calibrate()
    return run


def groups(base: Path) -> dict[str, list]:
    data = base / "data"
    staged = sorted(p.parent for p in data.glob("*/*/meta"))
    if staged:
        return {f"{p.parent.name}/{p.name}": Dataset(p).episodes() for p in staged}
    twin, world = Dataset(data / "twin").episodes(), Dataset(data / "world").episodes()
    return {"collect": twin[:40], "dagger1": twin[40:80], "dagger2": twin[80:], "world": world}


def base_alone(run: DistillRun, policy, n: int, label: str) -> None:
    t0 = time.perf_counter()
    res = run.episodes(label, run.world, run.controller(policy, run.cfg.refiner.num_samples, refine=False),
                       run.cfg.eval_seeds()[:n])
    print(f"{label}: alone {sum(r.success for r in res)}/{n}, mean final error "
          f"{np.mean([r.final_error for r in res]):.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)


def labels(a) -> None:
    run = make_run(a.run, a.scratch)
    g = groups(a.run)
    cfg = PolicyConfig(chunk=5)
    arrays = {k: training_arrays(run.task, v, cfg, 5)[:2] for k, v in g.items()}
    allx = np.concatenate([x for x, _ in arrays.values()])
    mu, sd = allx.mean(0), allx.std(0) + 1e-8
    for k, (x, y) in arrays.items():
        keep = np.random.default_rng(0).permutation(len(x))[:3000]  # the pairwise distances fit in memory
        x, y = x[keep], y[keep]
        xn = (x - mu) / sd
        d = ((xn[:, None] - xn[None]) ** 2).sum(-1)
        np.fill_diagonal(d, np.inf)
        nn = d.argmin(1)
        jump = np.mean([np.abs(e.plans[1:, 0] - e.plans[:-1, 1]).mean() for e in g[k]])
        print(f"{k}: {len(x)} samples (at most 3000 drawn), |label| {1e3 * np.abs(y[:, :2]).mean():.0f} mm, nearest-context "
              f"distance {np.sqrt(d.min(1)).mean():.2f}, its label difference {1e3 * np.abs(y - y[nn]).mean():.0f} mm, "
              f"plan jump tick to tick {1e3 * jump:.0f} mm")


def train(a) -> None:
    run = make_run(a.run, a.scratch)
    g = groups(a.run)
    demos = [d for k in a.groups.split(",") for d in g[k][: a.limit or None]]
    if a.extra:
        demos += Dataset(a.extra).episodes()[: a.limit or None]
    cfg = PolicyConfig(chunk=5, steps=a.steps, val_fraction=a.val, patience=a.patience or None, frame=a.frame,
                       n_obs_steps=a.n_obs, labels=a.labels, smooth=a.smooth, residual=a.residual)
    policy, log = DistilledPolicy.fit(run.task, demos, cfg)
    print(f"{len(demos)} episodes, {log.samples} training samples, {log.val_samples} held out, {log.steps} steps, "
          f"kept step {log.best_step}, {log.seconds:.0f} s, training loss {log.losses[-1]:.3f}")
    print("held-out loss:", " ".join(f"{s}:{v:.3f}" for s, v in zip(log.val_steps, log.val_losses)))
    if a.save:
        policy.save(a.save)
    base_alone(run, policy, a.n, "world")
    seeds = run.cfg.collect_seeds()[:10]
    res = [run.episodes("", run.twin_world(i), run.controller(policy, 32, refine=False), [s])[0]
           for i, s in enumerate(seeds)]
    print(f"twin-worlds, its own training starts: alone {sum(r.success for r in res)}/10")


def execute(a) -> None:
    from dataclasses import replace

    run = make_run(a.run, a.scratch)
    policy = DistilledPolicy.load(a.policy, run.task)
    base = policy.config
    for ex, ens in [(1, None), (1, 0.0), (1, 0.5), (2, None), (3, None), (5, None)]:
        policy.config = replace(base, execute=ex, ensemble=ens)
        base_alone(run, policy, a.n, f"execute={ex} ensemble={ens}")


def infer(a) -> None:
    from dataclasses import replace

    run = make_run(a.run, a.scratch)
    policy = DistilledPolicy.load(a.policy, run.task)
    base = policy.config
    for variant in a.variants.split(","):
        temp, avg = variant.split("x")
        policy.config = replace(base, temperature=float(temp), average=int(avg))
        base_alone(run, policy, a.n, f"temperature={temp} average={avg}")


def refine(a) -> None:
    run = make_run(a.run, a.scratch, proposal_samples=a.proposals)
    policy = DistilledPolicy.load(a.policy, run.task)
    for k in map(int, a.ks.split(",")):
        t0 = time.perf_counter()
        res = run.episodes("", run.world, run.controller(policy, k), run.cfg.eval_seeds()[: a.n])
        print(f"refined K={k}, {a.proposals} policy samples offered: {sum(r.success for r in res)}/{a.n}, mean final "
              f"error {np.mean([r.final_error for r in res]):.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)


def baseline(a) -> None:
    run = make_run(a.run, a.scratch)
    for k in map(int, a.ks.split(",")):
        t0 = time.perf_counter()
        state = {"summary": {"baselines": {}}, "results": {}, "per_episode": {}}
        run.baseline(f"{a.name} K={k}", state)
        b = state["summary"]["baselines"][a.name]
        n = len(run.cfg.eval_seeds())
        print(f"{a.name} K={k}: {round(b['k_success'][str(k)] * n)}/{n}, mean final error "
              f"{b['k_error'][str(k)]:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)


class Retrieval:
    """A proposer that looks the answer up: the label of the nearest training context.

    The data check of the policy: trained on the same samples (:func:`training_arrays`, the
    same context and anchor), it returns the mean relative chunk of the ``k`` nearest samples
    in normalized context space. If it succeeds where the flow policy fails, the learner is
    what fails; if not, the labels or the observation are.
    """

    def __init__(self, task, demos, cfg: PolicyConfig, horizon: int, k: int):
        from scipy.spatial import cKDTree

        x, self.y, _ = training_arrays(task, demos, cfg, horizon)
        self.base = base_proposer(task, cfg)
        self.mu, self.sd = x.mean(0), x.std(0) + 1e-8
        self.tree, self.task, self.cfg, self.horizon, self.k = cKDTree((x - self.mu) / self.sd), task, cfg, horizon, k
        self.reset(None)

    def reset(self, seed=None) -> None:
        self._frames: list[np.ndarray] = []
        if self.base is not None:
            self.base.reset(seed)

    def propose(self, obs, state=None) -> np.ndarray:
        o = np.asarray(obs, dtype=float)
        if not self._frames or not np.array_equal(o, self._frames[-1]):
            self._frames.append(o)
        frames = self._frames[-self.cfg.n_obs_steps:]
        hist = np.stack([frames[0]] * (self.cfg.n_obs_steps - len(frames)) + frames)
        c = context(self.task, hist, self.cfg.frame)
        _, idx = self.tree.query((c - self.mu) / self.sd, k=self.k)
        y = self.y[np.atleast_1d(idx)].mean(0).reshape(1, self.horizon, self.task.nu)
        anchor = anchors(self.task, o, self.cfg, self.horizon, self.base)
        return np.clip(world_chunks(self.task, o, y, anchor, self.cfg)[0], self.task.action_low, self.task.action_high)


def retrieve(a) -> None:
    run = make_run(a.run, a.scratch)
    g = groups(a.run)
    demos = [d for k in a.groups.split(",") for d in g[k][: a.limit or None]]
    for k in map(int, a.ks.split(",")):
        policy = Retrieval(run.task, demos, PolicyConfig(chunk=5, n_obs_steps=a.n_obs, frame=a.frame, labels=a.labels, smooth=a.smooth,
                                                  residual=a.residual), 5, k)
        base_alone(run, policy, a.n, f"retrieval k={k} n_obs={a.n_obs} frame={a.frame} ({len(policy.y)} samples), world")
        if a.twin:
            seeds = run.cfg.collect_seeds()[: a.twin]
            res = [run.episodes("", run.twin_world(i), run.controller(policy, 32, refine=False), [s])[0]
                   for i, s in enumerate(seeds)]
            print(f"  twin-worlds, its own training starts: alone {sum(r.success for r in res)}/{a.twin}, mean final "
                  f"error {np.mean([r.final_error for r in res]):.3f}", flush=True)


def memory(a) -> None:
    from dataclasses import replace

    run = make_run(a.run, a.scratch, episodes=a.first + a.n)
    g = groups(a.run)
    demos = [d for k in a.groups.split(",") for d in g[k][: a.limit or None]]
    cfg = PolicyConfig(chunk=5, n_obs_steps=a.n_obs, frame=a.frame, labels=a.labels, smooth=a.smooth,
                       residual=a.residual, learner="neighbours")
    policy, log = DistilledPolicy.fit(run.task, demos, cfg)
    seeds = run.cfg.eval_seeds()[a.first:]
    for variant in a.learners.split(","):
        learner, k, *ridge = variant.split(":")
        policy.config = replace(cfg, learner=learner, neighbours=int(k), ridge=float(ridge[0]) if ridge else cfg.ridge)
        t0 = time.perf_counter()
        res = run.episodes("", run.world, run.controller(policy, 32, refine=False), seeds)
        wins = [r.ticks for r in res if r.success]
        print(f"{variant} ({log.samples} samples), seeds {seeds[0]}..{seeds[-1]}: alone {len(wins)}/{len(res)}, mean final "
              f"error {1e3 * np.mean([r.final_error for r in res]):.1f} mm, ticks of wins {np.mean(wins) if wins else 0:.0f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)


def rounds(a) -> None:
    import json

    from twinloop.stats import wilson

    run = make_run(a.run, a.scratch, episodes=a.first + a.n)
    seeds = run.cfg.eval_seeds()[a.first:]
    rows = []
    for path in sorted(a.run.glob("policy_round*.pt"), key=lambda p: int(p.stem.removeprefix("policy_round"))):
        policy = DistilledPolicy.load(path, run.task)
        t0 = time.perf_counter()
        res = run.episodes("", run.world, run.controller(policy, run.cfg.refiner.num_samples, refine=False), seeds)
        k = sum(r.success for r in res)
        rows.append({"round": int(path.stem.removeprefix("policy_round")), "successes": k, "episodes": len(res),
                     "ci": list(wilson(k, len(res))), "mean_final_error": float(np.mean([r.final_error for r in res])),
                     "seconds": time.perf_counter() - t0})
        print(f"{path.name}, seeds {seeds[0]}..{seeds[-1]}: alone {k}/{len(res)} [{rows[-1]['ci'][0]:.2f}, "
              f"{rows[-1]['ci'][1]:.2f}], mean final error {1e3 * rows[-1]['mean_final_error']:.1f} mm", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({"seeds": [seeds[0], seeds[-1]], "rounds": rows}, indent=1) + "\n")


def collect(a) -> None:
    run = make_run(a.run, a.scratch, collect=8000, teacher_warm=not a.cold)
    seeds = run.cfg.collect_seeds()[a.start: a.start + a.count]
    ds, _ = run.dataset("twin", "collect")
    t0 = time.perf_counter()
    res = run.twin_episodes("", lambda: Labelled(run.teacher(None), None, ds, noise=a.noise), seeds)
    dt = time.perf_counter() - t0
    eps = ds.episodes()
    jump = np.mean([np.abs(e.plans[1:, 0] - e.plans[:-1, 1]).mean() for e in eps])
    print(f"{len(res)} teacher episodes, noise {a.noise}, warm start {not a.cold}: {sum(r.success for r in res)} "
          f"succeeded, {dt:.0f} s ({dt / len(res):.2f} s each), {np.mean([r.ticks for r in res]):.0f} ticks, plan jump "
          f"tick to tick {1e3 * jump:.0f} mm; dataset {ds.root}")


def representation_options(p: argparse.ArgumentParser) -> None:
    """The data and representation options that ``train`` and ``retrieve`` share."""
    p.add_argument("--limit", type=int, default=0, help="the first N episodes of each group (0: all)")
    p.add_argument("--frame", action="store_true", help="contexts and chunks in the task's policy frame")
    p.add_argument("--n-obs", type=int, default=2, help="observations in the context")
    p.add_argument("--labels", default="plan", help="plan | decisions (PolicyConfig.labels)")
    p.add_argument("--smooth", type=int, default=1, help="moving average of decision labels (ticks)")
    p.add_argument("--residual", action="store_true", help="a residual on the task's scripted proposer")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="folder of a twinloop distill run")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/distill-study"), help="output folder (emptied)")
    ap.add_argument("--n", type=int, default=20, help="evaluation episodes")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("labels")
    t = sub.add_parser("train")
    t.add_argument("--groups", default="collect")
    t.add_argument("--extra", default="")
    t.add_argument("--steps", type=int, default=4000)
    t.add_argument("--val", type=float, default=0.2)
    t.add_argument("--patience", type=int, default=0)
    t.add_argument("--save", default="")
    representation_options(t)
    e = sub.add_parser("execute")
    e.add_argument("--policy", required=True)
    i = sub.add_parser("infer")
    i.add_argument("--policy", required=True)
    i.add_argument("--variants", default="0x1,1x1,1x8,1x32", help="TEMPERATURExAVERAGE,...")
    r = sub.add_parser("refine")
    r.add_argument("--policy", required=True)
    r.add_argument("--ks", default="4,8")
    r.add_argument("--proposals", type=int, default=0)
    b = sub.add_parser("baseline")
    b.add_argument("--name", default="refined")
    b.add_argument("--ks", default="64")
    m = sub.add_parser("memory")
    m.add_argument("--groups", default="twin/collect")
    m.add_argument("--learners", default="neighbours:4,local:64:1", help="LEARNER:K[:RIDGE],...")
    m.add_argument("--first", type=int, default=0, help="index of the first evaluation seed")
    representation_options(m)
    c = sub.add_parser("collect")
    c.add_argument("--start", type=int, default=40)
    c.add_argument("--count", type=int, default=360)
    c.add_argument("--noise", type=float, default=0.0)
    c.add_argument("--cold", action="store_true", help="a teacher not warm-started from its last plan")
    rt = sub.add_parser("retrieve")
    rt.add_argument("--groups", default="twin/collect")
    rt.add_argument("--ks", default="1", help="neighbours averaged, comma-separated")
    representation_options(rt)
    rt.add_argument("--twin", type=int, default=10, help="episodes in twin-worlds on training starts (0: none)")
    ro = sub.add_parser("rounds")
    ro.add_argument("--first", type=int, default=20, help="index of the first evaluation seed")
    ro.add_argument("--out", default="", help="JSON file of the rows")
    a = ap.parse_args()
    {"rounds": rounds, "labels": labels, "train": train, "execute": execute, "infer": infer, "refine": refine, "baseline": baseline, "collect": collect,
     "retrieve": retrieve, "memory": memory}[a.cmd](a)


if __name__ == "__main__":
    main()
