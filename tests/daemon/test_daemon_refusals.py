"""A daemon runs only what belongs to the stream it pulled it from."""

from __future__ import annotations

import pytest
from daemon_support import NS, WAIT_S, J, command

from lakeshore.bus import codec, subjects
from lakeshore.ids import new_id
from lakeshore.model import EventType, Invocation, now


@pytest.mark.parametrize(
    ("namespace", "queue"),
    [("other", "shared"), (NS, "elsewhere")],
    ids=["another-namespace", "another-queue"],
)
async def test_an_invocation_published_on_another_queues_stream_is_refused_and_never_run(
    bench, daemons, tmp_path, namespace, queue
):
    shared = await bench.queue("shared")
    ran = tmp_path / "ran"
    stray = Invocation(
        id=new_id(),
        namespace=namespace,
        queue=queue,
        command=["touch", str(ran)],
        submitted_at=now(),
    )
    # What a control plane tricked into it would do: its own connection, this stream.
    await bench.js.publish(subjects.level_subject(NS, shared, 0), codec.encode(stray))
    daemon = await daemons.start("careful", queues=[shared])

    [refused] = await bench.events.wait_count(EventType.FAILED, 1, shared)
    says = f"invocation of {namespace}/{queue} arrived on the stream of {NS}/{shared}: refused"
    assert (refused.invocation_id, refused.worker, refused.namespace) == (
        stray.id,
        daemon.id,
        NS,
    )
    assert refused.detail is not None and refused.detail["error"]["message"] == says
    await bench.drained(shared)
    info = await bench.js.consumer_info(
        subjects.queue_stream(NS, shared), subjects.level_consumer(0)
    )
    assert (info.num_pending, info.num_ack_pending, info.num_redelivered) == (0, 0, 0)
    await bench.job_state(stray.id, "failed")
    _, shown = await bench.api.get(f"{J}/{stray.id}")
    assert shown["error"]["message"] == says

    # The daemon goes on with its own queue's work; the stray one was never run.
    [own] = await bench.submit(shared, command("true"))
    assert await bench.events.wait_final(own) is EventType.SUCCEEDED
    await daemon.retire(WAIT_S)
    assert not ran.exists()
    assert bench.events.for_id(stray.id) == [EventType.FAILED]
