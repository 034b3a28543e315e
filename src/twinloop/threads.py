"""Threads: background threads that run the engine stop before the interpreter shuts down, and
PyTorch's thread count set for a block (:func:`torch_threads`).

A daemon thread inside a MuJoCo call (which releases the GIL) when Python finalizes is
killed as it takes the GIL back, unwinding through the engine's C++ frames: the process
dies with a segmentation fault after the program's work is done. Objects that own such a
thread register here; at exit, before finalization, each one's ``stop`` is called (it must
end and join its thread).
"""

from __future__ import annotations

import atexit
import weakref
from contextlib import contextmanager

_owners: weakref.WeakSet = weakref.WeakSet()


def track(owner) -> None:
    """Stop ``owner`` (call ``owner._stop_thread()``) at interpreter exit if it is still alive."""
    _owners.add(owner)


def stop_all() -> None:
    """Stop every tracked owner's thread (what runs at exit)."""
    for owner in list(_owners):
        try:
            owner._stop_thread()
        except Exception:  # noqa: BLE001 - at exit, one failure must not keep the others running
            pass


atexit.register(stop_all)


@contextmanager
def torch_threads(n: int):
    """PyTorch's intra-op thread count set to ``n`` inside the block, restored after. Small
    networks run faster on one thread on a busy 2-core machine (the threads wait on each other)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
