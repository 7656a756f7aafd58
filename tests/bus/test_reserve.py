"""The store reserve on a real nats-server whose JetStream store is small (4 MB): the room
it keeps is given up when the store is full — the control plane's writes go on in it and
work is refused — and taken back once room returns. Any of the plane's writes that is
refused gives it up: the work and events it publishes, a state-log row, a lease renewal."""

from __future__ import annotations

import contextlib
from pathlib import Path

import nats
import nats.js.errors as jse
import pytest
from nats.js.api import StreamConfig
from polling import eventually

from lakeshore.bus import subjects
from lakeshore.bus.lease import Lease, ensure_bucket
from lakeshore.bus.reserve import StoreReserve
from lakeshore.bus.state import StateLog, ensure_state_stream
from lakeshore.errors import InsufficientStorage
from lakeshore.store.images import of_row

SIZE = 1024 * 1024


@pytest.fixture
async def js(tmp_path: Path, nats_server_factory):
    conf = tmp_path / "small.conf"
    conf.write_text("jetstream { max_file_store: 4MB }\n")
    server = await nats_server_factory(config_file=conf)
    nc = await nats.connect(server.url)
    try:
        yield nc.jetstream(timeout=5)
    finally:
        await nc.close()


async def _fill(js) -> None:
    """Another stream's writes until JetStream refuses one (the last one stored crossed)."""
    await js.add_stream(StreamConfig(name="FILLER", subjects=["filler.>"]))
    with pytest.raises(jse.ServiceUnavailableError):
        for _ in range(100):
            await js.publish("filler.x", b"\0" * 200_000)


async def _stored(js) -> int:
    try:
        return (await js.stream_info(subjects.RESERVE_STREAM)).state.bytes
    except jse.NotFoundError:
        return 0


async def test_arming_keeps_the_room_once(js) -> None:
    reserve = StoreReserve(js, size=SIZE)
    await reserve.arm()
    assert not reserve.out and await _stored(js) >= SIZE
    before = (await js.stream_info(subjects.RESERVE_STREAM)).state.last_seq
    await StoreReserve(js, size=SIZE).arm()  # a new leader's term: already there
    assert (await js.stream_info(subjects.RESERVE_STREAM)).state.last_seq == before


async def test_a_full_store_gives_the_room_to_the_plane_and_refuses_work_until_room_returns(
    js,
) -> None:
    reserve = StoreReserve(js, size=SIZE, retry_s=0.05)
    await reserve.arm()
    await _fill(js)
    with pytest.raises(jse.ServiceUnavailableError):  # everyone's writes are refused now
        await js.publish(subjects.reserve_subject("probe"), b"")
    reserve.give_up()
    assert reserve.out
    with pytest.raises(InsufficientStorage, match="insufficient resources"):
        reserve.check("admit work to default/q")
    # The filler is dropped: the plane's own writes are stored again.
    await eventually(lambda: _stored(js), until=lambda n: n < SIZE, timeout_s=5, what="purged")
    await js.add_stream(StreamConfig(name="EVENTS", subjects=["events.>"]))
    await eventually(  # retried: a try at putting the filler back fills it for a moment
        lambda: js.publish("events.x", b"an event"),
        retry_on=(jse.ServiceUnavailableError,), timeout_s=5, what="an event stored",
    )  # fmt: skip
    assert reserve.out  # the store is still over its limit without the room: work waits
    await js.delete_stream("FILLER")
    await eventually(
        lambda: reserve.out, until=lambda out: not out, timeout_s=5,
        what="the reserve taken back",
    )  # fmt: skip
    reserve.check("admit work to default/q")
    assert await _stored(js) >= SIZE
    await reserve.close()


async def test_a_store_full_at_start_leaves_the_reserve_out(js) -> None:
    await _fill(js)
    reserve = StoreReserve(js, size=SIZE, retry_s=0.05)
    await reserve.arm()
    assert reserve.out
    with contextlib.suppress(jse.NotFoundError):
        await js.delete_stream("FILLER")
    await eventually(
        lambda: reserve.out, until=lambda out: not out, timeout_s=5,
        what="the reserve put in once room came",
    )  # fmt: skip
    await reserve.close()


async def _room_back(js, reserve: StoreReserve) -> None:
    await js.delete_stream("FILLER")
    await eventually(
        lambda: reserve.out, until=lambda out: not out, timeout_s=5,
        what="the reserve taken back",
    )  # fmt: skip
    await reserve.close()


async def test_a_state_log_row_refused_for_room_gives_the_room_to_the_plane(js) -> None:
    reserve = StoreReserve(js, size=SIZE, retry_s=0.05)
    await reserve.arm()
    await ensure_state_stream(js)
    log = StateLog(js, on_full=reserve.give_up)
    await log.begin(1)
    row = of_row("ns", {"name": "team", "org": "acme", "created_at": None})
    await _fill(js)
    assert not reserve.out  # nothing of the plane's was refused yet
    with pytest.raises(InsufficientStorage, match="state log"):
        await log.publish([row])
    assert reserve.out
    with pytest.raises(InsufficientStorage):
        reserve.check("admit work to default/q")
    await eventually(  # the row goes into the room the filler left
        lambda: log.publish([row]), retry_on=(InsufficientStorage,), timeout_s=5,
        what="the row stored",
    )  # fmt: skip
    await _room_back(js, reserve)


async def test_a_lease_renewal_refused_for_room_gives_the_room_to_the_plane(js) -> None:
    reserve = StoreReserve(js, size=SIZE, retry_s=0.05)
    await reserve.arm()
    await ensure_bucket(js, "LT_FULL")
    lease = Lease(js, "a", "http://a.test:8000", 5, bucket="LT_FULL", on_full=reserve.give_up)
    assert await lease.acquire() is not None
    held = lease.revision
    await _fill(js)
    with pytest.raises(jse.ServiceUnavailableError):
        await lease.renew()
    assert reserve.out and lease.revision == held  # still held: a later renewal may land

    async def renewed() -> int | None:
        await lease.renew()
        return lease.revision

    revision = await eventually(  # the renewal goes into the room the filler left
        renewed, retry_on=(jse.ServiceUnavailableError,), timeout_s=5, what="the lease renewed"
    )
    assert revision is not None and held is not None and revision > held
    await _room_back(js, reserve)
