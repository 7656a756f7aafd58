"""Functions the fault tests' daemons import (``PYTHONPATH`` includes this folder)."""

import os
import time


def work(i: int, sleep_s: float = 0.0) -> int:
    """Record one execution of ``i`` (a line in ``$FAULTS_RUNS``), then return it."""
    if sleep_s:
        time.sleep(sleep_s)
    with open(os.environ["FAULTS_RUNS"], "a") as f:
        f.write(f"{i} {os.getpid()}\n")
    return i
