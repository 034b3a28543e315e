"""Grid over SwingConfig on the nominal world (seeds 90000-90009): most successes, then fewest ticks, then lowest error."""
import sys, itertools, numpy as np
from twinloop.tasks import make_task
from twinloop.tasks.deformable import SwingConfig, SwingScript
from twinloop.worlds import SimWorld
task = make_task(sys.argv[1]); world = SimWorld(task)
p0 = task.default_proposer()
start, goal = p0.centre + p0.out * p0.reach, p0.centre - p0.out * p0.reach
out = []
for at, rel, h, ar in itertools.product((0.6, 0.8, 1.0, 1.2, 1.6), (0.6, 0.8, 1.0), (0.1, 0.15, 0.2), (0.8, 0.9, 0.95)):
    prop = SwingScript(task, p0.point, start, goal, SwingConfig(arc_time=at, release=rel, arc_height=h, arc_radius=ar))
    ok, errs, ticks = 0, [], []
    for seed in range(90000, 90010):
        obs = world.reset(seed)
        for k in range(task.max_ticks):
            obs, info = world.step(prop.propose(obs, task.state_from_obs(obs))[0]); q = info["qpos"]
            if task.success(q): break
        ok += task.success(q); errs.append(task.error(q)); ticks.append(k + 1)
    out.append((ok, -np.mean(ticks), -np.mean(errs), at, rel, h, ar))
for r in sorted(out, reverse=True)[:8]: print(r)
