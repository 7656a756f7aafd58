"""Functions the ``udf`` tests submit; importable by a daemon with ``tests/sdk`` on its path."""

from __future__ import annotations

import os

from lakeshore import udf

QUEUE = "sdk-tests"

#: what ``record`` was called with in this process
CALLS: list[object] = []


@udf(queue=QUEUE)
def double(x: int) -> int:
    return 2 * x


@udf(queue=QUEUE, max_attempts=2, priority=0, timeout=30)
def pair(a: object, b: object = None) -> tuple[object, object]:
    return a, b


@udf(queue=QUEUE)
async def adouble(x: int) -> int:
    return 2 * x


@udf(queue=QUEUE)
def fail(message: str) -> None:
    raise ValueError(message)


@udf(queue=QUEUE)
def record(value: object) -> int:
    CALLS.append(value)
    return os.getpid()
