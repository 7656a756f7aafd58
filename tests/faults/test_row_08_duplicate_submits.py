"""Row 8 of the fault matrix: duplicate submits make exactly one invocation, the same id every
time: 50 at once with one key (over HTTP and the NATS fast path), a retry after a control-plane
restart, a retry after the stream's dedup window; the same key with another body is a 409.

``tests/http/test_submit.py`` has the basic cases; these add the second front door, a key
whose invocation has finished and ran (a retry must not run it again), and a JetStream that
no longer remembers the key's message id (keys are durable in DuckDB, not in the window).
"""

from __future__ import annotations

import asyncio

import msgspec
from natsauth import ask, plane_nats
from polling import eventually
from report import record
from tally import NS, all_finished, job, runs

from lakeshore.bus import subjects
from lakeshore.security import grants

Q = f"{NS}/queues"
STREAM = "LS_default_work"


def _inv(i: int, key: str, **extra) -> dict:
    return {"fn": "fault_targets:work", "args": [i, 0], "idempotency_key": key, **extra}


async def _fast_submit(nc, token: str, body: dict) -> dict:
    subject = "ls.default.submit.work"
    inbox = subjects.producer_inboxes(grants.inbox_tag(token))
    data = msgspec.json.encode({"token": token, "invocations": [body]})
    reply = await ask(nc, subject, data, inbox=inbox, timeout=10)
    return msgspec.json.decode(reply.data)


async def _depth(js) -> int:
    return (await js.stream_info(STREAM)).state.messages


async def test_fifty_concurrent_submits_of_one_key_on_both_front_doors_make_one_run(
    plane_factory, daemons_for, js
):
    handle = await plane_factory()
    nc = await plane_nats(handle.plane.nats_url)
    try:
        async with asyncio.timeout(60), handle.client() as api:
            await api.post(Q, {"name": "work"})
            body = _inv(1, "once")
            http = [api.post(Q + "/work/invocations", body) for _ in range(25)]
            fast = [_fast_submit(nc, handle.admin_secret, body) for _ in range(25)]
            answers = await asyncio.gather(*http, *fast)
            statuses = [s for s, _ in answers[:25]]
            bodies = [b for _, b in answers[:25]] + list(answers[25:])
            assert statuses == [202] * 25, answers[:25]
            assert all("ids" in b for b in bodies), bodies
            assert len({tuple(b["ids"]) for b in bodies}) == 1
            assert sum(not b["duplicates"] for b in bodies) == 1
            [inv_id] = bodies[0]["ids"]
            assert await _depth(js) == 1
            daemons = daemons_for(handle.plane.nats_url)
            await daemons.start("d0", "work")
            await all_finished(api, "work", 1, timeout_s=30)
            assert runs(daemons.runs) == [(1, daemons.procs["d0"].pid)]
            assert (await job(api, inv_id))["state"] == "succeeded"
    finally:
        await nc.close()
    record(
        8,
        "50-concurrent",
        tried="50 concurrent submits of one key, 25 over HTTP and 25 over the NATS fast path",
        passed=True,
        note="1 invocation, 1 id in all 50 answers, 49 reported as duplicates, ran once",
    )


async def test_a_retry_after_a_restart_answers_the_finished_invocation_without_running_it(
    plane_factory, daemons_for, js
):
    first = await plane_factory()
    daemons = daemons_for(first.plane.nats_url)
    async with asyncio.timeout(60):
        async with first.client() as api:
            await api.post(Q, {"name": "work"})
            await daemons.start("d0", "work")
            status, answer = await api.post(Q + "/work/invocations", _inv(7, "nightly"))
            assert status == 202
            [inv_id] = answer["ids"]
            await all_finished(api, "work", 1, timeout_s=30)
        await first.stop()
        second = await plane_factory(data_dir=first.data_dir)
        async with second.client(token=first.admin_secret) as api:
            status, again = await api.post(Q + "/work/invocations", _inv(7, "nightly"))
            assert status == 202, again
            assert again["ids"] == [inv_id] and again["duplicates"] == [inv_id]
            # Nothing published again: nothing can run again.
            assert await _depth(js) == 0
            assert (await job(api, inv_id))["state"] == "succeeded"
            status, other = await api.post(Q + "/work/invocations", _inv(8, "nightly"))
            assert (status, other["error"]["code"]) == (409, "conflict")
            assert "idempotency key 'nightly'" in other["error"]["message"]
            assert await _depth(js) == 0
        assert runs(daemons.runs) == [(7, daemons.procs["d0"].pid)]
    record(
        8,
        "retry-after-restart",
        tried="a keyed invocation ran and finished; the control plane restarted; the same "
        "submit again, then the same key with another body",
        passed=True,
        note="same id, reported duplicate, nothing published, ran once; "
        "another body → 409 conflict",
    )


