"""Anytime planning: a refine call that spends what its deadline allows, in samples as well as
in iterations, and the deadline a real-time planning cycle derives from the world's period.

Under a deadline one iteration's ``K`` candidates are rolled out in chunks of ``ceil(K / C)``
(``RefinerConfig.chunks = C``), the incumbent and the base proposal in the first. Before each
further chunk (of ``n`` candidates) the call predicts its end from the last chunk's time per
candidate ``s``::

    start it only if  now + n s <= t0 + deadline

so a call ends at most one chunk past its deadline (the chunk that ran slower than predicted),
and the first chunk always runs: there is always a plan to select, the base proposal among
the candidates. The optimizer then updates on the candidates evaluated. Without a cut the
chunks' rollouts are those of one batch, so the same seed gives the same plan.

In real time (:class:`~twinloop.control.AsyncController`), a cycle must publish its plan
within one tick of the world, ``1 / rate`` wall seconds. The refine's share of it::

    deadline = (1 - margin) / rate - overhead

where ``overhead`` is the slowest of the last cycles' non-refine parts (state estimate,
prediction through the actions in flight, proposer, publishing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from twinloop.rollouts import Rollouts

#: cycles whose non-refine part bounds the next deadline
OVERHEAD_WINDOW = 5


@dataclass(frozen=True)
class Chunked:
    """What :func:`evaluate_in_chunks` evaluated: the first ``n`` of the candidates.

    Attributes:
        rollouts: their rollouts (``(P, n, ...)``).
        costs: ``(n,)`` aggregated costs.
        steps: physics steps simulated.
        n: candidates evaluated (the first ``n`` rows of the batch).
        chunk_seconds: the last chunk's time per candidate (s), for the next prediction.
    """

    rollouts: Rollouts
    costs: np.ndarray
    steps: int
    n: int
    chunk_seconds: float


def chunk_size(num_samples: int, chunks: int) -> int:
    """Candidates per chunk: ``ceil(K / chunks)``, at least 2 (the incumbent and the prior)."""
    return max(2, -(-num_samples // chunks))


def evaluate_in_chunks(evaluate: Callable[[int, int], tuple], n: int, size: int, end: float | None,
                       clock: Callable[[], float], per_candidate: float = 0.0) -> Chunked:
    """Evaluate rows ``[0, n)`` of a batch in chunks of ``size`` until the next chunk would end
    past ``end`` (a ``clock()`` time; ``None``: all of them); the first chunk always runs.

    Args:
        evaluate: ``evaluate(a, b) -> (rollouts, (b - a,) costs, steps)`` of rows ``[a, b)``.
        per_candidate: the time per candidate measured before (s), for the first prediction
            (the first chunk runs regardless; this only matters when it is not the whole batch).
    """
    parts, a = [], 0
    while a < n:
        b = min(a + size, n)
        if a and end is not None and clock() + (b - a) * per_candidate > end:
            break
        t = clock()
        parts.append(evaluate(a, b))
        per_candidate = (clock() - t) / (b - a)
        a = b
    r = parts[0][0] if len(parts) == 1 else concat_rollouts([p[0] for p in parts])
    return Chunked(r, np.concatenate([p[1] for p in parts]), sum(p[2] for p in parts), a, per_candidate)


def concat_rollouts(parts: list[Rollouts]) -> Rollouts:
    """Rollouts of chunks of one batch joined along the candidates (axis 1; ``ctrl`` axis 0)."""
    unc = [p.uncertainty for p in parts]
    return Rollouts(
        qpos=np.concatenate([p.qpos for p in parts], axis=1), qvel=np.concatenate([p.qvel for p in parts], axis=1),
        sensordata=np.concatenate([p.sensordata for p in parts], axis=1),
        ctrl=np.concatenate([p.ctrl for p in parts]), ok=np.concatenate([p.ok for p in parts], axis=1),
        dt=parts[0].dt, uncertainty=None if any(u is None for u in unc) else np.concatenate(unc))


def cycle_deadline(interval: float, overheads: list[float], margin: float) -> float:
    """Seconds a real-time planning cycle's refine may take: ``(1 - margin) interval`` less the
    slowest of the last :data:`OVERHEAD_WINDOW` non-refine parts ``overheads`` (s); at least 0
    (then only the first chunk runs)."""
    slow = max(overheads[-OVERHEAD_WINDOW:], default=0.0)
    return max((1.0 - margin) * interval - slow, 0.0)
