"""What a submit costs when JetStream keeps its history (issue 26, spec/dataplane.md).

Today a per-call submit is three sequential round trips: SDK → gateway, the gateway's
publish of the work, its publish of the ``submitted`` event. Option A/B of
``notes/hot-path-design.md`` drop the event publish: a history stream *sources* each
queue's work-queue stream (nats-server 2.14 sources a WorkQueue stream through a durable
flow-controlled consumer, and keeps a job until both its worker and the sourcer acked it).
This measures, on one bare ``nats-server`` (the pinned binary) and in one run:

- **one publish**: ``await js.publish`` of each job (with ``Nats-Msg-Id``) into a
  WorkQueue stream (DiscardNew, ``max_msgs``), nothing else — the floor of a submit;
- **publish + event**: the same, then an ``await``ed publish of a ``submitted`` event into
  a Limits stream — today's gateway's two JetStream round trips, without the SDK's hop;
- **one publish, sourced**: one publish into a WorkQueue stream that a Limits history
  stream sources with a subject transform — the history is the server's, the submit one
  round trip. Also: how long after the last publish the history holds all ``n``
  (sequential and pipelined), and how long the work-queue stream keeps jobs its consumer
  acked (its depth — what ``max_msgs`` admission counts — includes them until the
  sourcer's flow control has passed them).

    .venv/bin/python bench/sourced_history.py [--n 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import nats
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    RetentionPolicy,
    StreamConfig,
    StreamSource,
    SubjectTransform,
)

NATS_SERVER = str(Path(sys.executable).parent / "nats-server")
N = 5000
#: A submit's body: an invocation of a no-op is about this big.
BODY = b"x" * 300
#: Publishes in flight in the pipelined round.
WINDOW = 256


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _quiet(_: Exception) -> None:
    """nats-py's own error report (the server going away at the end) says nothing here."""


