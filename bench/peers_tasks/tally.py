"""Each worker process's count of Drain runs and its first start / last end, in Redis.

A task only updates in-process numbers (a lock and two clock reads); a background thread
of the same process writes them to one Redis hash at most every :data:`FLUSH_S`, so the
bench's count does not add a Redis round trip to every run it measures. The times are
the task's own, so the flush delay is not part of the figure.
"""

from __future__ import annotations

import os
import threading
import time

import redis

#: The Redis hash: field = worker pid, value = ``"count first_start last_end"``.
KEY = "peers:tally"
#: Most seconds between a run and its flush to Redis.
FLUSH_S = 0.01


class Tally:
    """A process's runs; after a fork the child starts from zero with its own thread."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        self._pid = 0
        self._count = 0
        self._first = 0.0
        self._last = 0.0

    def record(self, start: float, end: float) -> None:
        """One run that started at ``start`` and ended at ``end`` (``time.time()``)."""
        with self._lock:
            if self._pid != os.getpid():
                self._restart()
            self._first = min(self._first, start) if self._count else start
            self._count += 1
            self._last = max(self._last, end)
        self._dirty.set()

    def _restart(self) -> None:
        self._pid = os.getpid()
        self._count, self._first, self._last = 0, 0.0, 0.0
        self._dirty = threading.Event()
        threading.Thread(target=self._flush, args=(self._dirty,), daemon=True).start()

    def _flush(self, dirty: threading.Event) -> None:
        client = redis.Redis.from_url(self._url)
        pid = str(os.getpid())
        while True:
            dirty.wait()
            dirty.clear()
            with self._lock:
                value = f"{self._count} {self._first!r} {self._last!r}"
            client.hset(KEY, pid, value)
            time.sleep(FLUSH_S)


def read(client: redis.Redis) -> tuple[int, float, float]:
    """All workers' runs so far: ``(count, first start, last end)``; ``(0, 0, 0)`` if none."""
    rows = [v.split() for v in client.hgetall(KEY).values()]
    if not rows:
        return 0, 0.0, 0.0
    count = sum(int(r[0]) for r in rows)
    return count, min(float(r[1]) for r in rows), max(float(r[2]) for r in rows)
