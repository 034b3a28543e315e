"""Deformables: rollout speed, refine rate, and keypoint -> state reconstruction.

Three tables (2 rollout threads, the machine's cores):

1. steps/s in ``mujoco.rollout`` (K=32 candidates x 1 s) for the cloth-fold scene at 5x5 (the
   task's), 7x7 and 9x9 towels and 5x5 with self-collision, and for the rope as the task's capsule chain vs a 1D flex
   string of the same length and vertex count (edge constraints, no bending: a flex rod with
   bending keeps state outside ``[qpos, qvel, act]``);
2. refine rate (refine calls per second, MPPI, 1 s horizon) at K = 16, 32, 64 for both tasks,
   from states along a scripted episode;
3. wall time of whole refined episodes (MPPI, K=64, 1 s horizon: the run command's settings) in the
   shifted world (seed 0, severity 2), the first ``--episodes`` standard seeds of
   ``run_comparison``, and their ticks (an episode stops at success);
4. reconstruction: every tick of scripted episodes in the shifted world (severity 2: 0.5 mm
   position and 10 mm/s velocity noise on the keypoints), the estimate vs the truth: mean and
   max position error of every tracked point (cloth: all 25 vertices), RMS velocity error, and
   time per call, with the settle (10 steps) and with the interpolated guess alone.

    python benchmarks/deformables.py [--quick]
"""

from __future__ import annotations

import argparse
import time

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

from twinloop.control import Controller, Refiner, RefinerConfig
from twinloop.plan import make_optimizer
from twinloop.run.compare import RunConfig, build, episode_seeds
from twinloop.run.experiment import run_episodes
from twinloop.tasks import make_task
from twinloop.tasks.cloth_fold import ClothFold
from twinloop.twin import make_twin
from twinloop.worlds import ShiftedWorld, SimWorld

ROPE_FLEX = """
<mujoco>
  <option timestep="0.01" integrator="discrete" solver="Newton" cone="pyramidal"/>
  <worldbody>
    <geom type="plane" size="0.4 0.4 0.01" friction="0.1 0.005 0.0001"/>
    <body name="gripper" gravcomp="1">
      <joint name="gripper_x" type="slide" axis="1 0 0" damping="20"/>
      <joint name="gripper_y" type="slide" axis="0 1 0" damping="20"/>
      <joint name="gripper_z" type="slide" axis="0 0 1" damping="20"/>
      <geom type="sphere" size="0.008" mass="0.2" friction="0.1 0.005 0.0001"/>
      <site name="grip"/>
    </body>
    <flexcomp name="rope" type="grid" count="9 1 1" spacing="0.04 0.04 0.04" pos="0.04 -0.04 0.006"
              radius="0.006" dim="1" mass="0.04">
      <contact condim="3" selfcollide="none" friction="0.5 0.005 0.0001"/>
      <edge equality="true"/>
    </flexcomp>
  </worldbody>
  <tendon><spatial name="grasp"><site site="grip"/><site site="grasp_target"/></spatial></tendon>
  <actuator>
    <position joint="gripper_x" kp="400" ctrlrange="-0.3 0.3"/>
    <position joint="gripper_y" kp="400" ctrlrange="-0.3 0.3"/>
    <position joint="gripper_z" kp="400" ctrlrange="0.005 0.3"/>
    <general name="grasp" tendon="grasp" dyntype="filter" dynprm="0.05" gaintype="affine"
             gainprm="-2 66.67 -0.5" ctrlrange="0 1" forcerange="-2 0"/>
  </actuator>
</mujoco>
"""


def cloth_variant(n: int, selfcollide: bool = False) -> mujoco.MjModel:
    """The cloth-fold scene with an n x n towel of the same 30 cm size (and self-collision)."""
    xml = ClothFold().xml_path.read_text()
    sp = 0.3 / (n - 1)
    xml = xml.replace('count="5 5 1" spacing="0.075 0.075 0.075"', f'count="{n} {n} 1" spacing="{sp} {sp} {sp}"')
    if selfcollide:
        xml = xml.replace('selfcollide="none"', 'selfcollide="auto"')
    spec = mujoco.MjSpec.from_string(xml)
    spec.body(f"cloth_{n * (n - 1)}").add_site(name="grasp_target")
    return spec.compile()


