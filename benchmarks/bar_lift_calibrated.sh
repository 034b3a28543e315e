#!/usr/bin/env bash
# bar-lift planned in a twin calibrated from the base's own failed lifts in the same world (the
# rule: results/tables/bar-lift-robust.rule.txt, its addition). Usage:
#   bash benchmarks/bar_lift_calibrated.sh OUT_DIR
# then python benchmarks/bar_lift_robust.py --calibrated OUT_DIR adds the rows to the table.
set -euo pipefail
out=${1:?output folder}
mkdir -p "$out"
for w in 7 0; do
  twinloop run --task bar-lift --world shifted --world-seed $w --seed 50 --episodes 4 --record --no-video \
    --out "$out/rec$w" --overwrite > "$out/rec$w.log"
  twinloop calibrate "$out/rec$w/episodes/base" --task bar-lift --max-evals 40 --particles 8 --seed 0 \
    --out "$out/cal$w" --overwrite > "$out/cal$w.log"
done
twinloop run --task bar-lift --world shifted --world-seed 7 --seed 7 --episodes 4 --noise 0.3 \
  --posterior "$out/cal7/posterior.json" --no-video --no-record --out "$out/look7" --overwrite > "$out/look7.log"
twinloop run --task bar-lift --world shifted --episodes 20 --noise 0.3 \
  --posterior "$out/cal0/posterior.json" --no-video --no-record --out "$out/row0" --overwrite > "$out/row0.log"
