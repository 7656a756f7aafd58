"""Submitting invocations: ids, admission states, on_full policies, idempotency."""

from __future__ import annotations

import asyncio
import uuid

import msgspec
import pytest
from nats.js.errors import NoStreamResponseError
from polling import eventually

from lakeshore.model import Invocation

Q = "/v1/namespaces/default/queues"


def inv(**extra):
    return {"fn": "builtins:len", "args": [[1, 2, 3]], **extra}


async def _stored(js, stream: str) -> list[tuple[str, Invocation]]:
    si = await js.stream_info(stream, subjects_filter=">")
    out = []
    seq = si.state.first_seq
    while seq and seq <= si.state.last_seq:
        try:
            msg = await js.get_msg(stream, seq)
        except Exception:
            seq += 1
            continue
        out.append((msg.subject, msgspec.json.decode(msg.data, type=Invocation)))
        seq += 1
    return out


async def test_submit_one_answers_202_with_a_time_ordered_id(api, js):
    await api.post(Q, {"name": "q"})
    status, body = await api.post(Q + "/q/invocations", inv())
    assert status == 202, body
    [inv_id] = body["ids"]
    assert uuid.UUID(inv_id).version == 7
    [(subject, stored)] = await _stored(js, "LS_default_q")
    assert subject == "ls.default.q.q.p0"
    assert (stored.id, stored.fn, stored.args) == (inv_id, "builtins:len", [[1, 2, 3]])
    assert stored.stop_grace_s == 10


async def test_submit_to_a_fixed_queue_without_members_warns(api, register):
    await api.post(Q, {"name": "q"})
    status, body = await api.post(Q + "/q/invocations", inv())
    assert status == 202
    assert len(body["warnings"]) == 1 and body["warnings"][0].startswith("no_members")
    await register("w", queues=["q"])
    status, body = await api.post(Q + "/q/invocations", inv())
    assert status == 202 and body["warnings"] == []


async def test_a_batch_keeps_its_order(api, js):
    await api.post(Q, {"name": "q"})
    status, body = await api.post(
        Q + "/q/invocations", {"invocations": [inv(args=[[i]]) for i in range(200)]}
    )
    assert status == 202 and len(body["ids"]) == 200
    assert body["ids"] == sorted(body["ids"])
    stored = await _stored(js, "LS_default_q")
    assert [s.id for _, s in stored] == body["ids"]


async def test_priority_selects_the_level_subject(api, js):
    await api.post(Q, {"name": "p", "kind": "priority"})
    await api.post(Q + "/p/invocations", {"invocations": [inv(priority=7), inv()]})
    subjects = [s for s, _ in await _stored(js, "LS_default_p")]
    assert subjects == ["ls.default.q.p.p7", "ls.default.q.p.p0"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"args": []}, "exactly one of fn"),
        ({"fn": "m:f", "command": ["true"]}, "exactly one of fn"),
        ({"fn": "not a function"}, "module:function"),
        ({"command": []}, "non-empty argv"),
        ({"fn": "m:f", "priority": 3}, "fifo"),
        ({"fn": "m:f", "priority": 10}, "$.priority"),
        ({"fn": "m:f", "max_attempts": 0}, "$.max_attempts"),
        ({"fn": "m:f", "colour": "red"}, "colour"),
        ({"invocations": []}, "$.invocations"),
        ({"invocations": [{"fn": "m:f"}, {"fn": "m:f", "timeout_s": -1}]}, "$.invocations[1]"),
        (
            {"fn": "m:f", "stop_grace_s": 5000},
            "the invocation: stop_grace_s must be between 0 and 3600 seconds (got 5000)",
        ),
        (
            {"invocations": [{"fn": "m:f"}, {"command": ["true"], "stop_grace_s": -1}]},
            "invocation 1: stop_grace_s must be between 0 and 3600 seconds (got -1)",
        ),
        ([1, 2], "Expected `object`"),
    ],
)
async def test_bad_submits_are_clear_400s_and_admit_nothing(api, js, body, needle):
    await api.post(Q, {"name": "q"})
    status, answer = await api.post(Q + "/q/invocations", body)
    assert status == 400, answer
    assert needle in answer["error"]["message"]
    assert (await js.stream_info("LS_default_q")).state.messages == 0


