"""The fenced writer on a real JetStream stream: a deposed leader's writes are refused."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from lakeshore.bus import subjects
from lakeshore.bus.fenced import FencedLog
from lakeshore.bus.lease import Lease, ensure_bucket
from lakeshore.errors import NotLeader


@dataclass(frozen=True)
class Stream:
    name: str
    epoch_subject: str
    data_subject: str


@pytest.fixture
async def stream(js) -> AsyncIterator[Stream]:
    token = uuid.uuid4().hex[:8]
    made = Stream(f"LSF_{token}", f"lsf{token}.epoch", f"lsf{token}.state.q.x")
    await js.add_stream(name=made.name, subjects=[f"lsf{token}.>"])
    try:
        yield made
    finally:
        await js.delete_stream(made.name)


def log(js, stream: Stream) -> FencedLog:
    return FencedLog(js, stream.name, stream.epoch_subject)


async def test_a_deposed_leaders_append_is_refused_and_not_stored(js, stream) -> None:
    old, new = log(js, stream), log(js, stream)
    await old.begin(1)
    await old.append(stream.data_subject, b"old-1")
    fence = await new.begin(2)
    with pytest.raises(NotLeader):
        await old.append(stream.data_subject, b"old-2")
    assert old.fence is None
    with pytest.raises(NotLeader):
        await old.append(stream.data_subject, b"old-3")
    with pytest.raises(NotLeader):
        await old.begin(1)
    seq = await new.append(stream.data_subject, b"new-1")
    info = await js.stream_info(stream.name)
    assert info.state.last_seq == seq == fence + 1
    stored = [await js.get_msg(stream.name, s) for s in range(fence + 1, seq + 1)]
    assert [m.data for m in stored] == [b"new-1"]


async def test_an_append_before_begin_is_refused(js, stream) -> None:
    with pytest.raises(NotLeader):
        await log(js, stream).append(stream.data_subject, b"x")
    assert (await js.stream_info(stream.name)).state.messages == 0


async def test_begin_refuses_an_epoch_below_the_recorded_one(js, stream) -> None:
    await log(js, stream).begin(5)
    with pytest.raises(NotLeader):
        await log(js, stream).begin(4)
    assert (await js.stream_info(stream.name)).state.messages == 1


async def test_begin_asked_again_takes_its_own_record_and_fences_as_it(js, stream) -> None:
    # A takeover whose record landed but whose acknowledgement was lost asks again: the
    # record of its own epoch is taken as it is, nothing is written twice.
    first = await log(js, stream).begin(5)
    again = log(js, stream)
    assert await again.begin(5) == first
    assert (await js.stream_info(stream.name)).state.messages == 1
    await again.append(stream.data_subject, b"x")
    await log(js, stream).begin(6)
    with pytest.raises(NotLeader):
        await again.append(stream.data_subject, b"y")


async def test_lease_epochs_fence_a_leader_that_outlived_its_lease(js, stream) -> None:
    bucket = "LT_" + uuid.uuid4().hex[:8]
    await ensure_bucket(js, bucket)
    try:
        a = Lease(js, "a", "http://a.test", 5, bucket=bucket)
        b = Lease(js, "b", "http://b.test", 5, bucket=bucket)
        a_log, b_log = log(js, stream), log(js, stream)
        epoch_a = await a.acquire()
        assert epoch_a is not None
        await a_log.begin(epoch_a)
        a.forget()  # as if paused past its TTL, then resigned by nobody
        await js.purge_stream(subjects.lease_stream(bucket))
        epoch_b = await b.acquire()
        assert epoch_b is not None and epoch_b > epoch_a
        await b_log.begin(epoch_b)
        with pytest.raises(NotLeader):
            await a_log.append(stream.data_subject, b"late")
        await b_log.append(stream.data_subject, b"on time")
    finally:
        await js.delete_stream(subjects.lease_stream(bucket))
