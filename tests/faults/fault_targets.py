"""Functions the fault tests' daemons import (``PYTHONPATH`` includes this folder)."""

import os
import time


def daemon_pid() -> int:
    """The pid of the daemon running this: a function runs in a worker process, a child of
    its daemon (an ``inline`` one on a thread of the daemon itself)."""
    return os.getppid() if "LAKESHORE_RUN" in os.environ else os.getpid()


def work(i: int, sleep_s: float = 0.0) -> int:
    """Record one execution of ``i`` (a line in ``$FAULTS_RUNS``), then return it."""
    if sleep_s:
        time.sleep(sleep_s)
    with open(os.environ["FAULTS_RUNS"], "a") as f:
        f.write(f"{i} {daemon_pid()}\n")
    return i