@contextlib.asynccontextmanager
async def bare_nats() -> AsyncIterator[JetStreamContext]:
    """A fresh ``nats-server -js`` on a free port, in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="ls-sourced-") as tmp:
        port = _free_port()
        proc = subprocess.Popen(
            [NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for _ in range(200):
                try:
                    nc = await nats.connect(
                        f"nats://127.0.0.1:{port}", allow_reconnect=False, error_cb=_quiet
                    )
                    break
                except Exception:  # noqa: BLE001 - not listening yet
                    await asyncio.sleep(0.05)
            else:
                raise RuntimeError("nats-server did not start")
            try:
                yield nc.jetstream()
            finally:
                await nc.close()
        finally:
            proc.terminate()
            proc.wait(10)


async def work_stream(js: JetStreamContext, name: str, subject: str, replicas: int = 1) -> None:
    await js.add_stream(
        StreamConfig(
            name=name, subjects=[subject], retention=RetentionPolicy.WORK_QUEUE,
            discard=DiscardPolicy.NEW, max_msgs=1_000_000, duplicate_window=120.0,
            num_replicas=replicas,
        )
    )  # fmt: skip


async def sequential(js: JetStreamContext, subject: str, n: int, event: str | None) -> float:
    """Seconds for ``n`` awaited publishes (each followed by an awaited event publish)."""
    began = time.perf_counter()
    for i in range(n):
        await js.publish(subject, BODY, headers={"Nats-Msg-Id": f"{subject}-{i}"})
        if event is not None:
            await js.publish(event, BODY[:120])
    return time.perf_counter() - began


async def pipelined(js: JetStreamContext, subject: str, n: int) -> float:
    """Seconds for ``n`` publishes with :data:`WINDOW` acks outstanding."""
    began = time.perf_counter()
    pending: set[asyncio.Future[object]] = set()
    for i in range(n):
        if len(pending) >= WINDOW:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        pending.add(
            asyncio.ensure_future(
                js.publish(subject, BODY, headers={"Nats-Msg-Id": f"{subject}-p{i}"})
            )
        )
    await asyncio.gather(*pending)
    return time.perf_counter() - began


async def until_count(js: JetStreamContext, stream: str, n: int, *, at_most: bool) -> float:
    """Seconds until ``stream`` holds ``n`` messages (``at_most``: no more than ``n``)."""
    began = time.perf_counter()
    async with asyncio.timeout(60):
        while True:
            held = (await js.stream_info(stream)).state.messages
            if (held <= n) if at_most else (held >= n):
                return time.perf_counter() - began
            await asyncio.sleep(0.002)


async def workers(js: JetStreamContext, stream: str) -> None:
    """The workers' consumer of ``stream``. Made before the first publish: a job that no
    consumer but the sourcer wants is removed once the sourcer acked it (work-queue
    retention removes what every interested consumer acked)."""
    await js.add_consumer(
        stream, ConsumerConfig(durable_name="workers", ack_policy=AckPolicy.EXPLICIT,
                               max_ack_pending=100_000),
    )  # fmt: skip


async def drain(js: JetStreamContext, stream: str, n: int) -> float:
    """Pull and ack all ``n`` jobs; seconds from the last ack until the stream is empty."""
    sub = await js.pull_subscribe_bind("workers", stream)
    done = 0
    while done < n:
        msgs = await sub.fetch(min(256, n - done), timeout=10)
        for m in msgs:
            await m.ack_sync()
        done += len(msgs)
    return await until_count(js, stream, 0, at_most=True)


@dataclass(frozen=True)
class Figures:
    n: int
    plain_s: float
    with_event_s: float
    sourced_s: float
    sourced_lag_s: float
    piped_plain_s: float
    piped_sourced_s: float
    piped_lag_s: float
    acked_kept_s: float
    #: of ``n`` jobs published while the stream had no workers' consumer, those left once
    #: the history held them all
    orphans_left: int

    def lines(self) -> list[str]:
        n = self.n

        def rate(seconds: float) -> str:
            return f"{n / seconds:,.0f}/s"

        def ms(seconds: float) -> str:
            return f"{seconds * 1000:.1f} ms"

        rows = [
            ("one publish (floor)", rate(self.plain_s), "— (no history)"),
            ("publish + event publish (today's gateway, less the SDK hop)",
             rate(self.with_event_s), "0 (the event is the history)"),
            ("one publish, history sourced", rate(self.sourced_s), ms(self.sourced_lag_s)),
            (f"one publish, pipelined ({WINDOW} in flight)", rate(self.piped_plain_s), "—"),
            ("one publish, pipelined, history sourced", rate(self.piped_sourced_s),
             ms(self.piped_lag_s)),
        ]  # fmt: skip
        return [
            f"| submit shape ({n:,} jobs, 300 B) | submits/s | history holds all, after the "
            "last publish |",
            "| --- | ---: | ---: |",
            *(f"| {shape} | {r} | {lag} |" for shape, r, lag in rows),
            "",
            f"Jobs acked by their worker stay in the sourced work-queue stream (counted by "
            f"`max_msgs`) for {self.acked_kept_s * 1000:.0f} ms after the last ack.",
            f"Of {n:,} jobs published into a sourced work-queue stream that had no workers' "
            f"consumer yet, {self.orphans_left:,} were left once the history held them: the "
            "sourcer's ack removes a job nobody else wants.",
        ]


def _to_history(prefix: str) -> SubjectTransform:
    return SubjectTransform(src=f"{prefix}.>", dest=f"hist.{prefix}.>")


async def measure(n: int) -> Figures:
    async with bare_nats() as js:
        await work_stream(js, "PLAIN", "plain.>")
        await js.add_stream(StreamConfig(name="EVENTS", subjects=["evt.>"]))
        await work_stream(js, "TODAY", "today.>")
        await work_stream(js, "SRC", "src.>")
        await workers(js, "SRC")
        await work_stream(js, "PIPED", "piped.>")
        await work_stream(js, "PIPEDSRC", "pipedsrc.>")
        await work_stream(js, "ORPHAN", "orphan.>")  # no workers' consumer
        await js.add_stream(
            StreamConfig(
                name="HIST",
                sources=[
                    StreamSource(name=name, subject_transforms=[_to_history(prefix)])
                    for name, prefix in (("SRC", "src"), ("PIPEDSRC", "pipedsrc"),
                                         ("ORPHAN", "orphan"))
                ],
            )
        )  # fmt: skip
        plain_s = await sequential(js, "plain.q", n, None)
        with_event_s = await sequential(js, "today.q", n, "evt.q")
        sourced_s = await sequential(js, "src.q", n, None)
        sourced_lag_s = await until_count(js, "HIST", n, at_most=False)
        piped_plain_s = await pipelined(js, "piped.q", n)
        piped_sourced_s = await pipelined(js, "pipedsrc.q", n)
        piped_lag_s = await until_count(js, "HIST", 2 * n, at_most=False)
        acked_kept_s = await drain(js, "SRC", n)
        await pipelined(js, "orphan.q", n)
        await until_count(js, "HIST", 3 * n, at_most=False)
        await asyncio.sleep(2.0)  # the sourcer's flow control acks at least every second
        orphans_left = (await js.stream_info("ORPHAN")).state.messages
    return Figures(
        n, plain_s, with_event_s, sourced_s, sourced_lag_s, piped_plain_s, piped_sourced_s,
        piped_lag_s, acked_kept_s, orphans_left,
    )  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=N)
    args = parser.parse_args()
    print("\n".join(asyncio.run(measure(args.n)).lines()))
