"""The job routes against a real control plane: submit over HTTP, play the daemon's part by
publishing its lifecycle events and results, and read the jobs back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from support import Api

from lakeshore.actors.recorder import WaitRecorded
from lakeshore.bus import codec, subjects
from lakeshore.model import (
    DaemonControl,
    EventBatch,
    EventType,
    InvocationEvent,
    RemoteError,
    Result,
    WorkerStatus,
)

NS = "default"
Q = f"/v1/namespaces/{NS}/queues"
J = f"/v1/namespaces/{NS}/jobs"
WAIT_S = 10.0


class Jobs:
    """The API plus the daemon's side of the data plane."""

    def __init__(self, api: Api, plane: Any, js: Any) -> None:
        self.api, self.plane, self.js = api, plane, js

    async def submit(self, queue: str, n: int = 1, **spec: Any) -> list[str]:
        body = {"invocations": [{"fn": "builtins:len", "args": [[i]], **spec} for i in range(n)]}
        status, answer = await self.api.post(f"{Q}/{queue}/invocations", body)
        assert status == 202, answer
        await self.caught_up()
        return answer["ids"]

    async def daemon(self, queue: str, inv: str, *steps: tuple[EventType, int | None], **kw: Any):
        """Publish what a daemon would for ``inv``: ``(type, epoch)`` events, in order."""
        events = [
            InvocationEvent(
                namespace=NS,
                queue=queue,
                invocation_id=inv,
                ts=datetime.now(UTC),
                type=t,
                attempt=epoch or 0,
                epoch=epoch,
                worker=kw.get("worker", f"w-{epoch}"),
                detail={"seq": 1, **kw.get("detail", {})},
            )
            for t, epoch in steps
        ]
        await self.js.publish(
            subjects.event_subject(NS, queue), codec.encode(EventBatch(events=events))
        )
        await self.caught_up()

    async def put_result(self, inv: str, epoch: int, value: Any, ok: bool = True) -> None:
        kv = await self.js.key_value(subjects.RESULTS_BUCKET)
        error = None if ok else RemoteError(type="builtins.ValueError", message=str(value))
        result = Result(id=inv, ok=ok, value=value if ok else None, error=error, epoch=epoch)
        await kv.put(subjects.result_key(NS, inv, epoch), codec.encode(result))

    async def caught_up(self) -> None:
        """Wait until the Recorder has recorded everything published so far."""
        last = (await self.js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
        async with asyncio.timeout(WAIT_S):
            await (await self.plane.parts.recorder.ask(WaitRecorded(last)))


@pytest_asyncio.fixture
async def jobs(control_plane, js) -> AsyncIterator[Jobs]:
    async with control_plane.client() as api:
        await api.post(Q, {"name": "q"})
        yield Jobs(api, control_plane.plane, js)


async def test_jobs_are_listed_newest_first_and_paged_with_after(jobs: Jobs) -> None:
    ids = await jobs.submit("q", 5)
    status, body = await jobs.api.get(J + "?limit=2")
    assert status == 200
    page1 = [j["id"] for j in body["jobs"]]
    assert page1 == ids[::-1][:2]
    _, body = await jobs.api.get(f"{J}?limit=2&after={page1[-1]}")
    assert [j["id"] for j in body["jobs"]] == ids[::-1][2:4]
    _, body = await jobs.api.get(f"{J}?after={ids[0]}")
    assert body["jobs"] == []
    first = (await jobs.api.get(J))[1]["jobs"][-1]
    assert (first["state"], first["queue"], first["fn"], first["attempt"]) == (
        "pending", "q", "builtins:len", 0,
    )  # fmt: skip


async def test_jobs_filter_by_queue_and_state(jobs: Jobs) -> None:
    await jobs.api.post(Q, {"name": "other"})
    [a, b] = await jobs.submit("q", 2)
    [c] = await jobs.submit("other")
    await jobs.daemon("q", a, (EventType.CLAIMED, 1), (EventType.STARTED, 1))
    _, body = await jobs.api.get(J + "?queue=other")
    assert [j["id"] for j in body["jobs"]] == [c]
    _, body = await jobs.api.get(J + "?state=running")
    assert [(j["id"], j["worker"]) for j in body["jobs"]] == [(a, "w-1")]
    _, body = await jobs.api.get(J + "?state=pending&queue=q")
    assert [j["id"] for j in body["jobs"]] == [b]


@pytest.mark.parametrize(
    "query", ["state=sleeping", "limit=0", "limit=1001", "limit=x", "queue=Bad_Name"]
)
async def test_bad_list_parameters_are_400(jobs: Jobs, query: str) -> None:
    status, body = await jobs.api.get(f"{J}?{query}")
    assert status == 400, body


async def test_an_unknown_job_is_404(jobs: Jobs) -> None:
    for path in ("", "/result", "/cancel"):
        method = "POST" if path == "/cancel" else "GET"
        status, body = await jobs.api.request(method, f"{J}/nope{path}")
        assert status == 404 and "nope" in body["error"]["message"]


async def test_pending_jobs_say_why_and_where_they_wait(jobs: Jobs, register) -> None:
    await jobs.api.post(Q, {"name": "p", "kind": "priority"})
    [low, high] = [(await jobs.submit("p", priority=level))[0] for level in (1, 8)]
    [later_low] = await jobs.submit("p", priority=1)
    detail = (await jobs.api.get(f"{J}/{later_low}"))[1]
    assert (detail["pending_reason"], detail["position"]) == ("no_members", 2)
    assert [(await jobs.api.get(f"{J}/{i}"))[1]["position"] for i in (high, low)] == [0, 1]
    worker = await register("w", queues=["p"], status=WorkerStatus.BUSY)
    assert (await jobs.api.get(f"{J}/{low}"))[1]["pending_reason"] == "all_members_busy"
    await register(worker.name, queues=["p"], status=WorkerStatus.IDLE)
    assert (await jobs.api.get(f"{J}/{low}"))[1]["pending_reason"] == "queued"
    await jobs.api.post(Q + "/p/drain")
    _, body = await jobs.api.get(J + "?queue=p")
    assert {j["pending_reason"] for j in body["jobs"]} == {"draining"}


async def test_detail_has_attempts_and_the_stale_count(jobs: Jobs) -> None:
    [inv] = await jobs.submit("q")
    S, C, OK, R = EventType.STARTED, EventType.CLAIMED, EventType.SUCCEEDED, EventType.RETRYING
    await jobs.daemon("q", inv, (C, 1), (S, 1), (R, 1))
    await jobs.daemon("q", inv, (C, 2), (S, 2), (OK, 2))
    await jobs.daemon("q", inv, (OK, 2))
    status, body = await jobs.api.get(f"{J}/{inv}")
    assert status == 200
    assert (body["state"], body["attempt"], body["worker"], body["stale"]) == (
        "succeeded", 2, "w-2", 1,
    )  # fmt: skip
    assert [(a["epoch"], a["worker"], a["outcome"]) for a in body["attempts"]] == [
        (1, "w-1", "retrying"), (2, "w-2", "succeeded"),
    ]  # fmt: skip
    assert body["finished_at"] >= body["started_at"] >= body["submitted_at"]


async def test_a_duplicate_execution_of_one_epoch_is_an_attempt_of_its_own(jobs: Jobs) -> None:
    # An unconfirmed ack (or a delivery count restarted by a server crash) lets a second
    # daemon run the same epoch: both executions show, the second marked and stale.
    [inv] = await jobs.submit("q")
    S, C, OK = EventType.STARTED, EventType.CLAIMED, EventType.SUCCEEDED
    await jobs.daemon("q", inv, (C, 1), (S, 1), (OK, 1), worker="w-a")
    await jobs.daemon("q", inv, (C, 1), (S, 1), (OK, 1), worker="w-b")
    status, body = await jobs.api.get(f"{J}/{inv}")
    assert status == 200
    assert (body["state"], body["worker"], body["stale"]) == ("succeeded", "w-a", 1)
    runs = [(a["epoch"], a["worker"], a["outcome"], a["duplicate"]) for a in body["attempts"]]
    assert runs == [(1, "w-a", "succeeded", False), (1, "w-b", "stale", True)]
    duplicate = body["attempts"][1]
    assert duplicate["ended_at"] >= duplicate["started_at"] >= body["attempts"][0]["started_at"]


async def test_the_result_is_read_at_the_accepted_epoch(jobs: Jobs) -> None:
    [inv] = await jobs.submit("q")
    S, C, OK = EventType.STARTED, EventType.CLAIMED, EventType.SUCCEEDED
    await jobs.daemon("q", inv, (C, 1), (S, 1), (C, 2), (S, 2))
    await jobs.put_result(inv, 2, "from epoch 2")
    await jobs.daemon("q", inv, (OK, 2))
    await jobs.put_result(inv, 1, "from the zombie")
    await jobs.daemon("q", inv, (OK, 1))
    status, body = await jobs.api.get(f"{J}/{inv}/result")
    assert status == 200
    assert (body["ok"], body["value"], body["epoch"]) == (True, "from epoch 2", 2)


async def test_a_failed_job_answers_its_error(jobs: Jobs) -> None:
    [inv] = await jobs.submit("q")
    await jobs.put_result(inv, 1, "bad input", ok=False)
    error = {"type": "builtins.ValueError", "message": "bad input"}
    await jobs.daemon("q", inv, (EventType.STARTED, 1), (EventType.FAILED, 1),
                      detail={"error": error})  # fmt: skip
    status, body = await jobs.api.get(f"{J}/{inv}/result")
    assert (status, body["ok"], body["error"]["type"]) == (200, False, "builtins.ValueError")
    assert (await jobs.api.get(f"{J}/{inv}"))[1]["error"] == {**error, "traceback": ""}


async def test_result_waits_for_the_end_then_answers(jobs: Jobs) -> None:
    [inv] = await jobs.submit("q")
    status, body = await jobs.api.get(f"{J}/{inv}/result")
    assert (status, body["id"], body["state"]) == (202, inv, "pending")
    waiting = asyncio.create_task(jobs.api.get(f"{J}/{inv}/result?wait_s={WAIT_S}"))
    await jobs.put_result(inv, 1, 3)
    await jobs.daemon("q", inv, (EventType.STARTED, 1), (EventType.SUCCEEDED, 1))
    async with asyncio.timeout(WAIT_S):
        status, body = await waiting
    assert (status, body["ok"], body["value"]) == (200, True, 3)


async def test_result_answers_202_once_wait_s_has_passed(jobs: Jobs) -> None:
    [inv] = await jobs.submit("q")
    loop = asyncio.get_running_loop()
    began = loop.time()
    status, body = await jobs.api.get(f"{J}/{inv}/result?wait_s=0.3")
    assert (status, body["state"]) == (202, "pending")
    assert loop.time() - began >= 0.3
    for bad in ("-1", "601", "soon"):
        assert (await jobs.api.get(f"{J}/{inv}/result?wait_s={bad}"))[0] == 400


async def test_cancelling_a_pending_job_removes_it(jobs: Jobs) -> None:
    [inv, kept] = await jobs.submit("q", 2)
    made = (await jobs.api.post(f"/v1/namespaces/{NS}/tokens", {"description": "ci"}))[1]
    status, body = await jobs.api.request("POST", f"{J}/{inv}/cancel", token=made["token"])
    assert (status, body["state"]) == (200, "cancelled")
    info = await jobs.js.stream_info("LS_default_q")
    assert info.state.messages == 1
    status, body = await jobs.api.get(f"{J}/{inv}/result")
    assert (status, body["ok"], body["error"]["type"]) == (200, False, "lakeshore.Cancelled")
    status, body = await jobs.api.post(f"{J}/{inv}/cancel")
    assert status == 409 and "already cancelled" in body["error"]["message"]
    assert (await jobs.api.get(f"{J}/{kept}"))[1]["state"] == "pending"
    # Who cancelled it: the token the request came with.
    assert (await jobs.api.get(f"{J}/{inv}"))[1]["cancelled_by"] == f"ci ({made['id']})"


async def test_cancelling_a_running_job_tells_its_daemon(jobs: Jobs) -> None:
    [inv] = await jobs.submit("q")
    await jobs.daemon("q", inv, (EventType.CLAIMED, 1), (EventType.STARTED, 1), worker="w-abc")
    control = await jobs.plane.parts.bus.nc.subscribe(subjects.daemon_control_subject(NS, "w-abc"))
    status, body = await jobs.api.post(f"{J}/{inv}/cancel")
    assert (status, body["state"], body["worker"]) == (202, "running", "w-abc")
    async with asyncio.timeout(WAIT_S):
        msg = await control.next_msg(timeout=WAIT_S)
    order = msgspec.json.decode(msg.data, type=DaemonControl)
    assert order.cancel == inv and order.by  # the canceller, for the daemon to record
    await control.unsubscribe()


async def test_a_dropped_job_answers_a_dropped_error(jobs: Jobs) -> None:
    [inv] = await jobs.submit("q")
    await jobs.daemon("q", inv, (EventType.DROPPED, None))
    status, body = await jobs.api.get(f"{J}/{inv}/result")
    assert (status, body["ok"], body["error"]["type"]) == (200, False, "lakeshore.Dropped")
    assert (await jobs.api.post(f"{J}/{inv}/cancel"))[0] == 409


async def test_queue_stats_count_the_last_minutes(jobs: Jobs) -> None:
    ids = await jobs.submit("q", 4)
    S, OK, F = EventType.STARTED, EventType.SUCCEEDED, EventType.FAILED
    await jobs.daemon("q", ids[0], (S, 1), (OK, 1))
    await jobs.daemon("q", ids[1], (S, 1), (F, 1))
    await jobs.daemon("q", ids[2], (S, 1))
    status, stats = await jobs.api.get(Q + "/q/stats")
    assert status == 200
    assert (stats["submitted"], stats["succeeded"], stats["failed"]) == (4, 1, 1)
    assert 0 <= stats["wait_p50_s"] <= stats["wait_p95_s"] < WAIT_S
    assert 0 <= stats["oldest_pending_age_s"] < WAIT_S
    await jobs.daemon("q", ids[3], (EventType.CANCELLED, None))
    stats = (await jobs.api.get(Q + "/q/stats"))[1]
    assert stats["oldest_pending_age_s"] is None


async def test_jobs_carry_their_workers_name_asked_once_per_listing(
    jobs: Jobs, register, monkeypatch
) -> None:
    worker = await register("trainer-7", queues=["q"])
    [a, b, c, pending] = await jobs.submit("q", 4)
    S, C = EventType.STARTED, EventType.CLAIMED
    await jobs.daemon("q", a, (C, 1), (S, 1), worker=worker.id)
    await jobs.daemon("q", b, (C, 1), (S, 1), worker=worker.id)
    await jobs.daemon("q", c, (C, 1), (S, 1), worker="w-row-gone")
    registry = jobs.plane.parts.workers
    asked: list[Any] = []

    async def counting_ask(msg: Any, timeout_s: float | None = None) -> Any:
        asked.append(type(msg).__name__)
        return await ask(msg, timeout_s)

    ask = registry.ask
    monkeypatch.setattr(registry, "ask", counting_ask)
    status, body = await jobs.api.get(J)
    assert status == 200 and asked.count("ListWorkers") == 1
    named = {j["id"]: (j["worker"], j["worker_name"]) for j in body["jobs"]}
    assert named == {
        a: (worker.id, "trainer-7"),
        b: (worker.id, "trainer-7"),
        c: ("w-row-gone", None),
        pending: (None, None),
    }
    status, body = await jobs.api.get(f"{J}/{a}")
    assert status == 200 and (body["worker"], body["worker_name"]) == (worker.id, "trainer-7")


async def test_the_result_of_a_running_job_names_its_worker(jobs: Jobs, register) -> None:
    worker = await register("trainer-7", queues=["q"])
    [inv] = await jobs.submit("q")
    await jobs.daemon("q", inv, (EventType.CLAIMED, 1), (EventType.STARTED, 1), worker=worker.id)
    status, body = await jobs.api.get(f"{J}/{inv}/result")
    assert (status, body["state"]) == (202, "running")
    assert (body["worker"], body["worker_name"]) == (worker.id, "trainer-7")
