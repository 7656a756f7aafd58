"""Fixtures of the bus contract tests: every test runs once per implementation of the port.

ns          a fresh namespace per test, so nothing a test makes can be seen by another
bus         parametrised: "nats" (NatsBus on the session nats-server) | "memory" (InMemoryBus)
feed        that bus's events feed, on a fresh ``LS_EVENTS`` stream
claim       a daemon's pull: ``await claim(bus, ns, queue, level, n) -> list[Claimed]``
put_result  a daemon's write to ``LS_RESULTS``: ``await put_result(bus, ns, id, epoch, r)``
listen      core-NATS messages the bus sends in ``ns``: ``await listen(bus, ns)``
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import natsauth
import pytest
from nats.js import errors as jse

from lakeshore.bus import codec, subjects
from lakeshore.bus.connection import NatsLogin
from lakeshore.bus.events import EventFeed
from lakeshore.bus.memory import InMemoryBus
from lakeshore.bus.nats import NatsBus
from lakeshore.bus.port import Bus, Feed
from lakeshore.model import Result

#: Every wait of these tests is bounded by this (seconds).
WAIT_S = 10.0


@dataclass(frozen=True)
class Claimed:
    """One invocation a test claimed as a daemon would; ``await ack()`` to finish it."""

    seq: int
    payload: bytes
    ack: Callable[[], Awaitable[None]]


@pytest.fixture
def ns() -> str:
    return "t" + uuid.uuid4().hex[:8]


@pytest.fixture(params=["nats", "memory"])
async def bus(request: pytest.FixtureRequest, ns: str) -> AsyncIterator[Bus]:
    if request.param == "memory":
        memory = InMemoryBus()
        yield memory
        await memory.close()
        return
    # Only the nats runs need the session server; `-k memory` never starts one.
    url = request.getfixturevalue("nats_server").url
    login = NatsLogin(nkey_seed=natsauth.secrets().plane_seed)
    real = await NatsBus.connect(url, login)
    try:
        yield real
    finally:
        await real.close()
        # Its own connection: the test may have closed the bus.
        nc = await natsauth.plane_nats(url)
        try:
            js = nc.jetstream()
            for info in await js.streams_info():
                if info.config.name.startswith(subjects.queue_stream(ns, "")):
                    await js.delete_stream(info.config.name)
        finally:
            await nc.close()


@pytest.fixture
async def feed(bus: Bus) -> AsyncIterator[Feed]:
    if isinstance(bus, InMemoryBus):
        yield bus.feed()
        return
    assert isinstance(bus, NatsBus)
    js = bus.nc.jetstream()
    await _delete_events_stream(js)
    real = EventFeed(bus.nc)
    await real.ensure()
    try:
        yield real
    finally:
        await real.close()
        if bus.connected:
            await _delete_events_stream(js)


@pytest.fixture
def claim() -> Callable[..., Awaitable[list[Claimed]]]:
    async def claim(bus: Bus, ns: str, queue: str, level: int, n: int) -> list[Claimed]:
        if isinstance(bus, InMemoryBus):
            return [
                Claimed(seq, payload, _memory_ack(bus, ns, queue, seq))
                for seq, payload in bus.claim(ns, queue, level, n)
            ]
        assert isinstance(bus, NatsBus)
        sub = await bus.nc.jetstream().pull_subscribe_bind(
            subjects.level_consumer(level), stream=subjects.queue_stream(ns, queue)
        )
        try:
            msgs = await sub.fetch(n, timeout=WAIT_S)
        finally:
            await sub.unsubscribe()
        return [Claimed(m.metadata.sequence.stream, m.data, _nats_ack(m)) for m in msgs]

    return claim


@pytest.fixture
def put_result() -> Callable[..., Awaitable[None]]:
    async def put_result(bus: Bus, ns: str, inv: str, epoch: int, result: Result) -> None:
        if isinstance(bus, InMemoryBus):
            bus.put_result(ns, inv, epoch, result)
            return
        assert isinstance(bus, NatsBus)
        kv = await bus.nc.jetstream().key_value(subjects.RESULTS_BUCKET)
        await kv.put(subjects.result_key(ns, inv, epoch), codec.encode(result))

    return put_result


class Listener:
    """What a bus sent on core NATS in one namespace, as ``(subject, data)``."""

    def __init__(self, bus: Bus, ns: str, sub: Any = None) -> None:
        self._bus, self._ns, self._sub = bus, ns, sub

    async def heard(self, n: int) -> list[tuple[str, bytes]]:
        """The first ``n`` messages (waiting for them, at most WAIT_S each)."""
        if isinstance(self._bus, InMemoryBus):
            nudges = [
                (subjects.nudge_subject(ns, q), b"") for ns, q in self._bus.nudges if ns == self._ns
            ]
            controls = [
                (subjects.daemon_control_subject(ns, w), codec.encode(c))
                for ns, w, c in self._bus.controls
                if ns == self._ns
            ]
            return (nudges + controls)[:n]
        out = []
        for _ in range(n):
            msg = await self._sub.next_msg(timeout=WAIT_S)
            out.append((msg.subject, msg.data))
        return out


@pytest.fixture
def listen() -> Callable[[Bus, str], Awaitable[Listener]]:
    async def listen(bus: Bus, ns: str) -> Listener:
        if isinstance(bus, InMemoryBus):
            return Listener(bus, ns)
        assert isinstance(bus, NatsBus)
        sub = await bus.nc.subscribe(f"ls.{ns}.>")
        await bus.nc.flush()  # the server routes to it before anything is sent
        return Listener(bus, ns, sub)

    return listen


def _memory_ack(bus: InMemoryBus, ns: str, queue: str, seq: int) -> Callable[[], Awaitable[None]]:
    async def ack() -> None:
        bus.ack(ns, queue, seq)

    return ack


def _nats_ack(msg: Any) -> Callable[[], Awaitable[None]]:
    async def ack() -> None:
        await msg.ack_sync(timeout=WAIT_S)  # the counts see it once this returns

    return ack


async def _delete_events_stream(js: Any) -> None:
    try:
        await js.delete_stream(subjects.EVENTS_STREAM)
    except jse.NotFoundError:
        pass
