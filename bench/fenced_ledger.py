"""A completion fenced by JetStream itself, and its result pushed to the producer (issue 26,
Option C of ``notes/hot-path-design.md``), measured on one bare ``nats-server`` (the
pinned binary) before anything of it is built.

Today a completion reaches its producer through the control plane: the daemon's outcome
event is stored, the Recorder fetches and fences it, then answers the producer's wait.
Option C fences in the log: per invocation, a ledger stream holds a *claim* subject and a
*result* subject, and

- a claim is ``publish(claim.<id>, Nats-Expected-Last-Subject-Sequence: 0,
  …-Subject: result.<id>)``: refused (10071) once a result exists; its sequence is the
  attempt's epoch;
- a completion is ``publish(result.<id>, Nats-Expected-Last-Subject-Sequence: <epoch>,
  …-Subject: claim.<id>)``: refused once a newer claim exists (a stale holder), and a retry
  of it is deduplicated by ``Nats-Msg-Id: <id>.<epoch>``;
- the ledger *republishes* each stored result on a core subject the producer listens on.

``tests/bus/test_ledger_fence.py`` holds those facts on the pinned server with this
script's :class:`Ledger`, :func:`claim` and :func:`complete`. This script times,
sequentially:

- **raw-W2**: a job published into a work-queue stream, pulled by a worker that answers
  the producer on core NATS (``bench/latency.py``'s baseline);
- **fenced**: the same job, the worker claims it, completes it (both fenced as above) and
  acks it; the producer hears the result from the republish;
- **fenced, claim pipelined**: the claim's publish not awaited before the run (its refusal
  would stop the run at once; the completion then waits for it).

    .venv/bin/python bench/fenced_ledger.py [--n 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, RePublish, StreamConfig
from sourced_history import BODY, bare_nats, work_stream

N = 2000
WARMUP = 50
#: ``wrong last sequence``: a compare-and-set refused.
WRONG_LAST_SEQUENCE = 10071
EXPECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECT_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"


@dataclass(frozen=True)
class Ledger:
    """A ledger stream and its subjects: ``<prefix>.claim.<id>``, ``<prefix>.result.<id>``;
    a stored result is republished on ``done.<prefix>.<id>``."""

    name: str
    prefix: str

    def claim(self, inv: str) -> str:
        return f"{self.prefix}.claim.{inv}"

    def result(self, inv: str) -> str:
        return f"{self.prefix}.result.{inv}"

    def done(self, inv: str) -> str:
        return f"done.{self.prefix}.{inv}"

    async def add(self, js: JetStreamContext) -> None:
        await js.add_stream(
            StreamConfig(
                name=self.name, subjects=[f"{self.prefix}.>"], allow_direct=True,
                republish=RePublish(src=self.result(">"), dest=self.done(">")),
                duplicate_window=120.0,
            )
        )  # fmt: skip


async def claim(js: JetStreamContext, ledger: Ledger, inv: str) -> int:
    """The attempt's epoch (the claim's sequence); raises ``APIError`` 10071 once a result
    exists."""
    ack = await js.publish(
        ledger.claim(inv), b"", headers={EXPECT_SEQ: "0", EXPECT_SUBJECT: ledger.result(inv)}
    )
    return ack.seq


async def complete(js: JetStreamContext, ledger: Ledger, inv: str, epoch: int, body: bytes) -> int:
    """Store the result of attempt ``epoch``; raises ``APIError`` 10071 when a newer claim
    superseded it. A retry (same ``Nats-Msg-Id``) is acked with the first one's sequence."""
    ack = await js.publish(
        ledger.result(inv), body,
        headers={EXPECT_SEQ: str(epoch), EXPECT_SUBJECT: ledger.claim(inv),
                 "Nats-Msg-Id": f"{inv}.{epoch}"},
    )  # fmt: skip
    return ack.seq


@dataclass(frozen=True)
class Trips:
    name: str
    ms: list[float]

    def line(self) -> str:
        s = sorted(self.ms)
        p99 = s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]
        return f"| {self.name} | {statistics.median(s):.2f} | {p99:.2f} |"


async def _worker(
    js: JetStreamContext, nc: NATS, ledger: Ledger, stream: str, mode: str, stop: asyncio.Event
) -> None:
    sub = await js.pull_subscribe_bind("workers", stream)
    while not stop.is_set():
        try:
            msgs = await sub.fetch(1, timeout=0.5)
        except TimeoutError:
            continue
        for msg in msgs:
            inv = msg.headers["Inv"] if msg.headers else ""
            if mode == "raw":
                await nc.publish(ledger.done(inv), b"ok")  # as the republish would
                await msg.ack()
                continue
            if mode == "fenced":
                epoch = await claim(js, ledger, inv)
                result = b"ok"  # the run
            else:  # claim pipelined: the run goes on while the claim is being stored
                claimed = asyncio.ensure_future(claim(js, ledger, inv))
                result = b"ok"
                epoch = await claimed
            await complete(js, ledger, inv, epoch, result)
            await msg.ack()


async def round_trips(js: JetStreamContext, nc: NATS, ledger: Ledger, mode: str, n: int) -> Trips:
    stream = f"W{mode.upper().replace('-', '')}"  # its subjects: w<mode>.>
    await work_stream(js, stream, f"{stream.lower()}.>")
    await js.add_consumer(
        stream, ConsumerConfig(durable_name="workers", ack_policy=AckPolicy.EXPLICIT)
    )
    stop = asyncio.Event()
    worker = asyncio.create_task(_worker(js, nc, ledger, stream, mode, stop))
    answers: asyncio.Queue[str] = asyncio.Queue()

    async def heard(msg) -> None:
        await answers.put(msg.subject)

    sub = await nc.subscribe(ledger.done(f"{mode}.*"), cb=heard)
    times = []
    try:
        for i in range(n + WARMUP):
            inv = f"{mode}.{i}"
            began = time.perf_counter()
            await js.publish(f"{stream.lower()}.q", BODY, headers={"Inv": inv, "Nats-Msg-Id": inv})
            subject = await asyncio.wait_for(answers.get(), 10)
            assert subject == ledger.done(inv), subject
            if i >= WARMUP:
                times.append((time.perf_counter() - began) * 1000)
    finally:
        stop.set()
        await sub.unsubscribe()
        await worker
    return Trips(mode, times)


async def measure(n: int) -> list[str]:
    async with bare_nats() as js:
        ledger = Ledger("LEDGER", "ledger")
        await ledger.add(js)
        nc = js._nc  # noqa: SLF001 - the one connection of this bench's client
        modes = ("raw", "fenced", "piped")
        trips = [await round_trips(js, nc, ledger, mode, n) for mode in modes]
    return [
        f"Round trips, sequential ({n:,} after {WARMUP} of warm-up; producer, worker and "
        "server on this machine):",
        "",
        "| shape | p50 ms | p99 ms |",
        "| --- | ---: | ---: |",
        *(t.line() for t in trips),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=N)
    args = parser.parse_args()
    print("\n".join(asyncio.run(measure(args.n))))
