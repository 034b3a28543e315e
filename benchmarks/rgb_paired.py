"""A controller from camera images against the same controller given the world's observation,
paired on the same episodes.

For each row (``NAME:OPTIONS``, the options of ``twinloop run`` that choose its world and
episodes) the script runs ``twinloop run --task TASK --world shifted --episodes N OPTIONS`` and
the same with ``--observe rgb`` and ``--rgb-options`` (both ``--no-video --no-record``), one after the other, and writes
each controller's successes with Wilson intervals and the refined controllers' paired
difference (rgb minus given) with Newcombe's interval (:func:`twinloop.stats.paired_difference`).

    python benchmarks/rgb_paired.py --task rope-shape --episodes 60 \\
        --row "seed0:--world-seed 0 --seed 6300" --row "over:--world-per-episode --seed 6301" \\
        --out results/tables/rope-rgb-paired.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from twinloop.stats import paired_difference


def run(task: str, episodes: int, options: list[str]) -> tuple[dict, str, float]:
    cmd = ["twinloop", "run", "--task", task, "--world", "shifted", "--episodes", str(episodes), *options,
           "--no-video", "--no-record"]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        proc = subprocess.run([*cmd, "--out", tmp], capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{shlex.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        return json.loads((Path(tmp) / "summary.json").read_text()), shlex.join(cmd), time.perf_counter() - t0


def side(summary: dict, command: str, wall: float) -> dict:
    """A row as the results book reads it (``base_successes``, ``refined_successes``, ...)."""
    out = {"command": command, "wall_s": round(wall, 1), "episodes": summary["episodes"]}
    for r in summary["results"]:
        k = r["controller"]
        out[f"{k}_successes"] = r["successes"]
        out[f"{k}_control_hz"] = round(r["control_hz"], 2)
        out[f"{k}_final_error_mean"] = r.get("final_error_mean")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True)
    p.add_argument("--episodes", type=int, default=60)
    p.add_argument("--row", action="append", required=True, help="NAME:OPTIONS (repeatable)")
    p.add_argument("--rgb-options", default="", help="options of the run from pixels only (e.g. --set perception_shifts=4)")
    p.add_argument("--rule", default=None, help="the rule file the table answers (default: OUT's .rule.txt)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    out = Path(a.out)
    table = {"rule": a.rule or str(out.with_suffix(".rule.txt")), "rows": {}, "paired": {}}
    for spec in a.row:
        name, _, opts = spec.partition(":")
        options = shlex.split(opts)
        given = run(a.task, a.episodes, options)
        rgb = run(a.task, a.episodes, [*options, "--observe", "rgb", *shlex.split(a.rgb_options)])
        g = [e["success"] for e in given[0]["per_episode"]["refined"]]
        c = [e["success"] for e in rgb[0]["per_episode"]["refined"]]
        if [e["seed"] for e in given[0]["per_episode"]["refined"]] != [e["seed"] for e in rgb[0]["per_episode"]["refined"]]:
            raise SystemExit(f"row {name}: the two runs met different episodes")
        d, lo, hi = paired_difference(c, g)
        met = sum(c) >= sum(g) - round(0.05 * len(g))
        verdict = ("met, shown at 95%" if met and lo >= -0.05 else "met on the point estimate, not shown at 95%"
                   if met else "not met")
        table["rows"][f"{a.task} | {name}, given the observation"] = side(*given)
        table["rows"][f"{a.task} | {name}, from pixels"] = side(*rgb)
        table["paired"][name] = {
            "episodes": len(g), "both": sum(x and y for x, y in zip(g, c)),
            "given_only": sum(x and not y for x, y in zip(g, c)), "rgb_only": sum(y and not x for x, y in zip(g, c)),
            "neither": sum(not x and not y for x, y in zip(g, c)), "difference_rgb_minus_given": round(d, 4),
            "newcombe95": [round(lo, 4), round(hi, 4)], "verdict": verdict}
        print(f"{name}: refined given {sum(g)}/{len(g)}, from pixels {sum(c)}/{len(c)}, "
              f"difference {100 * d:+.1f} points [{100 * lo:+.1f}, {100 * hi:+.1f}]: {verdict}", flush=True)
        out.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
