"""dramatiq on Redis, its default set-up: ``RedisBroker`` with the default middleware, plus
``Results`` on a ``RedisBackend`` for W2 (the only actor that stores results).

Run by ``dramatiq peers_tasks.dramatiq_app --processes 2 --threads 8`` from ``bench/``;
``PEERS_REDIS_URL`` names the bench's private Redis.
"""

from __future__ import annotations

import os
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend

from peers_tasks.tally import Tally

URL = os.environ["PEERS_REDIS_URL"]
broker = RedisBroker(url=URL)
broker.add_middleware(Results(backend=RedisBackend(url=URL)))
dramatiq.set_broker(broker)
tally = Tally(URL)


@dramatiq.actor
def drain_noop(i: int) -> int:
    start = time.time()
    tally.record(start, time.time())
    return i


@dramatiq.actor(store_results=True)
def w2_noop(i: int) -> int:
    return i


def enqueue(n: int) -> None:
    """``n`` Drain messages, one ``send`` after the other."""
    for i in range(n):
        drain_noop.send(i)


def round_trip(i: int, timeout_s: float) -> int:
    """One W2 message and its result, waited on with the backend's blocking get."""
    return w2_noop.send(i).get_result(block=True, timeout=int(timeout_s * 1000))