async def test_draining_archived_and_unknown_queues_refuse(api, js):
    await api.post(Q, {"name": "q"})
    await api.post(Q + "/q/invocations", inv())
    await api.post(Q + "/q/drain")
    status, body = await api.post(Q + "/q/invocations", inv())
    assert status == 409 and body["error"]["code"] == "wrong_state"
    # Nor on any other path: the queue's stream takes no publish, from anyone.
    with pytest.raises(NoStreamResponseError):
        await js.publish("ls.default.q.q.p0", b"raw")
    await api.post(Q + "/q/archive")
    status, body = await api.post(Q + "/q/invocations", inv())
    assert status == 409
    with pytest.raises(NoStreamResponseError):
        await js.publish("ls.default.q.q.p0", b"raw")
    status, body = await api.post(Q + "/nope/invocations", inv())
    assert status == 404 and body["error"]["code"] == "queue_not_found"
    assert (await js.stream_info("LS_default_q")).state.messages == 1  # what it held stays
    await api.post(Q + "/q/unarchive")
    assert (await api.post(Q + "/q/invocations", inv()))[0] == 202
    assert (await js.stream_info("LS_default_q")).state.messages == 2


async def test_an_idempotent_resubmit_is_one_invocation(api, js):
    await api.post(Q, {"name": "q"})
    first = (await api.post(Q + "/q/invocations", inv(idempotency_key="run-42")))[1]
    again = (await api.post(Q + "/q/invocations", inv(idempotency_key="run-42")))[1]
    assert again["ids"] == first["ids"] and again["duplicates"] == first["ids"]
    assert first["duplicates"] == []
    assert (await js.stream_info("LS_default_q")).state.messages == 1


async def test_on_full_reject_answers_429(api, js):
    await api.post(Q, {"name": "q", "max_depth": 3, "on_full": "reject"})
    status, body = await api.post(Q + "/q/invocations", {"invocations": [inv()] * 5})
    assert status == 429 and body["error"]["code"] == "queue_full"
    assert "first 3 of 5 were admitted" in body["error"]["message"]
    status, body = await api.post(Q + "/q/invocations", inv())
    assert status == 429
    assert (await js.stream_info("LS_default_q")).state.messages == 3


async def test_on_full_drop_oldest_evicts_the_oldest_pending(api, js):
    await api.post(Q, {"name": "q", "max_depth": 2, "on_full": "drop_oldest"})
    ids = []
    for i in range(4):
        status, body = await api.post(Q + "/q/invocations", inv(args=[[i]]))
        assert status == 202
        ids += body["ids"]
    assert [s.id for _, s in await _stored(js, "LS_default_q")] == ids[2:]


async def test_on_full_drop_oldest_never_drops_running_work(api, js):
    await api.post(Q, {"name": "q", "max_depth": 1, "on_full": "drop_oldest"})
    await api.post(Q + "/q/invocations", inv())
    sub = await js.pull_subscribe_bind("p0", stream="LS_default_q")
    [running] = await sub.fetch(1, timeout=5)
    status, body = await api.post(Q + "/q/invocations", inv())
    assert status == 429 and "running" in body["error"]["message"]
    await running.ack_sync()


async def test_on_full_block_waits_for_room(api, js):
    await api.post(Q, {"name": "q", "max_depth": 1, "on_full": "block"})
    await api.post(Q + "/q/invocations", inv())
    status, body = await api.request("POST", Q + "/q/invocations?wait_s=0.2", json=inv())
    assert status == 429
    blocked = asyncio.create_task(api.request("POST", Q + "/q/invocations?wait_s=30", json=inv()))
    sub = await js.pull_subscribe_bind("p0", stream="LS_default_q")
    [first] = await sub.fetch(1, timeout=5)
    assert not blocked.done()
    await first.ack_sync()
    async with asyncio.timeout(20):
        status, body = await blocked
    assert status == 202
    status, body = await api.request("POST", Q + "/q/invocations?wait_s=-1", json=inv())
    assert status == 400


async def _waiting_submits(api, queue: str, n: int) -> None:
    """Return once ``n`` submits wait for room in ``queue`` (each poll is a request the
    queue answers while they wait)."""

    async def waiting() -> int:
        return (await api.get(f"{Q}/{queue}/stats"))[1]["waiting_submits"]

    await eventually(waiting, timeout_s=20, every_s=0.02, until=lambda w: w == n)


