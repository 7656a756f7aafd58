"""The worker process's wire: frames read however the socket delivers them."""

from __future__ import annotations

import os

from lakeshore.daemon import worker_main
from lakeshore.daemon.pool import Pool
from lakeshore.daemon.worker_main import Call, Done


async def test_calls_written_back_to_back_are_each_answered_in_order():
    pool = Pool(dict(os.environ), size=1, max_runs=None)
    worker = await pool._spawn(())
    try:
        calls = [Call(fn="operator:add", args=[i, 1], kwargs={}, env={}) for i in range(3)]
        # One write holding three frames: the worker may read them in one piece.
        worker._channel.write(b"".join(worker_main.encode(c) for c in calls))
        answers = [await worker._answers.next() for _ in calls]
        assert all(isinstance(a, Done) and a.ok for a in answers), answers
        assert [a.value for a in answers] == [1, 2, 3]
    finally:
        await worker.close()
