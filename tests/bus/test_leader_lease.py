"""The leader lease on a real JetStream KV bucket, and the elector that holds it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import msgspec
import pytest
from polling import eventually

from lakeshore.bus import subjects
from lakeshore.bus.lease import Elector, Epoch, Holder, Lease, ensure_bucket
from lakeshore.errors import NotLeader

#: Every wait of these tests is bounded by this (seconds).
WAIT_S = 10.0


@pytest.fixture
async def bucket(js) -> AsyncIterator[str]:
    name = "LT_" + uuid.uuid4().hex[:8]
    await ensure_bucket(js, name)
    try:
        yield name
    finally:
        await js.delete_stream(subjects.lease_stream(name))


def lease(js, bucket: str, holder: str, ttl_s: int = 5) -> Lease:
    return Lease(js, holder, f"http://{holder}.test:8000", ttl_s, bucket=bucket)


async def test_one_holder_at_a_time(js, bucket) -> None:
    a, b = lease(js, bucket, "a"), lease(js, bucket, "b")
    epoch = await a.acquire()
    assert epoch is not None
    assert await b.acquire() is None
    assert await a.acquire() == epoch
    expected = Holder(holder_id="a", url="http://a.test:8000", epoch=epoch)
    assert await b.leader() == expected
    await a.renew()
    assert await b.acquire() is None
    assert await b.leader() == expected


async def test_a_candidate_takes_over_only_after_the_ttl_lapses(js, bucket) -> None:
    a, b = lease(js, bucket, "a", ttl_s=1), lease(js, bucket, "b", ttl_s=1)
    old = await a.acquire()
    taken_at = time.monotonic()
    assert old is not None
    assert await b.acquire() is None
    new = await eventually(b.acquire, timeout_s=WAIT_S, what="b taking the lapsed lease")
    assert time.monotonic() - taken_at >= 0.9
    assert new > old
    assert (await a.leader()) == Holder(holder_id="b", url="http://b.test:8000", epoch=new)
    with pytest.raises(NotLeader):
        await a.renew()
    assert a.epoch is None


async def test_epochs_strictly_increase_over_20_hand_overs(js, bucket) -> None:
    holders = [lease(js, bucket, name) for name in ("a", "b", "c")]
    epochs: list[Epoch] = []
    for turn in range(21):
        current = holders[turn % 3]
        epoch = await current.acquire()
        assert epoch is not None, f"turn {turn}"
        await current.renew()
        for other in holders:
            if other is not current:
                assert await other.acquire() is None, f"turn {turn}"
        epochs.append(epoch)
        await current.resign()
    assert all(earlier < later for earlier, later in zip(epochs, epochs[1:], strict=False))
    assert await holders[0].leader() is None


async def test_renewals_carry_a_ttl_so_an_abandoned_lease_lapses(js, bucket) -> None:
    a = lease(js, bucket, "a", ttl_s=1)
    await a.acquire()
    for _ in range(3):
        await a.renew()
        stored = await js.get_last_msg(
            subjects.lease_stream(bucket), subjects.lease_subject(bucket)
        )
        assert stored.headers is not None and stored.headers.get("Nats-TTL") == "1"
    # The trap: a renewal without a TTL (kv.update) would keep the lease for ever.
    assert await eventually(a.leader, until=lambda h: h is None, timeout_s=WAIT_S) is None


async def test_the_lease_bucket_has_no_limit_markers(js, bucket) -> None:
    config = (await js.stream_info(subjects.lease_stream(bucket))).config
    assert not config.subject_delete_marker_ttl
    assert config.allow_msg_ttl
    assert config.max_msgs_per_subject == 1
    assert not config.max_age


async def test_a_resigned_lease_is_free_at_once_and_a_stale_resign_deletes_nothing(
    js, bucket
) -> None:
    a, b = lease(js, bucket, "a", ttl_s=1), lease(js, bucket, "b")
    await a.acquire()
    await a.resign()
    assert await b.acquire() is not None
    await a.resign()
    assert (await b.leader()) is not None
    assert await a.acquire() is None


async def test_the_elector_is_deposed_when_a_renewal_is_refused(js, bucket) -> None:
    heard: asyncio.Queue[tuple[str, object]] = asyncio.Queue()

    async def elected(epoch: Epoch) -> None:
        await heard.put(("elected", epoch))

    async def deposed(reason: str) -> None:
        await heard.put(("deposed", reason))

    a = lease(js, bucket, "a", ttl_s=1)
    async with Elector(a, on_elected=elected, on_deposed=deposed):
        async with asyncio.timeout(WAIT_S):
            kind, epoch = await heard.get()
        assert kind == "elected" and epoch == a.epoch
        # Another writer overwrites the key without the lease's revision: the next renewal
        # expects the old one and is refused.
        thief = Holder(holder_id="thief", url="http://thief.test", epoch=0)
        await js.publish(subjects.lease_subject(bucket), msgspec.json.encode(thief))
        async with asyncio.timeout(WAIT_S):
            kind, reason = await heard.get()
        assert kind == "deposed" and "lost" in str(reason)
        assert a.epoch is None
    assert heard.empty()


async def test_a_standby_elector_takes_over_when_the_leader_closes(js, bucket) -> None:
    heard: asyncio.Queue[tuple[str, str, object]] = asyncio.Queue()

    def callbacks(name: str) -> dict:
        async def elected(epoch: Epoch) -> None:
            await heard.put((name, "elected", epoch))

        async def deposed(reason: str) -> None:
            await heard.put((name, "deposed", reason))

        return {"on_elected": elected, "on_deposed": deposed}

    first = Elector(lease(js, bucket, "a", ttl_s=5), **callbacks("a"))
    async with first:
        async with asyncio.timeout(WAIT_S):
            assert (await heard.get())[:2] == ("a", "elected")
        async with Elector(lease(js, bucket, "b", ttl_s=5), **callbacks("b")):
            await first.close()
            async with asyncio.timeout(WAIT_S):
                assert await heard.get() == ("a", "deposed", "elector closed")
                # Well inside the TTL of 5 s: the resignation freed the lease.
                assert (await heard.get())[:2] == ("b", "elected")


class _Stalled:
    """``time`` as the elector reads it, moved forward at will: the elector sees a stall of
    its loop (what a loaded machine or a long collection does) without the test stalling
    the loop that serves the lease's NATS traffic."""

    def __init__(self) -> None:
        self.by_s = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.by_s


