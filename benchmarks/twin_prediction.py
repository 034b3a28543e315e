"""Open-loop prediction error of twins on recorded world episodes, per policy.

Every ``--stride`` ticks of every recorded world episode (``twinloop evaluate`` writes them under
``OUT/episodes/world/<policy>``), the twin starts from the world's *true* state (the stand-in
world records it) and replays the recorded actions for ``--horizon`` ticks with the world's
actuation delay; the block's position (mm) and yaw (deg) errors after 1, 5 and ``--horizon``
ticks are averaged per policy. The world's own parameters replay with zero error (a check of the
replay); the calibrated ones show where and how much the twin drifts. Signed ``gain``: how far
the twin moves the block along the world's motion (1 = as far; < 1 = it moves less).

    python benchmarks/twin_prediction.py /tmp/eval_main --set truth --set cal --set truth:block_damping=cal
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from twinloop.calib.windows import Windows, window_rollout_states
from twinloop.data import Dataset
from twinloop.tasks import make_task
from twinloop.twin import make_twin
from twinloop.worlds import make_world


def param_set(text: str, truth: np.ndarray, cal: np.ndarray, names: list[str]) -> np.ndarray:
    """``truth`` | ``cal`` | ``nominal``, optionally ``:name=truth|cal,...`` overrides."""
    head, _, tail = text.partition(":")
    base = {"truth": truth, "cal": cal}
    out = base[head].copy()
    for item in filter(None, tail.split(",")):
        name, _, src = item.partition("=")
        out[names.index(name)] = base[src][names.index(name)]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("evaluation", help="a twinloop evaluate output folder with episodes/world")
    p.add_argument("--set", action="append", default=None, help="parameter set (repeatable): truth, cal, cal:NAME=truth")
    p.add_argument("--horizon", type=int, default=10)
    p.add_argument("--stride", type=int, default=10)
    a = p.parse_args()
    root = Path(a.evaluation)
    summary = json.loads((root / "summary.json").read_text())
    cfg = summary["config"]
    task = make_task(cfg["task"])
    space = task.param_space()
    world = make_world(task, cfg["world"], severity=cfg["severity"], seed=cfg["world_seed"])
    cal = np.array([summary["evaluation"]["calibration"]["estimate"][n] for n in space.names])
    sets = a.set or ["truth", "cal"]
    P = np.stack([param_set(s, world.hidden_params, cal, space.names) for s in sets])
    twin = make_twin("mujoco", task.model, space)
    H = a.horizon
    print(f"| policy | windows | block motion (mm / {H} ticks) | " + " | ".join(
        f"{s}: pos err 1/5/{H} ticks (mm), yaw err {H} (deg), gain" for s in sets) + " |")
    print("|---" * (3 + len(sets)) + "|")
    for pol in sorted((root / "episodes" / "world").iterdir()):
        starts, acts, targets, before = [], [], [], []
        for ep in Dataset(pol).episodes():
            S = np.concatenate([ep.world_qpos, ep.world_qvel], axis=1)
            for s in range(1, len(ep.actions) - H, a.stride):
                starts.append(S[s]), acts.append(ep.actions[s:s + H]), targets.append(S[s + 1:s + H + 1])
                before.append(ep.actions[s - 1])
        win = Windows(np.array(starts), np.array(acts), np.array(targets), np.zeros(len(starts), int), np.array(before))
        pred, _ = window_rollout_states(twin, win, task.substeps, P, delay=world.delay_steps)
        true_move = win.targets[:, -1, 2:4] - win.starts[:, 2:4]
        cells = []
        for j in range(len(sets)):
            pe = np.linalg.norm(pred[j][..., 2:4] - win.targets[..., 2:4], axis=-1) * 1000
            ye = np.degrees(np.abs(np.angle(np.exp(1j * (pred[j][..., 5] - win.targets[..., 5])))))
            move = pred[j][:, -1, 2:4] - win.starts[:, 2:4]
            gain = (move * true_move).sum() / max((true_move**2).sum(), 1e-12)
            cells.append(f"{pe[:, 0].mean():.2f} / {pe[:, 4].mean():.2f} / {pe[:, H - 1].mean():.2f}, "
                         f"{ye[:, H - 1].mean():.2f}, {gain:.3f}")
        moving = np.linalg.norm(true_move, axis=-1).mean() * 1000
        print(f"| `{pol.name}` | {len(starts)} | {moving:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
