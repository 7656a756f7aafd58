"""Celery on Redis, its default set-up: Redis broker (kombu), Redis result backend, JSON.

Run by ``celery -A peers_tasks.celery_app worker --pool=prefork --concurrency=2`` from
``bench/``; ``PEERS_REDIS_URL`` names the bench's private Redis. Drain's task ignores its
result (nothing is stored, as with no backend); W2's is stored and read with ``.get()``.
"""

from __future__ import annotations

import os
import time

from celery import Celery

from peers_tasks.tally import Tally

URL = os.environ["PEERS_REDIS_URL"]
app = Celery("peers", broker=URL, backend=URL)
app.conf.broker_connection_retry_on_startup = True
tally = Tally(URL)


@app.task(ignore_result=True)
def drain_noop(i: int) -> int:
    start = time.time()
    tally.record(start, time.time())
    return i


@app.task
def w2_noop(i: int) -> int:
    return i


def enqueue(n: int) -> None:
    """``n`` Drain tasks, one ``delay`` after the other."""
    for i in range(n):
        drain_noop.delay(i)


def round_trip(i: int, timeout_s: float) -> int:
    """One W2 task and its result."""
    return w2_noop.delay(i).get(timeout=timeout_s)
