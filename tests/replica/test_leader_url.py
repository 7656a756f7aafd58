"""A standby names the leader's URL without waiting on a NATS that does not answer."""

from __future__ import annotations

import os
import signal

import natsauth
from polling import eventually

from lakeshore.bus.lease import Lease, ensure_bucket
from lakeshore.replica import identity
from lakeshore.replica.identity import LeaderUrl

LEASE_TIMEOUT_S = 5.0


async def test_the_leaders_url_is_named_at_once_while_the_lease_cannot_be_read(
    nats_server_factory, monkeypatch
) -> None:
    server = await nats_server_factory()
    nc = await natsauth.plane_nats(server.url)
    known = LeaderUrl()
    try:
        js = nc.jetstream(timeout=LEASE_TIMEOUT_S)
        await ensure_bucket(js)
        leader = Lease(js, "a", "http://a.test:8000", ttl_s=30)
        assert await leader.acquire() is not None
        known.lease = Lease(js, "b", "http://b.test:8000", ttl_s=30)
        assert await known.get() == "http://a.test:8000"
        # Every call reads again; a paused server answers no read (as while JetStream
        # elects the lease stream's leader): the URL last read is named meanwhile.
        monkeypatch.setattr(identity, "LEADER_URL_CACHE_S", 0.0)
        os.kill(server.pid, signal.SIGSTOP)
        try:
            # The signal lands when the kernel next schedules it: until then it answers.
            await eventually(
                lambda: _state(server.pid), until=lambda st: st == "T", timeout_s=10,
                what="the NATS server stopped",
            )  # fmt: skip
            assert await known.get() == "http://a.test:8000"
            reading = known._reading
            assert reading is not None and not reading.done()  # answered before the read
        finally:
            os.kill(server.pid, signal.SIGCONT)
        await leader.resign()
        await eventually(known.get, until=lambda url: url is None, timeout_s=10, what="no leader")
    finally:
        await known.close()
        await nc.close()
    assert known._reading is None


def _state(pid: int) -> str:
    """The process's state letter in ``/proc`` (``T``: stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]