async def test_a_leader_whose_loop_stalled_past_its_deadline_keeps_a_lease_nobody_took(
    js, bucket, monkeypatch
) -> None:
    stalled = _Stalled()
    monkeypatch.setattr("lakeshore.bus.lease.time", stalled)
    heard: asyncio.Queue[str] = asyncio.Queue()

    async def elected(epoch: Epoch) -> None:
        await heard.put("elected")

    async def deposed(reason: str) -> None:
        await heard.put(f"deposed: {reason}")

    a = lease(js, bucket, "a", ttl_s=3)
    async with Elector(a, on_elected=elected, on_deposed=deposed):
        async with asyncio.timeout(WAIT_S):
            assert await heard.get() == "elected"
        # The loop wakes 2.6 s after the last renewal: past the 2.5 s deadline, inside the
        # 3 s TTL. The lease never lapsed on the server, so the renewal (a compare-and-set
        # on its revision) succeeds, and the leader stays the leader.
        stalled.by_s = 2.6
        held = a.revision
        await eventually(
            lambda: asyncio.sleep(0, a.revision),
            until=lambda revision: revision is not None and revision > held,
            timeout_s=WAIT_S,
            what="a renewal after the stall",
        )
        assert heard.empty(), heard.get_nowait()
        assert a.epoch is not None
