"""``GET …/queues/:name/stats`` against a real control plane: one snapshot whose counts
agree with each other, cancelled jobs counted, times in whole microseconds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest_asyncio
from support import Api

from lakeshore.actors.recorder import WaitRecorded
from lakeshore.bus import codec, subjects
from lakeshore.model import EventBatch, EventType, InvocationEvent, WorkerStatus

NS = "default"
Q = f"/v1/namespaces/{NS}/queues"
J = f"/v1/namespaces/{NS}/jobs"
WAIT_S = 10.0


class Plane:
    """The API, and what is needed to wait for the Recorder and play a daemon's part."""

    def __init__(self, api: Api, plane: Any, js: Any) -> None:
        self.api, self.plane, self.js = api, plane, js

    async def submit(self, n: int) -> list[str]:
        body = {"invocations": [{"fn": "builtins:len", "args": [[i]]} for i in range(n)]}
        status, answer = await self.api.post(f"{Q}/q/invocations", body)
        assert status == 202, answer
        await self.caught_up()
        return answer["ids"]

    async def started(self, inv: str, at: datetime) -> None:
        """Publish the ``started`` event a daemon would, stamped ``at``."""
        event = InvocationEvent(
            namespace=NS, queue="q", invocation_id=inv, ts=at, type=EventType.STARTED,
            attempt=1, epoch=1, worker="w-1", detail={"seq": 1},
        )  # fmt: skip
        await self.js.publish(
            subjects.event_subject(NS, "q"), codec.encode(EventBatch(events=[event]))
        )
        await self.caught_up()

    async def caught_up(self) -> None:
        last = (await self.js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
        async with asyncio.timeout(WAIT_S):
            await (await self.plane.parts.recorder.ask(WaitRecorded(last)))

    async def stats(self) -> dict[str, Any]:
        status, body = await self.api.get(Q + "/q/stats")
        assert status == 200, body
        return body


@pytest_asyncio.fixture
async def plane(control_plane, js) -> AsyncIterator[Plane]:
    async with control_plane.client() as api:
        assert (await api.post(Q, {"name": "q"}))[0] == 201
        yield Plane(api, control_plane.plane, js)


async def test_busy_daemons_never_outnumber_the_running_invocations(plane, register) -> None:
    # Three daemons whose last heartbeat said busy: what the registry holds right after a
    # batch finished, until their next heartbeat.
    for name in ("a", "b", "c"):
        await register(name, queues=["q"], status=WorkerStatus.BUSY)
    stats = await plane.stats()
    assert (stats["daemon_count"], stats["pending"], stats["running"]) == (3, 0, 0)
    assert (stats["busy"], stats["utilization"]) == (0, 0.0)

    await plane.submit(2)
    claim = await plane.js.pull_subscribe_bind(
        subjects.level_consumer(0), stream=subjects.queue_stream(NS, "q")
    )
    assert len(await claim.fetch(1, timeout=WAIT_S)) == 1
    stats = await plane.stats()
    assert (stats["pending"], stats["running"], stats["busy"]) == (1, 1, 1)
    assert stats["utilization"] == round(1 / 3, 4)
    await claim.unsubscribe()


async def test_cancelled_jobs_are_counted(plane) -> None:
    [kept, cancelled] = await plane.submit(2)
    status, body = await plane.api.post(f"{J}/{cancelled}/cancel")
    assert status == 200, body
    await plane.caught_up()
    stats = await plane.stats()
    assert (stats["submitted"], stats["cancelled"], stats["pending"]) == (2, 1, 1)
    assert (stats["succeeded"], stats["failed"]) == (0, 0)


async def test_times_are_whole_microseconds(plane) -> None:
    *ids, _ = await plane.submit(4)
    for inv, wait_us in zip(ids, (100_000, 200_000, 300_001), strict=True):
        submitted = datetime.fromisoformat((await plane.api.get(f"{J}/{inv}"))[1]["submitted_at"])
        await plane.started(inv, submitted + timedelta(microseconds=wait_us))
    stats = await plane.stats()
    # p95 interpolates between 0.2 s and 0.300001 s: 0.2900009 s before rounding.
    assert (stats["wait_p50_s"], stats["wait_p95_s"]) == (0.2, 0.290001)
    for key in ("wait_p50_s", "wait_p95_s", "oldest_pending_age_s"):
        value = stats[key]
        assert value is not None and value == round(value, 6), (key, value)
