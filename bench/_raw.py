"""The raw nats-py baselines of spec/bench.md, on the same nats-server as Lakeshore.

- **raw-ack / raw-pipe** (:func:`queue_run`): ``n`` messages published into a WorkQueue
  stream while nobody pulls — one ``await js.publish`` at a time (``in_flight=1``) or with
  ``publish_async`` and ``in_flight`` acks outstanding — then :data:`CONSUMERS` consumer
  processes pull and ``ack()`` them all.
- **raw-W2** (:func:`round_trips`): publish one message, a consumer process runs the no-op
  and answers on core NATS; the producer times publish → answer.

Consumers keep a window of pull requests open with raw ``CONSUMER.MSG.NEXT`` requests on
their own inbox, topped up as messages arrive, so they never wait for a batch to fill as
``fetch(n)`` does. They connect as the control plane does (the bus is closed).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import multiprocessing as mp
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event

import nats
from _harness import Server
from _workload import DAEMONS
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, RetentionPolicy, StreamConfig
from noop import noop

from lakeshore.security import serverauth
from lakeshore.security.natsd import SECRETS_FILE

#: Consumer processes, as many as Lakeshore's daemons.
CONSUMERS = DAEMONS
#: Messages each consumer keeps requested.
WINDOW = 256
#: Life of one pull request (seconds); an expired one is renewed.
EXPIRES_S = 5.0
#: Where raw-W2 consumers answer.
ANSWERS = "rawbench.answers"
_STATUS = "Status"
_PENDING = "Nats-Pending-Messages"


@dataclass(frozen=True)
class RawRun:
    """What :func:`queue_run` measured (seconds; ``first``/``last`` are wall-clock)."""

    n: int
    submit_s: float
    first: float
    last: float

    @property
    def submit_rate(self) -> float:
        return self.n / self.submit_s

    @property
    def drain_rate(self) -> float:
        return self.n / (self.last - self.first)

    @property
    def e2e_rate(self) -> float:
        return self.n / (self.submit_s + self.last - self.first)


class Puller:
    """Keeps ``window`` messages requested from one durable and hands each to ``handle``."""

    def __init__(
        self,
        nc: NatsClient,
        stream: str,
        durable: str,
        handle: Callable[[Msg], Awaitable[None]],
        window: int = WINDOW,
    ) -> None:
        self._nc, self._handle, self._window = nc, handle, window
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._inbox = nc.new_inbox()
        self._requested = 0

    async def start(self) -> None:
        await self._nc.subscribe(self._inbox, cb=self._on_msg)
        await self._top_up()

    async def _top_up(self) -> None:
        want = self._window - self._requested
        self._requested += want
        body = json.dumps({"batch": want, "expires": int(EXPIRES_S * 1e9)}).encode()
        await self._nc.publish(self._next, body, reply=self._inbox)

    async def _on_msg(self, msg: Msg) -> None:
        status = msg.headers.get(_STATUS) if msg.headers else None
        if status is None:
            self._requested -= 1
            await self._handle(msg)
        elif _PENDING in msg.headers:  # type: ignore[operator]
            # An expired (408) or refused (409) request: what it still held is void.
            self._requested -= int(msg.headers[_PENDING])  # type: ignore[index]
        else:
            self._requested = 0
        if self._requested <= self._window // 2:
            await self._top_up()


def _consume(
    url: str,
    seed: str,
    stream: str,
    answer: bool,
    ready: Event,
    go: Event,
    stop: Event,
    count: ctypes.c_longlong,
    first: ctypes.c_double,
    last: ctypes.c_double,
) -> None:
    """A consumer process: connect, wait for ``go``, pull and ack until ``stop``."""

    async def main() -> None:
        nc = await nats.connect(url, nkeys_seed_str=seed)

        async def handle(msg: Msg) -> None:
            if count.value == 0:
                first.value = time.time()
            value = noop(int(msg.data))
            await msg.ack()
            if answer:
                await nc.publish(ANSWERS, b"%d" % value)
            count.value += 1
            last.value = time.time()

        ready.set()
        await asyncio.to_thread(go.wait)
        await Puller(nc, stream, "w", handle).start()
        await asyncio.to_thread(stop.wait)
        await nc.drain()

    asyncio.run(main())


class Consumers:
    """:data:`CONSUMERS` consumer processes of ``stream``: connected, then pulling on
    :meth:`go`, until the ``async with`` block ends."""

    def __init__(self, srv: Server, stream: str, answer: bool = False) -> None:
        ctx = mp.get_context("spawn")
        self._ready = [ctx.Event() for _ in range(CONSUMERS)]
        self._go, self._stop = ctx.Event(), ctx.Event()
        # One writer each (its process), so no locks: the parent only sums and reads.
        self._counts = [ctx.RawValue(ctypes.c_longlong, 0) for _ in range(CONSUMERS)]
        self._firsts = [ctx.RawValue(ctypes.c_double, 0.0) for _ in range(CONSUMERS)]
        self._lasts = [ctx.RawValue(ctypes.c_double, 0.0) for _ in range(CONSUMERS)]
        seed = serverauth.load(srv.data_dir / SECRETS_FILE).plane_seed
        self._procs = [
            ctx.Process(
                target=_consume,
                args=(
                    *(srv.nats_url, seed, stream, answer),
                    *(self._ready[i], self._go, self._stop),
                    *(self._counts[i], self._firsts[i], self._lasts[i]),
                ),
                daemon=True,
            )
            for i in range(CONSUMERS)
        ]

    async def __aenter__(self) -> Consumers:
        for p in self._procs:
            p.start()
        async with asyncio.timeout(30):
            while not all(r.is_set() for r in self._ready):
                if any(p.exitcode is not None for p in self._procs):
                    raise RuntimeError("a raw consumer process exited at start-up")
                await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        for p in self._procs:
            await asyncio.to_thread(p.join, 10)
            if p.is_alive():
                p.kill()

    def go(self) -> None:
        self._go.set()

    async def wait_acked(self, n: int, timeout_s: float = 120) -> tuple[float, float]:
        """Wait until ``n`` messages were acked in all; the first receipt and the last ack."""
        async with asyncio.timeout(timeout_s):
            while sum(c.value for c in self._counts) < n:
                await asyncio.sleep(0.002)
        firsts = [f.value for f, c in zip(self._firsts, self._counts, strict=True) if c.value]
        return min(firsts), max(last.value for last in self._lasts)


async def _work_stream(nc: NatsClient, name: str) -> str:
    """A WorkQueue stream with one durable pull consumer ``w``; its subject."""
    js = nc.jetstream()
    subject = f"{name.lower()}.x"
    await js.add_stream(
        StreamConfig(name=name, subjects=[subject], retention=RetentionPolicy.WORK_QUEUE)
    )
    await js.add_consumer(name, ConsumerConfig(durable_name="w", max_ack_pending=20_000))
    return subject


async def queue_run(srv: Server, name: str, n: int, in_flight: int = 1) -> RawRun:
    """raw-ack (``in_flight=1``) or raw-pipe: publish ``n``, then the consumers drain them."""
    nc = await srv.raw_nats()
    try:
        subject = await _work_stream(nc, name)
        js = nc.jetstream(publish_async_max_pending=max(1, in_flight))
        async with Consumers(srv, name) as consumers:
            start = time.perf_counter()
            if in_flight == 1:
                for i in range(n):
                    await js.publish(subject, b"%d" % i)
            else:
                acks = [await js.publish_async(subject, b"%d" % i) for i in range(n)]
                # publish_async futures never settle on a refused publish: bound the wait.
                await asyncio.wait_for(asyncio.gather(*acks), 60)
            submit_s = time.perf_counter() - start
            consumers.go()
            first, last = await consumers.wait_acked(n)
    finally:
        await nc.close()
    return RawRun(n, submit_s, first, last)


async def round_trips(srv: Server, n: int, warmup: int = 20) -> list[float]:
    """raw-W2: ``n`` sequential publish → answer times in seconds (after ``warmup``)."""
    nc = await srv.raw_nats()
    try:
        subject = await _work_stream(nc, "RAWW2")
        js = nc.jetstream()
        answers = await nc.subscribe(ANSWERS)
        out = []
        async with Consumers(srv, "RAWW2", answer=True) as consumers:
            consumers.go()
            for i in range(n + warmup):
                start = time.perf_counter()
                await js.publish(subject, b"%d" % i)
                msg = await answers.next_msg(timeout=10)
                elapsed = time.perf_counter() - start
                assert int(msg.data) == i, (msg.data, i)
                if i >= warmup:
                    out.append(elapsed)
        await answers.unsubscribe()
    finally:
        await nc.close()
    return out
