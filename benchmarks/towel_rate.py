"""The towel at a control rate: a screen table from ``twinloop run`` outputs.

Each row of a rate screen is one ``twinloop run`` (the cloth-fold held-out recipe's planner with
cheaper settings), run under the shared CPU lock into its own folder; this script reads their
``summary.json`` files and writes the table (``results/tables/NAME.json``): per row the
command, refined and base successes, the refined 95% Wilson interval, the refined control
rate (median over episodes of ticks per second of controller compute) and the planner's
settings read back from the run's config.

    python benchmarks/towel_rate.py --rows ROWS.json --out results/tables/towel-rate-2.json

``ROWS.json``: ``{"rule": ..., "note": ..., "rows": {label: {"command": ..., "out": folder}}}``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from twinloop.errors import TwinloopError
from twinloop.stats import wilson


def row(command: str, out: Path) -> dict:
    """One table row from a run's ``summary.json`` in ``out``."""
    path = out / "summary.json"
    if not path.is_file():
        raise TwinloopError(f"{path}: no summary; run the row first ({command})")
    s = json.loads(path.read_text())
    res = {r["controller"]: r for r in s["results"]}
    ref, base = res["refined"], res["base"]
    cfg = s["config"]
    planner, grasp = cfg["planner"], cfg.get("grasp") or {}
    lo, hi = wilson(ref["successes"], ref["episodes"])
    return {
        "command": command,
        "episodes": ref["episodes"],
        "base_successes": base["successes"],
        "refined_successes": ref["successes"],
        "refined_wilson95": [lo, hi],
        "refined_control_hz": round(ref["control_hz"], 2),
        "num_samples": planner["refiner"]["num_samples"],
        "horizon_s": planner["refiner"]["horizon"],
        "carry": planner["refiner"]["carry"],
        "twin_resolution": grasp.get("twin_resolution") or 5,
        "twin_timestep": planner["twin_timestep"],
        "final_error_mean": ref["mean_final_error"],
        "wall_s": s.get("wall_time_s"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", required=True, help="the rows file (label -> command, output folder)")
    ap.add_argument("--out", required=True, help="the table to write")
    a = ap.parse_args()
    spec = json.loads(Path(a.rows).read_text())
    table = {"rule": spec["rule"], "note": spec.get("note", ""),
             "rows": {label: row(r["command"], Path(r["out"])) for label, r in spec["rows"].items()}}
    Path(a.out).write_text(json.dumps(table, indent=1) + "\n")
    for label, r in table["rows"].items():
        print(f"{label}: {r['refined_successes']}/{r['episodes']} at {r['refined_control_hz']} Hz "
              f"(base {r['base_successes']})")


if __name__ == "__main__":
    main()
