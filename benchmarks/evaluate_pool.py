"""Pool several `twinloop evaluate` runs on disjoint seeds into one evaluation.

A long evaluation (8 policies x 50 episodes x 2 sides is ~1 h on 2 cores) runs in pieces that
each hold the CPU for minutes: the same world and the same calibrated twin (``--posterior``), a
subset of the policies per piece, and new seeds (``--seed 1`` runs seeds 100000-...). This
script pools each policy's episodes over the pieces (:func:`twinloop.run.evaluate.pool_evaluations`
refuses mixed worlds or twins and repeated seeds) and prints per-policy success with Wilson
intervals and the ranking metrics with bootstrap intervals.

    python benchmarks/evaluate_pool.py /tmp/eval_main/summary.json /tmp/ev50/*/summary.json \\
        --twin calibrated-physics --json /tmp/ev50/pooled.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from twinloop.run.evaluate import pool_evaluations


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("summaries", nargs="+", help="summary.json files of twinloop evaluate runs")
    p.add_argument("--twin", default="calibrated-physics", help="the twin-world compared with the world")
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--json", default=None, help="write the pooled evaluation here")
    a = p.parse_args()
    ev = pool_evaluations([json.loads(Path(s).read_text()) for s in a.summaries], a.twin, a.n_boot)
    n = ev["episodes"]
    print(f"{len(a.summaries)} runs pooled: {len(ev['policies'])} policies x {n} episodes per side, twin {a.twin}")
    print("| policy | world | twin | twin - world |")
    print("|---|---|---|---|")
    for row in ev["policies"]:
        w, t = row["world_ci"], row["twin_ci"]
        print(f"| `{row['name']}` | {round(row['world_success'] * n)}/{n} [{100 * w[0]:.0f}, {100 * w[1]:.0f}]% "
              f"| {round(row['twin_success'] * n)}/{n} [{100 * t[0]:.0f}, {100 * t[1]:.0f}]% | {100 * row['error']:+.0f} |")
    for k in ("pearson", "spearman", "mmrv"):
        lo, hi = ev[f"{k}_ci"]
        print(f"{k}: {ev[k]:.3f} [{lo:.2f}, {hi:.2f}]")
    print(f"mean / max abs. error: {100 * ev['mean_abs_error']:.0f} / {100 * ev['max_abs_error']:.0f} points; "
          f"within 10 points: {ev['within_10_points']} of {len(ev['policies'])}")
    if a.json:
        Path(a.json).write_text(json.dumps(ev, indent=1))


if __name__ == "__main__":
    main()
