"""Block-push's unobserved start state: can a window's start height be predicted, and when is it settled?

The param_recovery.py setting (hidden friction and mass, 10 excitation trajectories of 60 ticks,
1 mm / 0.01 rad observation noise). The block's height and vertical speed are not observed:
``state_from_obs`` sets them to 0, and every window restarts them there. Two measurements
against the world's true state:

1. RMS error of estimates of the unobserved components at the windows' starts (the free starts
   calibration uses): the constant; a replay of the 1-3 ticks before the start from the
   recorded (noisy) state; a replay of the whole trajectory with the observed components reset
   to the recorded ones every tick. At the true parameters and at the nominal ones.
2. Mean |true height| and |vertical speed| at free starts by how many tick boundaries before
   them were free of contact between moving bodies too (what ``CalibConfig.start_quiet`` asks).

    python benchmarks/hidden_start.py 3      # seeds 0..2
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from twinloop.calib.windows import Windows, free_starts, window_controls
from twinloop.tasks import make_task
from twinloop.twin import make_twin

sys.path.insert(0, str(Path(__file__).parent))
from param_recovery import PARAMS, hidden_values  # noqa: E402
from start_oracle import RecordingWorld, record  # noqa: E402


def main() -> None:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    task = make_task("block-push")
    space = task.param_space().subset(PARAMS)
    twin = make_twin("mujoco", task.model, space)
    m = task.model
    hidden = [m.jnt_qposadr[m.joint("block_z").id], m.nq + m.jnt_dofadr[m.joint("block_z").id]]

    def tick(starts, actions, x):  # (B, nstate), (B, L, nu) -> (B, nstate) after L ticks
        w = Windows(starts, actions, actions, np.zeros(len(starts)))
        r = twin.rollout_many(starts, window_controls(w, task.substeps), x[None], sensors=False)
        return np.concatenate([r.qpos[0, :, -1], r.qvel[0, :, -1]], axis=1)

    for seed in range(seeds):
        truth = hidden_values(task, np.random.default_rng([seed, 11]))
        world = RecordingWorld(task, space.apply(task.model, truth), 1e-3, 1e-2, 0.0)
        pairs = [record(task, world, task.excitation(1000 * seed + j, "excite"), 1000 * seed + j, 60, "full")
                 for j in range(10)]
        for x, label in ((truth, "true"), (space.nominal, "nominal")):
            errs: dict[str, list] = {"constant": [], "replay 1 tick": [], "replay 2 ticks": [], "replay 3 ticks": [],
                                     "tracking replay": []}
            for noisy, full in pairs:
                T = noisy.ticks
                track, cur = [noisy.states[0]], noisy.states[0]
                for k in range(T):  # observed components as recorded, the unobserved ones carried
                    s = noisy.states[k].copy()
                    s[hidden] = cur[hidden]
                    cur = tick(s[None], noisy.actions[k : k + 1][None], x)[0]
                    track.append(cur)
                free = free_starts(task.model, noisy.states, 0.003)
                for s in np.flatnonzero(free[: T - 4]):
                    true = full.states[s, hidden]
                    errs["constant"].append(noisy.states[s, hidden] - true)
                    errs["tracking replay"].append(track[s][hidden] - true)
                    for n in (1, 2, 3):
                        a = max(s - n, 0)
                        est = tick(noisy.states[a][None], noisy.actions[a:s][None], x)[0][hidden] if s else noisy.states[0, hidden]
                        errs[f"replay {n} tick{'s' * (n > 1)}"].append(est - true)
            print(f"seed {seed}, {label} parameters: RMS error of height (mm) / vertical speed (m/s)")
            for k, v in errs.items():
                r = np.sqrt(np.mean(np.square(v), axis=0))
                print(f"  {k:16s} {1000 * r[0]:.3f} / {r[1]:.4f}")
        rows = []
        for noisy, full in pairs:
            free, clean = free_starts(task.model, noisy.states, 0.003), free_starts(task.model, full.states, 0.003)
            for s in np.flatnonzero(free[:-4]):
                q = 0
                while s - q - 1 >= 0 and clean[s - q - 1]:
                    q += 1
                rows.append((min(q, 4), abs(full.states[s, hidden[0]]), abs(full.states[s, hidden[1]])))
        r = np.array(rows)
        print(f"seed {seed}: mean |true height| (mm) / |vertical speed| (m/s) at free starts, by free ticks before")
        for q in range(5):
            sel = r[:, 0] == q
            print(f"  {q}{'+' * (q == 4)} ticks: {sel.sum():3d} starts, {1000 * r[sel, 1].mean():.3f} / {r[sel, 2].mean():.4f}")


if __name__ == "__main__":
    main()
