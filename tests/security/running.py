"""In-process daemons and their jobs, for the closed-bus tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from nats.js.errors import NotFoundError
from natsauth import plane_nats
from polling import eventually

from lakeshore.bus import subjects
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


async def reaches(
    api: Any, job: str, state: str, namespace: str = "default", wait_s: float = WAIT_S
) -> None:
    """Wait until the job is shown in ``state`` (for up to ``wait_s``)."""

    async def shown() -> str:
        return (await api.get(f"/v1/namespaces/{namespace}/jobs/{job}"))[1]["state"]

    await eventually(shown, until=lambda s: s == state, timeout_s=wait_s, what=f"{job} {state}")


async def logged(url: str, job: str, text: str, namespace: str = "default") -> None:
    """Wait until the first attempt of ``job`` has published ``text`` to its live log."""
    nc = await plane_nats(url)
    try:
        js = nc.jetstream()
        subject = subjects.log_subject(namespace, job, 1)

        async def first() -> bytes:
            try:
                return (await js.get_last_msg(subjects.LOGS_STREAM, subject)).data or b""
            except NotFoundError:
                return b""

        await eventually(
            first, until=lambda data: text.encode() in data, timeout_s=WAIT_S,
            what=f"{text!r} in the log of {job}",
        )  # fmt: skip
    finally:
        await nc.close()
