"""How the control plane's garbage collector runs: rarely, and never over its startup heap.

The plane serves every org from one process. CPython's default thresholds (700, 10, 10)
collect the young generation every 700 allocations and the whole heap every 70,000 or so;
with a big backlog held in memory (pending ranks, waiters, event batches) a full collection
took 100–160 ms, 23 times in one minute of fault row 23's flood, and each one stalled every
request of every org (bench/fair_share.py). Collected after :data:`YOUNG` allocations, and
with what the start made frozen out of every collection, the same flood saw one full
collection; cycles are still collected, later.
"""

from __future__ import annotations

import gc

#: Allocations (less deallocations) between two collections of the young generation.
YOUNG = 50_000
#: Young collections per middle one, middle ones per full one.
MIDDLE, OLD = 20, 100


def for_a_server() -> None:
    """Collect rarely (at process start, before the plane is built)."""
    gc.set_threshold(YOUNG, MIDDLE, OLD)


def settled() -> None:
    """The plane has started: what it built so far lives as long as the process, so no
    collection scans it again (:func:`gc.freeze`)."""
    gc.collect()
    gc.freeze()
