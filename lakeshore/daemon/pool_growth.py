"""When the worker pool starts another worker process (pure, no I/O).

Starting a Python process costs tens of milliseconds of CPU (over a hundred on a loaded
two-core machine); a small function's run on a warm one, a fraction of a millisecond. A
pool that started a process for every run that found none idle (up to its ``concurrency``)
would spend a drain of small runs starting processes; one that never grew would queue long
runs behind each other. So a run that finds no idle worker of its environment gets a new
one only when that is the sooner way to run it: when the pool's own workers would not
reach it before a new one could be started. Then a run never waits for a busy worker
longer than a start would have taken it, and a pool of small runs stays small. Below one
worker per CPU core, a waiting run always starts one: the daemon and its workers then
run on every core at once (a round trip to one worker leaves the others idle).

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
    """Whether a new worker would reach the ``position``-th waiting run sooner than the
    pool's own (the arguments are :func:`expected_wait_s`'s; a tie starts none), or the
    environment has fewer workers than ``cores``."""
    if len(busy_s) + len(starting_s) < cores:
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