async def test_a_retry_after_the_dedup_window_is_answered_from_the_durable_keys(
    plane_factory, daemons_for, js
):
    handle = await plane_factory()
    daemons = daemons_for(handle.plane.nats_url)
    async with asyncio.timeout(60), handle.client() as api:
        await api.post(Q, {"name": "work"})
        await api.post(Q, {"name": "idle"})  # no daemon: its invocation stays pending
        for stream in (STREAM, "LS_default_idle"):
            # Shrunk before the first message: JetStream schedules the purge of message ids
            # by the window in force when it stores one (a 600 s timer would outlive the test).
            si = await js.stream_info(stream)
            await js.update_stream(si.config.evolve(duplicate_window=0.5))
        await daemons.start("d0", "work")
        status, done = await api.post(Q + "/work/invocations", _inv(3, "finished"))
        assert status == 202
        status, waiting = await api.post(Q + "/idle/invocations", _inv(4, "pending"))
        assert status == 202
        await all_finished(api, "work", 1, timeout_s=30)
        await eventually(
            lambda: job(api, waiting["ids"][0]),
            until=lambda j: j["state"] == "pending",
            timeout_s=10,
            what="the idle queue's invocation recorded",
        )
        for stream in (STREAM, "LS_default_idle"):
            await _forget_message_ids(js, stream)
        status, again = await api.post(Q + "/work/invocations", _inv(3, "finished"))
        assert (status, again["ids"], again["duplicates"]) == (202, done["ids"], done["ids"])
        status, again_idle = await api.post(Q + "/idle/invocations", _inv(4, "pending"))
        assert (status, again_idle["ids"]) == (202, waiting["ids"])
        assert again_idle["duplicates"] == waiting["ids"]
        assert await _work_messages(js, STREAM) == 0  # the finished one was not published again
        assert await _work_messages(js, "LS_default_idle") == 1  # still just the first one
        assert runs(daemons.runs) == [(3, daemons.procs["d0"].pid)]
    record(
        8,
        "retry-after-dedup-window",
        tried="keys of a finished and of a pending invocation retried after JetStream's "
        "duplicate window had forgotten their message ids (window shrunk to 0.5 s)",
        passed=True,
        note="same ids, reported duplicates, nothing published again, ran once",
    )


async def _forget_message_ids(js, stream: str) -> None:
    """Shrink the stream's duplicate window and wait until JetStream forgets message ids: a
    probe published twice is then stored twice (ids are forgotten oldest first, so the key's
    earlier message id is forgotten too)."""
    probe = f"ls.default.q.{stream.removeprefix('LS_default_')}.probe"

    async def stored_again() -> bool:
        si = await js.stream_info(stream)
        if si.config.duplicate_window != 0.5:  # (again, if the queue re-ensured its stream)
            await js.update_stream(si.config.evolve(duplicate_window=0.5))
            await js.publish(probe, b"", headers={"Nats-Msg-Id": "probe"})
        ack = await js.publish(probe, b"", headers={"Nats-Msg-Id": "probe"})
        return not ack.duplicate

    await eventually(stored_again, timeout_s=20, every_s=0.2, what=f"{stream} forgetting ids")
    await js.purge_stream(stream, subject=probe)


async def _work_messages(js, stream: str) -> int:
    si = await js.stream_info(stream, subjects_filter=">")
    return sum(n for subject, n in (si.state.subjects or {}).items() if subject.endswith(".p0"))