def rope_flex() -> mujoco.MjModel:
    spec = mujoco.MjSpec.from_string(ROPE_FLEX)
    spec.body("rope_8").add_site(name="grasp_target")
    return spec.compile()


def lift_controls(m: mujoco.MjModel, K: int, T: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """A start state with the gripper pinching the grasped point, and ``(K, T, 4)`` controls
    that lift it along noisy paths (the kind of motion a refiner rolls out)."""
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    p = d.site_xpos[m.site("grasp_target").id].copy()
    d.qpos[0:3] = p + [0, 0, 0.01]
    d.act[:] = 1.0
    full = np.empty(mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(m, d, full, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    t = np.linspace(0, 1, T)[None, :, None]
    goal = p + np.array([-0.15, 0.15, 0.15])
    path = p + 0.01 * np.array([0, 0, 1]) + t * (goal - p) + rng.normal(0, 0.02, (K, 1, 3))
    return full, np.concatenate([path, np.ones((K, T, 1))], axis=2)


def rollout_seconds(m: mujoco.MjModel, K: int = 32, T: int = 100) -> float:
    """Wall time (s) of one ``mujoco.rollout`` call of K x T steps, 2 threads."""
    full, ctrl = lift_controls(m, K, T, np.random.default_rng(0))
    datas = [mujoco.MjData(m) for _ in range(2)]
    with mj_rollout.Rollout(nthread=2) as r:
        t0 = time.perf_counter()
        r.rollout([m] * K, datas, np.tile(full, (K, 1)), ctrl)
        return time.perf_counter() - t0


def scripted_states(task, world, seeds, ticks=None) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(true state, observation)`` at every tick of scripted episodes in ``world``."""
    prop = task.default_proposer()
    out = []
    for seed in seeds:
        obs = world.reset(seed)
        for _ in range(ticks or task.max_ticks):
            out.append((world.true_state(), obs))
            obs, info = world.step(prop.propose(obs, task.state_from_obs(obs))[0])
            if task.success(info["qpos"]):
                break
    return out


def refine_rate(task, states, K: int) -> float:
    twin = make_twin("mujoco", task.model, task.param_space(), nthread=2)
    ref = Refiner(task, twin, make_optimizer("mppi"), RefinerConfig(num_samples=K, horizon=1.0))
    prop = task.default_proposer()
    t0 = time.perf_counter()
    for s, obs in states:
        ref.refine(s, prior=ref.plan_from_actions(prop.propose(obs, s)))
    return len(states) / (time.perf_counter() - t0)


def reconstruction(task, samples) -> dict:
    m = task.model
    pos_err, vel_err, secs = [], [], []
    d_true, d_est = mujoco.MjData(m), mujoco.MjData(m)
    for truth, obs in samples:
        t0 = time.perf_counter()
        s = task.state_from_obs(obs)
        secs.append(time.perf_counter() - t0)
        for d, x in ((d_true, truth), (d_est, s)):
            d.qpos[:], d.qvel[:] = x[: m.nq], x[m.nq : m.nq + m.nv]
            mujoco.mj_forward(m, d)
        if isinstance(task, ClothFold):  # every vertex
            pa, pb = task.vertices(truth[: m.nq]), task.vertices(s[: m.nq])
            va = truth[m.nq + task._vv[:, None] + np.arange(3)]
            vb = s[m.nq + task._vv[:, None] + np.arange(3)]
        else:  # every tracked point
            pa, pb = d_true.site_xpos[task._sites], d_est.site_xpos[task._sites]
            vel = np.empty(6)
            va, vb = [], []
            for d, out in ((d_true, va), (d_est, vb)):
                for site in task._sites:
                    mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, int(site), vel, 0)
                    out.append(vel[3:].copy())
            va, vb = np.array(va), np.array(vb)
        pos_err.append(np.linalg.norm(pa - pb, axis=1))
        vel_err.append(np.sqrt(((va - vb) ** 2).sum(axis=1).mean()))
    e = np.concatenate(pos_err)
    return {"mean_mm": 1e3 * e.mean(), "p95_mm": 1e3 * np.percentile(e, 95), "max_mm": 1e3 * e.max(),
            "vel_rms_mm_s": 1e3 * float(np.mean(vel_err)), "ms_per_call": 1e3 * float(np.median(secs)), "states": len(samples)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer episodes and repeats")
    ap.add_argument("--sections", default="speed,refine,episode,reconstruction", help="comma-separated sections to run")
    ap.add_argument("--episodes", type=int, default=3, help="refined episodes timed per task (section episode)")
    args = ap.parse_args()
    n_ep = 2 if args.quick else 5
    sections = set(args.sections.split(","))

    if "speed" in sections:
        speed(repeats=3 if args.quick else 7)
    if "refine" in sections:
        refine_rates()
    if "episode" in sections:
        episode_times(args.episodes)
    if "reconstruction" in sections:
        reconstructions(n_ep)


def speed(repeats: int) -> None:
    """Scenes measured round-robin, best of ``repeats`` each (other load on a shared machine
    slows single calls, never speeds them up)."""
    print("## steps/s in mujoco.rollout (K=32 x 100 steps of 10 ms, 2 threads, best of", repeats, "round-robin)")
    print("| scene | nq | nv | steps/s | K=32 x 1 s rollout (s) |")
    print("|---|---|---|---|---|")
    scenes = [(f"cloth {n}x{n}" + (" (task)" if n == 5 else ""), cloth_variant(n)) for n in (5, 7, 9)]
    scenes.append(("cloth 5x5, self-collision on", cloth_variant(5, selfcollide=True)))
    scenes += [("rope: capsule chain (task)", make_task("rope-shape").model), ("rope: 1D flex string", rope_flex())]
    best = [rollout_seconds(m) for _, m in scenes]
    for _ in range(repeats - 1):
        best = [min(b, rollout_seconds(m)) for b, (_, m) in zip(best, scenes, strict=True)]
    for (label, m), secs in zip(scenes, best, strict=True):
        print(f"| {label} | {m.nq} | {m.nv} | {3200 / secs:,.0f} | {secs:.2f} |")


def refine_rates() -> None:
    for name in ("cloth-fold", "rope-shape"):
        task = make_task(name)
        states = scripted_states(task, SimWorld(task), [90100], ticks=8)
        print(f"\n## {name}: refine rate (MPPI, 1 s horizon, {len(states)} states of a scripted episode)")
        print("| K | refine calls/s | s per call |")
        print("|---|---|---|")
        for K in (16, 32, 64):
            rate = refine_rate(task, states, K)
            print(f"| {K} | {rate:.2f} | {1 / rate:.2f} |")


def episode_times(n: int) -> None:
    print(f"\n## wall time of refined episodes (MPPI, K=64, 1 s horizon, shifted world seed 0, first {n} standard seeds)")
    print("| task | episode seed | success | ticks | wall (s) | s per tick |")
    print("|---|---|---|---|---|---|")
    for name in ("cloth-fold", "rope-shape"):
        cfg = RunConfig(task=name, refiner=RefinerConfig(num_samples=64, horizon=1.0), episodes=n)
        task, world, proposer, refiner = build(cfg)
        controller = Controller(refiner, proposer)
        for seed in episode_seeds(cfg):
            t0 = time.perf_counter()
            (r,) = run_episodes(world, controller, [seed], record=False)
            wall = time.perf_counter() - t0
            print(f"| {name} | {seed} | {r.success} | {r.ticks} | {wall:.1f} | {wall / r.ticks:.2f} |", flush=True)


def reconstructions(n_ep: int) -> None:
    for name in ("cloth-fold", "rope-shape"):
        task = make_task(name)
        samples = scripted_states(task, ShiftedWorld(task, 2, 0), range(90200, 90200 + n_ep))
        what = "all 25 vertices" if name == "cloth-fold" else "all 9 points p0..p8"
        print(f"\n## {name}: keypoint -> state reconstruction ({what}; {len(samples)} states of "
              f"{n_ep} scripted episodes, shifted world severity 2)")
        print("| estimator | mean error (mm) | 95% (mm) | max (mm) | velocity RMS (mm/s) | ms per call |")
        print("|---|---|---|---|---|---|")
        for settle in (task.settle_steps, 0):
            r = reconstruction(make_task(name, settle_steps=settle), samples)
            label = f"guess + settle ({settle} steps)" if settle else "guess alone"
            print(f"| {label} | {r['mean_mm']:.1f} | {r['p95_mm']:.1f} | {r['max_mm']:.1f} | {r['vel_rms_mm_s']:.0f} | {r['ms_per_call']:.1f} |")


if __name__ == "__main__":
    main()
