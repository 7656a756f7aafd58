"""Can a control plane read a queue's submissions from its stream as fast as they come?
(issue 26: the `submitted` record without a publish of its own.)

A claim carries its submission's record (lakeshore/submission.py); what nobody has claimed
yet is only in the queue's work-queue stream. A reader of that stream — a *batch direct
get* from the last sequence it has seen (`$JS.API.DIRECT.GET.<stream>`, `{"seq", "batch"}`;
a work-queue stream allows no second consumer, and a direct get consumes nothing) — would
make those records instead of the gateway's event publish. This measures, on one bare
``nats-server`` (the pinned binary), with real invocation messages:

- **backlog**: ``n`` messages stored, then read from sequence 1 in batches: messages/s
  read, and read + decoded + made into the ``submitted`` record (the reader's whole work);
- **follow**: the reader following a pipelined publisher in the same process (256 acks
  in flight, as fast as a submit gets): how far behind a message's ack its record is made
  (p50, p99, max).

The reader takes each batch on a subscription callback: ``next_msg`` costs two tasks per
message (with it the backlog read at about 21,000 messages/s instead of 52,000).

    .venv/bin/python bench/pending_reader.py [--n 50000] [--batch 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StreamConfig
from sourced_history import bare_nats

from lakeshore import submission
from lakeshore.bus import codec
from lakeshore.ids import new_id
from lakeshore.model import Invocation, now

N = 50_000
BATCH = 256
WINDOW = 256
STREAM = "Q"
SUBJECT = "ls.ns.q.work.p0"


def _payloads(n: int) -> list[bytes]:
    at = now()
    return [
        codec.encode(Invocation(id=new_id(), namespace="ns", queue="work", fn="tasks:noop",
                                args=[i], submitted_at=at))
        for i in range(n)
    ]  # fmt: skip


class Reader:
    """Reads ``STREAM`` from ``next_seq`` in batches; ``made`` maps seq → monotonic time its
    record was made."""

    def __init__(self, nc: Client, batch: int, decode: bool) -> None:
        self._nc, self._batch, self._decode = nc, batch, decode
        self.next_seq = 1
        self.made: dict[int, float] = {}

    async def read(self) -> int:
        """One batch from ``next_seq``: messages read (0: none stored there yet)."""
        got = 0
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def on_msg(msg: Msg) -> None:
            nonlocal got
            headers = msg.headers or {}
            if "Status" in headers:  # 204 EOB after a batch; 404 when nothing is there
                if not done.done():
                    done.set_result(None)
                return
            seq = int(headers["Nats-Sequence"])
            if self._decode:
                inv = codec.decode(msg.data, Invocation)
                submission.detail(inv, seq, keep_args=True)
            self.made[seq] = time.perf_counter()
            self.next_seq = seq + 1
            got += 1

        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox, cb=on_msg, pending_msgs_limit=4 * self._batch)
        try:
            body = json.dumps({"seq": self.next_seq, "batch": self._batch}).encode()
            await self._nc.publish(f"$JS.API.DIRECT.GET.{STREAM}", body, reply=inbox)
            await asyncio.wait_for(done, 5)
            return got
        finally:
            await sub.unsubscribe()


async def _stream(js: JetStreamContext) -> None:
    await js.add_stream(
        StreamConfig(
            name=STREAM, subjects=["ls.ns.q.work.>"], retention=RetentionPolicy.WORK_QUEUE,
            discard=DiscardPolicy.NEW, max_msgs=1_000_000, allow_direct=True,
        )
    )  # fmt: skip


async def _publish(js: JetStreamContext, payloads: list[bytes], acked: dict[int, float]) -> None:
    pending: set[asyncio.Future[None]] = set()

    async def one(body: bytes) -> None:
        ack = await js.publish(SUBJECT, body)
        acked[ack.seq] = time.perf_counter()

    for body in payloads:
        if len(pending) >= WINDOW:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        pending.add(asyncio.ensure_future(one(body)))
    await asyncio.gather(*pending)


async def backlog(n: int, batch: int, decode: bool) -> float:
    """Messages/s reading ``n`` stored messages from sequence 1."""
    async with bare_nats() as js:
        await _stream(js)
        await _publish(js, _payloads(n), {})
        reader = Reader(js._nc, batch, decode)
        began = time.perf_counter()
        while await reader.read():
            pass
        assert len(reader.made) == n, f"read {len(reader.made)} of {n}"
        return n / (time.perf_counter() - began)


async def follow(n: int, batch: int) -> tuple[float, list[float]]:
    """Publish ``n`` pipelined while the reader follows; submits/s and each record's lag
    behind its publish's ack (ms; negative: read before the ack came back)."""
    async with bare_nats() as js:
        await _stream(js)
        payloads = _payloads(n)
        acked: dict[int, float] = {}
        reader = Reader(js._nc, batch, decode=True)
        done = asyncio.Event()

        async def tail() -> None:
            while not (done.is_set() and len(reader.made) >= n):
                if not await reader.read():
                    await asyncio.sleep(0.001)

        following = asyncio.ensure_future(tail())
        began = time.perf_counter()
        await _publish(js, payloads, acked)
        rate = n / (time.perf_counter() - began)
        done.set()
        await asyncio.wait_for(following, 60)
        return rate, [(reader.made[s] - acked[s]) * 1000 for s in acked]


def _q(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100)[p - 1]


async def main(n: int, batch: int) -> None:
    print(f"{n:,} invocation messages ({len(_payloads(1)[0])} B each), batch {batch}")
    print("| reader | messages/s |")
    print("| --- | ---: |")
    print(f"| backlog, read only | {await backlog(n, batch, decode=False):,.0f} |", flush=True)
    print(f"| backlog, read + decode + record | {await backlog(n, batch, decode=True):,.0f} |")
    rate, lags = await follow(n, batch)
    print(
        f"\nfollowing a pipelined publisher ({rate:,.0f} submits/s, same process): the record "
        f"made {_q(lags, 50):.1f} ms (p50) / {_q(lags, 99):.1f} ms (p99) / {max(lags):.1f} ms "
        "(max) after the publish's ack"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=N)
    parser.add_argument("--batch", type=int, default=BATCH)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.batch))
