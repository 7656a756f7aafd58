"""More functions for the fault tests' daemons (``PYTHONPATH`` includes this folder).

Each logs one line per execution to ``$FAULTS_RUNS``, as ``fault_targets.work`` does, with
more columns after ``i pid``.
"""

import os
import threading
import time

from fault_targets import daemon_pid


def _log(*fields: object) -> None:
    with open(os.environ["FAULTS_RUNS"], "a") as f:
        f.write(" ".join(map(str, fields)) + "\n")


def timed(i: int, run_s: float = 0.0) -> int:
    """Run ``run_s`` seconds, or ``$FAULTS_RUN_S`` when the daemon sets it (a slow machine);
    log ``i pid start end`` (wall clock)."""
    start = time.time()
    # Not time.sleep: under libfaketime with DONT_FAKE_MONOTONIC it fails with EINVAL.
    threading.Event().wait(float(os.environ.get("FAULTS_RUN_S", run_s)))
    _log(i, daemon_pid(), start, time.time())
    return i


def blocked(i: int, hold_s: float) -> int:
    """Block the worker thread on a lock nobody releases, for ``hold_s`` seconds."""
    start = time.time()
    threading.Event().wait(hold_s)
    _log(i, daemon_pid(), start, time.time())
    return i


def clock(i: int) -> float:
    """The daemon's wall clock (seconds since the epoch) when it ran ``i``."""
    now = time.time()
    _log(i, daemon_pid(), now)
    return now


def padded(i: int, pad: str = "") -> int:
    """Log ``i pid len(pad)``: an invocation made big by ``pad`` (to fill a store)."""
    _log(i, daemon_pid(), len(pad))
    return i
