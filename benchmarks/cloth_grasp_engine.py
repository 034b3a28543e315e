"""Why the towel's grasp slips in a severity-3 world: the engine, the mass, the grasp's strength.

Replays cloth-fold's open-loop base (the script rehearsed once in the nominal twin and replayed,
``--proposer open-loop``) in worlds that differ from the nominal twin by one thing at a time,
and reports per world: folded or not, the final keypoint error (mm) and the largest
finger-to-corner gap while the grasp is commanded (mm; the capture radius is 30 mm).

1. ``factors``: severity-3 worlds (``--seeds``) split into their parts: hidden parameters,
   engine (Euler, elliptic cone, contacts twice as soft), 80 ms delay, all of them.
2. ``engine``: the engine's parts one by one on the nominal towel (Euler at 10 ms, at 5 and
   2 ms; elliptic cone; soft contacts; RK4).
3. ``mass``: Euler at 10 ms with the towel's mass scaled (the grasp actuator's velocity term
   ``-c dL/dt``, c = 0.5 N s/m at full grasp, on a vertex of m = 2 g is integrated explicitly
   under Euler: stable only for ``dt c / m < 2``; nominal: 2.5).
4. ``grasp``: severity-3 worlds with every grasp command of the replay scaled by a factor
   (``act`` and so ``c`` scale with it): a weaker grasp against the world's lighter and heavier
   towels.
5. ``small step``: severity-3 worlds with everything kept (parameters, 80 ms delay, noise, Euler,
   elliptic cone, softer contacts) but the Euler step at 2 ms: the base without the artefact.

Written when severity 3 ran Euler at the towel's 10 ms step; since issue #10's fix a
``ShiftedWorld`` of severity 3 runs it at the task's ``euler_step`` (2 ms, section 5's world).
Sections 1-4 rebuild the old 10 ms world (:data:`SEVERE_ENGINE`, with the world's parameters,
delay and noise) so that they still show the artefact they diagnose.

    python benchmarks/cloth_grasp_engine.py --seeds 0 1 2 3 4 5 6 7 8 9
"""

from __future__ import annotations

import argparse

from twinloop.policies import make_proposer
from twinloop.tasks import make_task
from twinloop.twin.engine import Engine
from twinloop.worlds import ShiftedWorld
from twinloop.worlds.shifted import SEVERE_ENGINE, shift_settings
from twinloop.worlds.twin import TwinWorld


def replay(task, proposer, world, seed: int, grasp: float = 1.0) -> str:
    """``"ok|--  error mm  gap mm"`` of the open-loop base in ``world`` (grasp commands x ``grasp``),
    stopped at success as an episode is."""
    obs = world.reset(seed)
    proposer.reset(seed)
    gap, q = 0.0, world.info()["qpos"]
    for _ in range(task.max_ticks):
        a = proposer.propose(obs, task.state_from_obs(obs))[0].copy()
        a[3] *= grasp
        obs, _ = world.step(a)
        q = world.info()["qpos"]
        if a[3] > 0:
            gap = max(gap, float(task.grasp_gap(q)))
        if task.success(q):
            break
    return f"{'ok' if task.success(q) else '--'} {1000 * task.error(q):4.0f} {1000 * gap:4.0f}"


def table(title: str, rows: dict, seeds) -> None:
    print(f"\n{title}: per world 'folded? error mm, largest gap mm'")
    print("| world | " + " | ".join(str(s) for s in seeds) + " |")
    print("|---|" + "---|" * len(seeds))
    for label, cells in rows.items():
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    a = p.parse_args()
    task = make_task("cloth-fold")
    prop = make_proposer(task, "open-loop")
    space = task.param_space()
    st = shift_settings(task, 3)
    hidden = {s: ShiftedWorld(task, 3, s).hidden_params for s in a.seeds}

    def old_severe(s: int) -> TwinWorld:  # severity 3 before issue #10: Euler at the scene's 10 ms
        return TwinWorld(task, hidden[s], delay_steps=st["delay_steps"], obs_noise=st["obs_noise"], engine=SEVERE_ENGINE)
    mass = space.names.index("cloth_mass")
    print("severity-3 worlds' towel mass / nominal: "
          + ", ".join(f"{s}: x{hidden[s][mass] / space.nominal[mass]:.2f}" for s in a.seeds))

    worlds = {"nominal": lambda s: TwinWorld(task), "hidden parameters": lambda s: TwinWorld(task, hidden[s]),
              "engine": lambda s: TwinWorld(task, engine=SEVERE_ENGINE),
              "delay": lambda s: TwinWorld(task, delay_steps=st["delay_steps"]),
              "all (severity 3 at 10 ms)": old_severe}
    table("1. severity-3 worlds by part", {k: [replay(task, prop, w(s), s) for s in a.seeds]
                                           for k, w in worlds.items()}, a.seeds)

    engines = {"none": Engine(), "Euler 10 ms": Engine(integrator="euler"),
               "Euler 5 ms": Engine(integrator="euler", timestep=0.005),
               "Euler 2 ms": Engine(integrator="euler", timestep=0.002), "elliptic cone": Engine(cone="elliptic"),
               "contacts x2 softer": Engine(timeconst=2.0), "RK4": Engine(integrator="rk4")}
    table("2. engine parts, nominal towel", {k: [replay(task, prop, TwinWorld(task, engine=e), s) for s in a.seeds]
                                             for k, e in engines.items()}, a.seeds)

    rows = {}
    for f in (0.5, 0.8, 1.0, 1.2, 1.5, 2.0):
        x = space.nominal.copy()
        x[mass] *= f
        rows[f"mass x{f}"] = [replay(task, prop, TwinWorld(task, x, engine=Engine(integrator="euler")), s)
                              for s in a.seeds]
    table("3. Euler at 10 ms, towel mass scaled", rows, a.seeds)

    rows = {f"grasp x{g}": [replay(task, prop, old_severe(s), s, g) for s in a.seeds]
            for g in (1.0, 0.7, 0.5, 0.4, 0.3)}
    table("4. severity-3 worlds, grasp commands scaled", rows, a.seeds)
    cells = [replay(task, prop, ShiftedWorld(task, 3, s), s) for s in a.seeds]  # now Euler at euler_step, 2 ms
    table("5. severity-3 worlds, Euler at 2 ms", {"severity 3, 2 ms step": cells}, a.seeds)
    print(f"folded: {sum(c.startswith('ok') for c in cells)}/{len(cells)}")
    light = [s for s in a.seeds if hidden[s][mass] < space.nominal[mass]]
    print(f"\nlighter towels: worlds {light}; heavier: {[s for s in a.seeds if s not in light]}")
    print("dt c / m at full grasp (vertex mass = towel mass / 25): "
          + ", ".join(f"{s}: {0.5 * 0.01 / (hidden[s][mass] / 25):.1f}" for s in a.seeds))


if __name__ == "__main__":
    main()
