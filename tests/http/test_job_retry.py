"""``POST …/jobs/:id/retry`` and the batch a job was submitted in, against a real control
plane (the daemon's part played by publishing its lifecycle events, as in test_jobs)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest_asyncio
from test_jobs import NS, J, Jobs, Q

from lakeshore.model import EventType, Invocation

F, S, C = EventType.FAILED, EventType.STARTED, EventType.CLAIMED


@pytest_asyncio.fixture
async def jobs(control_plane, js) -> AsyncIterator[Jobs]:
    async with control_plane.client() as api:
        await api.post(Q, {"name": "q"})
        yield Jobs(api, control_plane.plane, js)


async def queued(jobs: Jobs, inv: str, queue: str = "q") -> Invocation:
    """The message of ``inv`` on the queue's stream."""
    stream = f"LS_{NS}_{queue}"
    info = await jobs.js.stream_info(stream)
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = msgspec.json.decode((await jobs.js.get_msg(stream, seq)).data, type=Invocation)
        if msg.id == inv:
            return msg
    raise AssertionError(f"{inv} is not on {stream}")


async def failed(jobs: Jobs, **spec) -> str:
    [inv] = await jobs.submit("q", **spec)
    await jobs.daemon(
        "q", inv, (C, 1), (S, 1), (F, 1), detail={"error": {"type": "E", "message": "m"}}
    )
    return inv


async def test_a_retry_submits_the_same_body_again_linked_both_ways(jobs: Jobs) -> None:
    old = await failed(jobs, kwargs={"k": [1, 2]}, timeout_s=9.0, max_attempts=2, stop_grace_s=0)
    status, body = await jobs.api.post(f"{J}/{old}/retry")
    assert status == 202, body
    new = body["id"]
    assert (body["retry_of"], body["queue"], body["state"]) == (old, "q", "pending")
    await jobs.caught_up()
    again = await queued(jobs, new)
    assert (again.fn, again.args, again.kwargs) == ("builtins:len", [[0]], {"k": [1, 2]})
    assert (again.timeout_s, again.max_attempts, again.priority) == (9.0, 2, 0)
    assert again.stop_grace_s == 0
    shown_new = (await jobs.api.get(f"{J}/{new}"))[1]
    shown_old = (await jobs.api.get(f"{J}/{old}"))[1]
    assert (shown_new["retry_of"], shown_new["retried_by"]) == (old, [])
    assert (shown_old["retry_of"], shown_old["retried_by"]) == (None, [new])
    newer = (await jobs.api.post(f"{J}/{old}/retry"))[1]["id"]
    await jobs.caught_up()
    assert (await jobs.api.get(f"{J}/{old}"))[1]["retried_by"] == [new, newer]


async def test_a_retry_keeps_the_priority_on_a_priority_queue(jobs: Jobs) -> None:
    await jobs.api.post(Q, {"name": "p", "kind": "priority"})
    [inv] = await jobs.submit("p", priority=7)
    await jobs.daemon("p", inv, (EventType.CANCELLED, None))
    status, body = await jobs.api.post(f"{J}/{inv}/retry")
    assert status == 202, body
    await jobs.caught_up()
    assert (await queued(jobs, body["id"], "p")).priority == 7


async def test_only_a_failed_cancelled_or_dropped_job_is_retried(jobs: Jobs) -> None:
    [pending, done] = await jobs.submit("q", 2)
    await jobs.daemon("q", done, (C, 1), (S, 1), (EventType.SUCCEEDED, 1))
    before = (await jobs.js.stream_info(f"LS_{NS}_q")).state.messages
    for inv, state in ((pending, "pending"), (done, "succeeded")):
        status, body = await jobs.api.post(f"{J}/{inv}/retry")
        assert status == 409, body
        message = body["error"]["message"]
        assert f"job {inv!r} is {state}" in message and "failed, cancelled" in message
    assert (await jobs.js.stream_info(f"LS_{NS}_q")).state.messages == before
    status, body = await jobs.api.post(f"{J}/nope/retry")
    assert status == 404 and "nope" in body["error"]["message"]


async def test_a_command_with_env_is_retried_only_with_its_values_given_again(
    jobs: Jobs,
) -> None:
    body = {"command": ["sh", "-c", "echo $TOKEN"], "env": {"TOKEN": "s3cret"}}
    [inv] = (await jobs.api.post(f"{Q}/q/invocations", body))[1]["ids"]
    await jobs.caught_up()
    await jobs.api.post(f"{J}/{inv}/cancel")
    status, answer = await jobs.api.post(f"{J}/{inv}/retry")
    assert status == 400 and "TOKEN" in answer["error"]["message"], answer
    assert "s3cret" not in str(answer)
    status, answer = await jobs.api.post(f"{J}/{inv}/retry", {"env": {"OTHER": "x"}})
    assert status == 400 and "TOKEN" in answer["error"]["message"], answer
    status, answer = await jobs.api.post(f"{J}/{inv}/retry", {"env": {"TOKEN": "n3w"}})
    assert status == 202, answer
    await jobs.caught_up()
    again = await queued(jobs, answer["id"])
    assert (again.command, again.env) == (["sh", "-c", "echo $TOKEN"], {"TOKEN": "n3w"})
    status, answer = await jobs.api.post(f"{J}/{inv}/retry", {"env": {"TOKEN": 3}})
    assert status == 400 and "$.env" in answer["error"]["message"], answer


async def test_a_producer_cannot_claim_a_retry_link(jobs: Jobs) -> None:
    old = await failed(jobs)
    body = {"fn": "m:f", "retry_of": old}
    status, answer = await jobs.api.post(f"{Q}/q/invocations", body)
    assert status == 400 and "retry_of" in answer["error"]["message"], answer
    await jobs.caught_up()
    assert (await jobs.api.get(f"{J}/{old}"))[1]["retried_by"] == []


async def test_jobs_of_one_submit_carry_its_batch_and_the_list_tallies_it(jobs: Jobs) -> None:
    batch = await jobs.submit("q", 3)
    [alone] = await jobs.submit("q")
    await jobs.daemon("q", batch[0], (C, 1), (S, 1), (EventType.SUCCEEDED, 1))
    await jobs.daemon("q", batch[1], (C, 1), (S, 1), (F, 1))
    status, body = await jobs.api.get(J + "?limit=2")
    assert status == 200
    assert {j["id"]: j["batch"] for j in body["jobs"]} == {alone: None, batch[2]: batch[0]}
    assert body["batches"] == [
        {"id": batch[0], "size": 3, "states": {"failed": 1, "pending": 1, "succeeded": 1}}
    ]
    assert (await jobs.api.get(f"{J}/{batch[1]}"))[1]["batch"] == batch[0]
