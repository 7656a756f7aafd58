"""Lakeshore's side of the spec/bench.md workloads: the no-op as a user's ``@udf``, and a
batch submitted to an idle queue, then run by fresh daemons (W1-call, W1-map, Drain).

The producer uses only the SDK's public API, as a user's script does:
``lakeshore.sdk.configure(Client(api, token))``, then ``f.submit`` / ``f.map`` /
``Invocation.result()`` from a plain thread. The figures are read back through the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from _harness import Server, daemons, server
from noop import noop

import lakeshore
from lakeshore.model import QueueCreate
from lakeshore.sdk import Client, Udf, configure

#: Daemons (and raw consumer processes) of every end-to-end workload.
DAEMONS = 2
#: Invocations each benchmark daemon runs at once (``--concurrency``); a no-op run is so
#: short that one slot per daemon would measure the claim round trip, not the pipeline.
CONCURRENCY = 64
#: The benchmark queue of each fresh server.
QUEUE = "bench"
#: Where the no-op runs on its daemon: ``process`` (the default, a worker process) or
#: ``inline`` (a daemon thread); ``LAKESHORE_BENCH_ISOLATION`` sets it for a whole run.
ISOLATION = os.environ.get("LAKESHORE_BENCH_ISOLATION", "process")
_PAGE = 1000
#: Longest pause between two polls of the API while a queue drains (seconds).
MAX_POLL_S = 0.25


@contextlib.contextmanager
def sdk_on(srv: Server, queue: str = QUEUE) -> Iterator[Udf]:
    """The no-op as ``lakeshore.udf(queue=queue)``, with the SDK's sync API configured for
    ``srv``; the SDK's client is closed on the way out.

    The SDK's warnings are silenced: the queue has no daemon while W1 submits, so every
    submit warns ``no_members`` (10,000 lines of expected noise).
    """
    sdk_log = logging.getLogger("lakeshore.sdk")
    level = sdk_log.level
    sdk_log.setLevel(logging.ERROR)
    configure(Client(srv.api, srv.token))
    try:
        yield lakeshore.udf(queue=queue, isolation=ISOLATION)(noop)
    finally:
        configure()
        sdk_log.setLevel(level)


@dataclass(frozen=True)
class QueueRun:
    """``n`` no-ops submitted to an idle queue, then run by :data:`DAEMONS` fresh daemons.

    Times are wall-clock seconds (``time.time()``, which every process here shares); a
    run's start and end are the daemon's own event timestamps, as the API reports them.
    """

    n: int
    submit_start: float
    submit_s: float
    launched: float
    first_start: float
    last_end: float
    recorded: float

    @property
    def submit_rate(self) -> float:
        return self.n / self.submit_s

    @property
    def drain_s(self) -> float:
        """The first run's start → the last run's end."""
        return self.last_end - self.first_start

    @property
    def drain_rate(self) -> float:
        return self.n / self.drain_s

    @property
    def e2e_rate(self) -> float:
        return self.n / (self.submit_s + self.drain_s)

    @property
    def recorded_rate(self) -> float:
        """``n`` over the first submit → the API reports all ``n`` succeeded."""
        return self.n / (self.recorded - self.submit_start)

    @property
    def recorded_drain_rate(self) -> float:
        """``n`` over the first run's start → the API reports all ``n`` succeeded."""
        return self.n / (self.recorded - self.first_start)

    @property
    def recorded_lag_s(self) -> float:
        """The last run's end → the API reports all ``n`` succeeded."""
        return self.recorded - self.last_end

    @property
    def startup_s(self) -> float:
        """Daemons launched → the first run starts."""
        return self.first_start - self.launched


async def queue_run(
    n: int, submit: Callable[[Udf, int], object], concurrency: int = CONCURRENCY
) -> QueueRun:
    """``submit(f, n)`` on a fresh server while no daemon pulls (in a thread, through the
    SDK's sync API), then :data:`DAEMONS` daemons start and run them all."""
    async with server() as srv, Client(srv.api, srv.token) as client:
        await client.queue_add(QueueCreate(name=QUEUE))
        with sdk_on(srv) as f:
            submit_start, start = time.time(), time.perf_counter()
            await asyncio.to_thread(submit, f, n)
            submit_s = time.perf_counter() - start
        launched = time.time()
        async with daemons(srv, QUEUE, DAEMONS, concurrency):
            recorded = await wait_recorded(client, n)
        first_start, last_end = await run_span(client, n)
    return QueueRun(n, submit_start, submit_s, launched, first_start, last_end, recorded)


async def wait_recorded(
    client: Client, n: int, poll_s: float = 0.02, timeout_s: float = 600
) -> float:
    """The wall-clock time at which the API first reports ``n`` succeeded in the queue.

    Asked every ``poll_s`` only near the end: before that, after about a quarter of the time
    the rest should take at the rate seen so far (at most :data:`MAX_POLL_S`), so that the
    bench's own queries (each one a stats query of the control plane) do not take the CPU
    the runs need on a small machine. The time found is late by at most the last pause.
    """
    async with asyncio.timeout(timeout_s):
        seen_at, seen = time.perf_counter(), 0
        while (done := (await client.queue_stats(QUEUE)).succeeded) < n:
            at = time.perf_counter()
            rate = (done - seen) / (at - seen_at) if done > seen else 0.0
            left_s = (n - done) / rate if rate else float("inf")
            seen_at, seen = at, done
            await asyncio.sleep(min(MAX_POLL_S, max(poll_s, left_s / 4)))
    return time.time()


async def run_span(client: Client, n: int) -> tuple[float, float]:
    """The first run's start and the last run's end among the queue's ``n`` succeeded jobs."""
    starts: list[datetime] = []
    ends: list[datetime] = []
    after = None
    while True:
        page = await client.jobs_ls(QUEUE, state="succeeded", limit=_PAGE, after=after)
        starts += (j.started_at for j in page if j.started_at is not None)
        ends += (j.finished_at for j in page if j.finished_at is not None)
        if len(page) < _PAGE:
            break
        after = page[-1].id
    if len(starts) != n or len(ends) != n:
        raise RuntimeError(f"{len(starts)} run starts and {len(ends)} run ends for {n} jobs")
    return min(starts).timestamp(), max(ends).timestamp()


def submit_each(f: Udf, n: int) -> None:
    """W1-call: ``f.submit(i)`` ``n`` times, one after the other."""
    for i in range(n):
        f.submit(i)


def submit_map(f: Udf, n: int) -> None:
    """W1-map: one ``f.map(range(n))``."""
    f.map(range(n))
