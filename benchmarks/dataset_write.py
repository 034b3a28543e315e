"""Cost of a crash-consistent, verified dataset: milliseconds to write (commit) and to read
(verify) one episode.

Writes ``--episodes`` episodes of ``--frames`` frames (block-push-sized columns) into a fresh
dataset, then reads them all back. Run it against another tree to compare, e.g. the code
before commit points and checksums existed:

    python benchmarks/dataset_write.py
    PYTHONPATH=/path/to/other/src python benchmarks/dataset_write.py
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from twinloop.data import Dataset, EpisodeRecorder


def episode(i: int, frames: int) -> EpisodeRecorder:
    rng = np.random.default_rng(i)
    rec = EpisodeRecorder(i)
    for k in range(frames):
        rec.add(0.1 * k, rng.normal(size=10), rng.normal(size=2), twin_state=(rng.normal(size=6), rng.normal(size=6)),
                world_qpos=rng.normal(size=6), world_qvel=rng.normal(size=6), cost=float(rng.uniform()))
    rec.finish(bool(i % 2))
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--frames", type=int, default=80)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    recs = [episode(i, args.frames) for i in range(args.episodes)]
    writes, reads = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as d:
            ds = Dataset.create(f"{d}/ds", {"fps": 10, "task": "bench"})
            t0 = time.perf_counter()
            for r in recs:
                ds.write(r)
            writes.append((time.perf_counter() - t0) / len(recs))
            t0 = time.perf_counter()
            Dataset(f"{d}/ds").episodes()
            reads.append((time.perf_counter() - t0) / len(recs))
    print(f"{args.episodes} episodes x {args.frames} frames: write {1e3 * np.median(writes):.1f} ms/episode, "
          f"read {1e3 * np.median(reads):.2f} ms/episode (median of {args.repeats})")


if __name__ == "__main__":
    main()
