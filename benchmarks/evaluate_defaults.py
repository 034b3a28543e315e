"""`twinloop evaluate --task push-t` with its defaults at 100 episodes per policy and side, on
world seeds 0, 1 and 2: does the default calibrated twin rank the policies as the world does?

Runs the plain command once per world seed (skipping a seed whose ``summary.json`` is already
complete, so an interrupted run resumes), then writes per seed and twin the ranking metrics,
each policy's success in the world and the twins, and the goal's read-off
(rule: ``results/tables/evaluate-defaults.rule.txt``).

    python benchmarks/evaluate_defaults.py --json results/tables/evaluate-defaults.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def command(seed: int, episodes: int, executor: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "twinloop", "evaluate", "--task", "push-t", "--episodes", str(episodes),
            "--world-seed", str(seed), "--executor", executor, "--no-record", "--out", str(out)]


def read_off(summary: dict) -> dict:
    """The goal per twin: r >= 0.98, MMRV <= 0.02, every policy within 10 points; and the calibrated
    twin not ranking worse than the nominal one."""
    ev = summary["evaluation"]
    n = summary["episodes"]
    twins = {}
    for name, m in ev["twins"].items():
        twins[name] = {k: m[k] for k in ("pearson", "pearson_ci", "spearman", "mmrv", "mmrv_ci",
                                          "mean_abs_error", "max_abs_error", "within_10_points")}
        twins[name]["goal_met"] = bool(m["pearson"] >= 0.98 and m["mmrv"] <= 0.02
                                       and m["within_10_points"] == len(ev["policies"]))
    policies = [{"name": p["name"], "world": round(p["world_success"] * n), "world_ci": p["world_ci"],
                 **{t: round(v["success"] * n) for t, v in p["twins"].items()}} for p in ev["policies"]]
    out = {"episodes": n, "twins": twins, "policies": policies, "wall_time_s": summary["wall_time_s"],
           "calibration": {k: ev["calibration"].get(k) for k in ("estimate", "delay_steps", "obs_noise", "truth",
                                                                 "truth_delay_steps", "truth_obs_noise")}}
    if "nominal" in twins and "calibrated" in twins:
        c, nom = twins["calibrated"], twins["nominal"]
        out["calibrated_not_worse"] = bool(c["mmrv"] <= nom["mmrv"] and c["pearson"] >= nom["pearson"])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0,1,2", help="world seeds, comma-separated")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--executor", default="ray")
    p.add_argument("--root", default="runs", help="where each seed's evaluation is written")
    p.add_argument("--json", default=None, help="write the table here")
    a = p.parse_args()
    rows = {}
    for seed in (int(s) for s in a.seeds.split(",")):
        out = Path(a.root) / f"eval-defaults-{seed}"
        path = out / "summary.json"
        done = path.exists() and json.loads(path.read_text()).get("episodes") == a.episodes
        if not done:
            cmd = command(seed, a.episodes, a.executor, out)
            print("$", " ".join(cmd[1:]), flush=True)
            subprocess.run(cmd + (["--overwrite"] if out.exists() else []), check=True)
        rows[str(seed)] = {"command": "twinloop " + " ".join(command(seed, a.episodes, a.executor, out)[3:]),
                           **read_off(json.loads(path.read_text()))}
        r = rows[str(seed)]
        for name, m in r["twins"].items():
            print(f"world seed {seed} {name}: r {m['pearson']:.3f} MMRV {m['mmrv']:.3f} "
                  f"max |twin - world| {100 * m['max_abs_error']:.0f} points, goal met: {m['goal_met']}")
        print(f"world seed {seed}: calibrated not worse than nominal: {r.get('calibrated_not_worse')}", flush=True)
    if a.json:
        table = {f"world seed {s}, {name} twin": {"pearson": m["pearson"], "pearson_ci": m["pearson_ci"],
                                                   "mmrv": m["mmrv"], "max_error_points": round(100 * m["max_abs_error"]),
                                                   "within_10_points": m["within_10_points"], "goal_met": m["goal_met"]}
                 for s, r in rows.items() for name, m in r["twins"].items()}
        Path(a.json).write_text(json.dumps({"rule": "results/tables/evaluate-defaults.rule.txt", "rows": table,
                                            "seeds": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