async def test_a_waiting_submit_does_not_stall_its_queue(api, js):
    await api.post(Q, {"name": "q", "max_depth": 1, "on_full": "block"})
    await api.post(Q + "/q/invocations", inv())
    blocked = asyncio.create_task(api.request("POST", Q + "/q/invocations?wait_s=60", json=inv()))
    await _waiting_submits(api, "q", 1)
    status, row = await api.get(Q + "/q")
    assert (status, row["max_depth"]) == (200, 1)
    assert not blocked.done()
    status, row = await api.patch(Q + "/q", {"max_depth": 2})
    assert (status, row["max_depth"]) == (200, 2)
    async with asyncio.timeout(20):
        status, body = await blocked
    assert status == 202, body
    assert [s.id for _, s in await _stored(js, "LS_default_q")][1:] == body["ids"]
    assert (await api.get(Q + "/q/stats"))[1]["waiting_submits"] == 0


async def test_waiting_submits_are_admitted_in_arrival_order(api, js):
    await api.post(Q, {"name": "q", "max_depth": 1, "on_full": "block"})
    await api.post(Q + "/q/invocations", inv())
    first = asyncio.create_task(
        api.request("POST", Q + "/q/invocations?wait_s=60", json=inv(args=[[1]]))
    )
    await _waiting_submits(api, "q", 1)
    second = asyncio.create_task(
        api.request("POST", Q + "/q/invocations?wait_s=60", json=inv(args=[[2]]))
    )
    await _waiting_submits(api, "q", 2)
    await api.patch(Q + "/q", {"max_depth": 3})
    async with asyncio.timeout(20):
        (s1, b1), (s2, b2) = await asyncio.gather(first, second)
    assert (s1, s2) == (202, 202)
    assert [s.id for _, s in await _stored(js, "LS_default_q")][1:] == b1["ids"] + b2["ids"]


async def test_a_waiting_submit_is_refused_when_its_wait_runs_out_or_the_queue_drains(api):
    await api.post(Q, {"name": "q", "max_depth": 1, "on_full": "block"})
    await api.post(Q + "/q/invocations", inv())
    short = asyncio.create_task(api.request("POST", Q + "/q/invocations?wait_s=0.5", json=inv()))
    async with asyncio.timeout(20):
        status, body = await short
    assert status == 429 and "max_depth 1 reached" in body["error"]["message"]
    long = asyncio.create_task(api.request("POST", Q + "/q/invocations?wait_s=60", json=inv()))
    await _waiting_submits(api, "q", 1)
    assert (await api.post(Q + "/q/drain"))[0] == 200
    async with asyncio.timeout(20):
        status, body = await long
    assert status == 409 and "draining" in body["error"]["message"]


async def test_an_idempotency_key_outlives_a_restart(plane_factory, js):
    first = await plane_factory()
    async with first.client() as api:
        await api.post(Q, {"name": "q"})
        status, body = await api.post(Q + "/q/invocations", inv(idempotency_key="nightly-7"))
        assert status == 202
    await first.stop()
    second = await plane_factory(data_dir=first.data_dir)
    async with second.client(token=first.admin_secret) as api:
        status, again = await api.post(Q + "/q/invocations", inv(idempotency_key="nightly-7"))
        assert status == 202
        assert again["ids"] == body["ids"] and again["duplicates"] == body["ids"]
        status, job = await api.get(f"/v1/namespaces/default/jobs/{body['ids'][0]}")
        assert (status, job["state"]) == (200, "pending")
    assert (await js.stream_info("LS_default_q")).state.messages == 1


async def test_an_idempotency_key_with_another_body_is_a_conflict(api, js):
    await api.post(Q, {"name": "q"})
    await api.post(Q + "/q/invocations", inv(idempotency_key="k"))
    status, body = await api.post(Q + "/q/invocations", inv(idempotency_key="k", args=[[9]]))
    assert (status, body["error"]["code"]) == (409, "conflict")
    assert "idempotency key 'k'" in body["error"]["message"]
    both = {
        "invocations": [inv(idempotency_key="j"), inv(idempotency_key="j", priority=0, args=[])]
    }
    status, body = await api.post(Q + "/q/invocations", both)
    assert status == 409
    assert (await js.stream_info("LS_default_q")).state.messages == 1


async def test_concurrent_submits_with_one_key_make_one_invocation(api, js):
    await api.post(Q, {"name": "q"})
    answers = await asyncio.gather(
        *(api.post(Q + "/q/invocations", inv(idempotency_key="once")) for _ in range(50))
    )
    assert {status for status, _ in answers} == {202}
    assert len({tuple(body["ids"]) for _, body in answers}) == 1
    assert sum(not body["duplicates"] for _, body in answers) == 1
    assert (await js.stream_info("LS_default_q")).state.messages == 1
