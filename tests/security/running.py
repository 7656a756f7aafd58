"""In-process daemons and their jobs, for the closed-bus tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from polling import eventually

from lakeshore.daemon import DaemonSettings, Running, run_daemon

WAIT_S = 15.0


@contextlib.asynccontextmanager
async def daemon(settings: DaemonSettings) -> AsyncIterator[Running]:
    """``run_daemon`` in this process, registered; retired (within a bound) on exit."""
    stop = asyncio.Event()
    ready: asyncio.Future[Running] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_daemon(settings, stop, environ={}, on_ready=ready.set_result))
    try:
        yield await asyncio.wait_for(ready, WAIT_S)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), WAIT_S)


async def submit(api: Any, queue: str, spec: dict[str, Any], namespace: str = "default") -> str:
    """Submit one invocation over HTTP; its id."""
    path = f"/v1/namespaces/{namespace}/queues/{queue}/invocations"
    status, body = await api.post(path, {"invocations": [spec]})
    assert status == 202, body
    return body["ids"][0]


async def reaches(api: Any, job: str, state: str, namespace: str = "default") -> None:
    """Wait until the job is shown in ``state``."""

    async def shown() -> str:
        return (await api.get(f"/v1/namespaces/{namespace}/jobs/{job}"))[1]["state"]

    await eventually(shown, until=lambda s: s == state, timeout_s=WAIT_S, what=f"{job} {state}")
