"""Row 18 of the fault matrix: ``rm --force`` of a queue with members, pending and running
invocations. Pending ones end ``cancelled`` with reason ``queue_deleted``; running ones
finish on their daemons (their outcome is recorded); the stream is gone at once."""

from __future__ import annotations

import pytest
from nats.js import errors as jse
from polling import eventually
from report import record

NS = "default"
Q = f"/v1/namespaces/{NS}/queues"
J = f"/v1/namespaces/{NS}/jobs"


async def test_rm_force_cancels_pending_work_and_scrubs_members(api, register, js):
    await api.post(Q, {"name": "doomed"})
    for i in range(3):
        await register(f"m-{i}", queues=["doomed"])
    status, body = await api.post(
        Q + "/doomed/invocations", {"invocations": [{"fn": "m:f", "args": [i]} for i in range(53)]}
    )
    assert status == 202
    ids = body["ids"]
    sub = await js.pull_subscribe_bind("p0", stream="LS_default_doomed")
    running = await sub.fetch(3, timeout=5)
    assert len(running) == 3

    status, body = await api.delete(Q + "/doomed?force=true")
    assert status == 200, body
    assert sorted(body["scrubbed"]) == ["m-0", "m-1", "m-2"]
    with pytest.raises(jse.NotFoundError):
        await js.stream_info("LS_default_doomed")

    async def states() -> dict[str, int]:
        out: dict[str, int] = {}
        for inv in ids:
            job = (await api.get(f"{J}/{inv}"))[1]
            out[job["state"]] = out.get(job["state"], 0) + 1
        return out

    final = await eventually(
        states, timeout_s=20, until=lambda s: s.get("cancelled") == 50, what="50 cancelled"
    )
    assert final == {"cancelled": 50, "pending": 3}  # the 3 claimed ones run on
    cancelled = (await api.get(f"{J}/{ids[-1]}"))[1]
    assert cancelled["error"]["message"] == "cancelled: queue_deleted"
    result = (await api.get(f"{J}/{ids[-1]}/result"))[1]
    assert (result["ok"], result["error"]["message"]) == (False, "cancelled: queue_deleted")
    events = (await api.get(Q + "/doomed/events?verbose=true"))[1]
    assert events["error"]["code"] == "queue_not_found"
    record(
        18, "rm-force-3-members-50-pending-3-running",
        tried="rm --force with 3 members, 50 pending, 3 claimed",
        passed=True, lost=final.get("pending", 0) - 3, note="3 claimed run on their daemons",
    )  # fmt: skip
