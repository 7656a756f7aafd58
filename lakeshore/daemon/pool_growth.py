"""When the worker pool starts another worker process (pure, no I/O).

Starting a Python process costs tens of milliseconds of CPU (over a hundred on a loaded
two-core machine); a small function's run on a warm one, a fraction of a millisecond. A
pool that started a process for every run that found none idle (up to its ``concurrency``)
spends a drain of small runs starting processes — 128 of them for 10,000 no-ops on two
daemons, more CPU than the runs — and one that never grew would queue long runs behind
each other. So a run that finds no idle worker of its environment gets a new one when:

- the environment has fewer workers than the machine has cores (they then run on every
  core at once: a round trip to one worker leaves the others idle);
- nothing is known of its runs yet (none has ended): a few at a time, as many starting at
  once as there are cores, until one ends;
- its runs take :data:`LONG_RUN_S` or more: each worker then adds to what the daemon gets
  done, and its start is paid once for many runs — as many workers as the concurrency;
- its runs are small, but the pool's own workers would not reach the run before a new one
  could be started (one is stuck on a long run): a run never waits for a busy worker
  longer than a start would have taken it.

How soon a worker frees: one that started a run ``elapsed`` seconds ago, when runs take
``mean_s`` on average, frees in ``mean_s - elapsed``; one already past the mean is guessed
to need as long again as it has run (a long run is likely to go on); one still starting
frees when its start is done. Each worker that frees takes the next waiting run, in order,
for ``mean_s`` more.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

#: Runs at least this long (seconds, on average) get as many workers as they can use.
LONG_RUN_S = 0.01


def remaining_s(elapsed: float, mean_s: float | None) -> float:
    """How long a worker busy for ``elapsed`` seconds is guessed to stay busy."""
    if mean_s is not None and elapsed < mean_s:
        return mean_s - elapsed
    return elapsed


def expected_wait_s(
    position: int,
    *,
    busy_s: Sequence[float],
    starting_s: Sequence[float],
    mean_s: float | None,
    start_s: float,
) -> float:
    """Seconds until the ``position``-th waiting run (from 1) gets one of the workers.

    Args:
        position: the run's place among those waiting for workers of its environment.
        busy_s: how long each busy worker of its environment has been on its run.
        starting_s: how long each worker of its environment being started has been so.
        mean_s: the recent mean run time; ``None`` before any run ended (runs are
            then taken to be over at once: the pool grows when they prove long).
        start_s: how long starting a worker takes.
    """
    frees = [remaining_s(e, mean_s) for e in busy_s]
    frees += [max(start_s - e, 0.0) for e in starting_s]
    if not frees:
        return math.inf
    heapq.heapify(frees)
    step = mean_s or 0.0
    for _ in range(position - 1):
        heapq.heapreplace(frees, frees[0] + step)
    return frees[0]


def should_start(
    position: int,
    *,
    busy_s: Sequence[float],
    starting_s: Sequence[float],
    mean_s: float | None,
    start_s: float,
    cores: int = 1,
) -> bool:
    """Whether to start a worker for the ``position``-th waiting run of an environment
    (the module's rules; the arguments are :func:`expected_wait_s`'s, and ``cores`` the
    machine's)."""
    if len(busy_s) + len(starting_s) < cores:
        return True
    if mean_s is None:
        return len(starting_s) < cores
    if mean_s >= LONG_RUN_S:
        return True
    wait = expected_wait_s(
        position, busy_s=busy_s, starting_s=starting_s, mean_s=mean_s, start_s=start_s
    )
    return wait > start_s


class Ewma:
    """An exponentially weighted mean; ``None`` until the first sample.

    Args:
        weight: the weight of each new sample.
    """

    def __init__(self, weight: float = 0.2, initial: float | None = None) -> None:
        self._weight = weight
        self.value = initial

    def add(self, sample: float) -> None:
        old = self.value
        self.value = sample if old is None else old + self._weight * (sample - old)
