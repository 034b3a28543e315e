"""Every task with its defaults, as a user types it: base vs refined, one world and two world
distributions no setting was tuned on.

    python benchmarks/defaults_table.py [--tasks push-t,cloth-fold] [--episodes 20] [--out results/tables/defaults-table.json]

Rows: ``twinloop run --task T --world shifted --episodes N`` (world seed 0) and the same with
``--world-per-episode --seed S`` for S = 1, 2 (each episode in its own shifted world). Only
``--no-video --no-record --out`` are added (they change no episode), and ``--pin``'s options
where given (a budget the tasks no longer default to, named in each row's command). The rule the table is
read against: refined success never below base success by more than one episode, and refined
>= 80% wherever the base is >= 50%. Writes a JSON of every row (successes, Wilson intervals,
control rates, the acceptance verdicts) and prints a Markdown table. Each row is run once, in
order; a row already in ``--out`` is kept (a run cut short resumes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from twinloop.stats import wilson

TASKS = ["push-t", "block-push", "push-upright", "pivot", "peg-insert", "pusher-v5", "cloth-fold", "rope-shape"]
#: row key -> (label, extra options)
WORLDS = {"seed0": ("shifted world, world seed 0", []),
          "over1": ("over worlds, seed 1", ["--world-per-episode", "--seed", "1"]),
          "over2": ("over worlds, seed 2", ["--world-per-episode", "--seed", "2"])}


def run_row(task: str, extra: list[str], episodes: int, pinned: list[str] = ()) -> dict:
    """One row: ``twinloop run`` with the world's ``extra`` options and the ``pinned`` settings
    (none for a user's command; ``-k 32`` runs a row at a budget the task no longer defaults to)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["twinloop", "run", "--task", task, "--world", "shifted", "--episodes", str(episodes), *extra, *pinned]
        t0 = time.perf_counter()
        proc = subprocess.run([*cmd, "--no-video", "--no-record", "--out", tmp], capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        s = json.loads((Path(tmp) / "summary.json").read_text())
    rows = {r["controller"]: r for r in s["results"]}
    accept = [e.get("accept") for e in s["per_episode"].get("refined", []) if e.get("accept")]
    return {
        "command": " ".join(cmd),
        "wall_s": round(time.perf_counter() - t0, 1),
        "episodes": episodes,
        **{f"{k}_successes": rows[k]["successes"] for k in rows},
        **{f"{k}_control_hz": round(rows[k]["control_hz"], 2) for k in rows},
        "refined_ticks_sent": {"refined": sum(a["refined"] for a in accept), "base": sum(a["base"] for a in accept)}
        if accept else None,
        **({"planning_twin": s["planning_twin"]} if s.get("planning_twin") else {}),
        "config": {**s["config"], "experiment": {**s["config"]["experiment"], "out": "twinloop-out"}}
        if "experiment" in s["config"] else s["config"],  # not the temporary folder it ran in
    }


def verdict(row: dict) -> str:
    b, r, n = row.get("base_successes"), row["refined_successes"], row["episodes"]
    if b is None:
        return "no base"
    ok = r >= b - 1 and (b < 0.5 * n or r >= 0.8 * n)
    return "meets" if ok else "MISSES"


def cell(row: dict, k: str) -> str:
    """``x/n [lo, hi]%`` of controller ``k``'s successes (95% Wilson interval)."""
    x, n = row.get(f"{k}_successes"), row["episodes"]
    if x is None:
        return "-"
    lo, hi = wilson(x, n)
    return f"{x}/{n} [{100 * lo:.0f}, {100 * hi:.0f}]%"


def table(rows: dict) -> str:
    lines = ["| task | world | base | refined | refined Hz | rule |", "|---|---|---|---|---|---|"]
    for key, row in rows.items():
        task, world = key.split(" | ")
        lines.append(f"| {task} | {WORLDS[world][0]} | {cell(row, 'base')} | {cell(row, 'refined')} | "
                     f"{row['refined_control_hz']:.1f} | {verdict(row)} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--worlds", default=",".join(WORLDS), help="comma-separated keys of WORLDS")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--out", default="results/tables/defaults-table.json")
    ap.add_argument("--pin", default="", help="options added to every row's command (\"-k 32\"): a budget the "
                    "tasks no longer default to, for a table of what they gave before")
    args = ap.parse_args(argv)
    out = Path(args.out)
    kept = json.loads(out.read_text()) if out.exists() else {}  # its rows and its note
    rows = kept.get("rows", {})
    for task in args.tasks.split(","):
        for world in args.worlds.split(","):
            key = f"{task} | {world}"
            if key in rows:
                continue
            rows[key] = run_row(task, WORLDS[world][1], args.episodes, args.pin.split())
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({**kept, "rule": "refined >= base - 1 episode; refined >= 80% where base >= 50%",
                                       "rows": rows}, indent=1))
            print(key, {k: v for k, v in rows[key].items() if k.endswith(("successes", "hz", "wall_s"))},
                  flush=True, file=sys.stderr)
    print(table(rows))


if __name__ == "__main__":
    main()
