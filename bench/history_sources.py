"""What a history stream that *sources* every queue of a namespace costs as queues are added
(issue 26, Options A/B of ``notes/hot-path-design.md``; ``bench/sourced_history.py``
measured one source).

A namespace's history would source each of its queues' work-queue streams: a queue's
creation is then an update of the history stream's ``sources`` (a meta proposal in a
cluster). This measures, on one bare ``nats-server`` (the pinned binary), with ``K``
queues added one by one (each its work-queue stream, its workers' consumer, then the
history's update with one more source):

- how long each update of the history's sources takes, as the list grows;
- with all ``K`` sourced, a submit's publish acked → an ordered consumer of the history
  has it (sequential, spread over the queues), against the same with one source.

    .venv/bin/python bench/history_sources.py [--queues 200] [--n 500]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from nats.js import JetStreamContext
from nats.js.api import StreamConfig, StreamSource, SubjectTransform
from sourced_history import BODY, bare_nats, work_stream, workers

QUEUES = 200
N = 500


def _source(i: int) -> StreamSource:
    return StreamSource(
        name=f"Q{i}", subject_transforms=[SubjectTransform(src=f"q{i}.>", dest=f"hist.q{i}.>")]
    )


async def add_queues(js: JetStreamContext, k: int) -> list[float]:
    """Add ``k`` queues and source each into ``HIST``; the seconds of each update."""
    await js.add_stream(StreamConfig(name="HIST", subjects=["nothing.here"]))
    sources: list[StreamSource] = []
    took = []
    for i in range(k):
        await work_stream(js, f"Q{i}", f"q{i}.>")
        await workers(js, f"Q{i}")
        sources.append(_source(i))
        began = time.perf_counter()
        await js.update_stream(
            StreamConfig(name="HIST", subjects=["nothing.here"], sources=sources)
        )
        took.append(time.perf_counter() - began)
    return took


async def lags(js: JetStreamContext, queues: int, n: int) -> list[float]:
    """Seconds from each publish's ack until an ordered consumer of ``HIST`` gets it (one at
    a time, queues in turn)."""
    arrived: asyncio.Queue[float] = asyncio.Queue()

    async def on(msg) -> None:
        await arrived.put(time.perf_counter())

    sub = await js.subscribe("hist.>", stream="HIST", cb=on, ordered_consumer=True)
    try:
        out = []
        for i in range(n):
            q = i % queues
            await js.publish(f"q{q}.x", BODY, headers={"Nats-Msg-Id": f"lag-{q}-{i}"})
            acked = time.perf_counter()
            out.append(max(0.0, await asyncio.wait_for(arrived.get(), 30) - acked))
        return out
    finally:
        await sub.unsubscribe()


def _ms(values: list[float]) -> str:
    s = sorted(values)
    p90 = s[min(len(s) - 1, round(0.9 * (len(s) - 1)))]
    return f"{statistics.median(s) * 1000:.1f} / {p90 * 1000:.1f}"


async def measure(queues: int, n: int) -> list[str]:
    async with bare_nats() as js:
        took = await add_queues(js, queues)
        many = await lags(js, queues, n)
    async with bare_nats() as js:
        await add_queues(js, 1)
        one = await lags(js, 1, n)
    tenth = max(1, queues // 10)
    return [
        f"A history stream sourcing {queues} work-queue streams, on one bare nats-server:",
        "",
        "| figure | p50 / p90 ms |",
        "| --- | ---: |",
        f"| update of its sources, queues 1–{tenth} | {_ms(took[:tenth])} |",
        f"| update of its sources, queues {queues - tenth + 1}–{queues} | {_ms(took[-tenth:])} |",
        f"| publish acked → a reader of the history has it, {queues} sources | {_ms(many)} |",
        f"| publish acked → a reader of the history has it, 1 source | {_ms(one)} |",
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=QUEUES)
    parser.add_argument("--n", type=int, default=N)
    args = parser.parse_args()
    print("\n".join(asyncio.run(measure(args.queues, args.n))))
