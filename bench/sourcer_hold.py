"""How long a work-queue stream that another stream *sources* keeps a job its worker acked
(issue 26, Options A/B of ``notes/hot-path-design.md``).

On nats-server 2.14 the sourcing consumer of a work-queue stream is a durable
``AckFlowControl`` consumer: a job leaves the stream only once its worker acked it *and*
the sourcer's flow control moved past it. Until then it counts toward ``max_msgs``, which
is how a queue's ``max_depth`` admits work (``discard: new``). This measures that hold on one
bare ``nats-server`` (the pinned binary): a queue of ``max_msgs = 1`` sourced by a history
stream; per round, publish a job, a worker pulls and ``ack_sync``s it, then the next publish
is retried every 5 ms until the stream takes it. The same without the source is the
baseline.

    .venv/bin/python bench/sourcer_hold.py [--rounds 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StreamConfig, StreamSource
from nats.js.errors import ServiceUnavailableError
from sourced_history import bare_nats

ROUNDS = 50
RETRY_S = 0.005


async def _held_ms(js: JetStreamContext, rounds: int, sourced: bool) -> list[float]:
    """Per round: ms from a job's ``ack_sync`` to the next publish the full queue takes."""
    await js.add_stream(
        StreamConfig(
            name="Q", subjects=["q.>"], retention=RetentionPolicy.WORK_QUEUE,
            discard=DiscardPolicy.NEW, max_msgs=1,
        )
    )  # fmt: skip
    sub = await js.pull_subscribe("q.>", durable="w", stream="Q")
    if sourced:
        await js.add_stream(StreamConfig(name="H", sources=[StreamSource(name="Q")]))
        # The sourcer is a consumer the server makes: wait until it is there.
        while (await js.stream_info("Q")).state.consumer_count < 2:
            await asyncio.sleep(0.01)
    await js.publish("q.job", b"0")
    held = []
    for i in range(rounds):
        [msg] = await sub.fetch(1, timeout=5)
        await msg.ack_sync()
        acked = time.perf_counter()
        while True:
            try:
                await js.publish("q.job", str(i + 1).encode())
                break
            except ServiceUnavailableError:  # 10077: the acked job still counts
                await asyncio.sleep(RETRY_S)
        held.append((time.perf_counter() - acked) * 1000)
    if sourced:
        copied = (await js.stream_info("H")).state.messages
        assert copied == rounds + 1, f"the history has {copied} copies of {rounds + 1} jobs"
    return held


def _line(name: str, held: list[float]) -> str:
    q = statistics.quantiles(held, n=100)
    return f"| {name} | {q[49]:.1f} | {q[89]:.1f} | {max(held):.1f} |"


async def main(rounds: int) -> None:
    print("| queue of max_msgs 1 | next publish taken after the ack, p50 ms | p90 | max |")
    print("| --- | ---: | ---: | ---: |")
    async with bare_nats() as js:
        print(_line("not sourced", await _held_ms(js, rounds, sourced=False)), flush=True)
    async with bare_nats() as js:
        print(_line("sourced by a history stream", await _held_ms(js, rounds, sourced=True)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    asyncio.run(main(parser.parse_args().rounds))
