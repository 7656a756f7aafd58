"""Recorder ingestion end to end: events published to ``LS_EVENTS`` → rows in DuckDB.

Not a test. Run with ``python bench/recorder_ingest.py [--invocations N] [--batch B]``. It
starts a nats-server and a DuckDB file in a temporary directory, and measures two things:

* backlog: N invocations × 4 events (submitted, claimed, started, succeeded) published
  first, in ``EventBatch`` messages of B events; then a Recorder starts and drains them.
* live: a Recorder runs while another process publishes the same load (windows of
  concurrent publishes, as many daemons would), timed from the first publish until the last
  event is recorded.

Both print events/s and the Recorder's own counters (appends, stale). Every event is
checked to be in the store at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _harness import closed_nats_server, plane_nats

from lakeshore.actors.base import Runtime
from lakeshore.actors.recorder import GetStats, Recorder, WaitRecorded
from lakeshore.bus import codec, subjects
from lakeshore.bus.events import EventFeed, ensure_events_stream
from lakeshore.ids import new_id
from lakeshore.model import EventBatch, EventType, InvocationEvent
from lakeshore.security import serverauth
from lakeshore.store import open_store

#: Where the publisher process finds the NATS secrets.
SECRETS_ENV = "BENCH_NATS_AUTH_FILE"

LIFECYCLE = (EventType.SUBMITTED, EventType.CLAIMED, EventType.STARTED, EventType.SUCCEEDED)
#: Concurrent publishes in flight (sequential publishes would measure the publisher).
WINDOW = 64


def _events(namespace: str, n: int) -> list[InvocationEvent]:
    ts = datetime.now(UTC)
    out = []
    for i in range(n):
        inv = new_id()
        for t in LIFECYCLE:
            epoch = None if t is EventType.SUBMITTED else 1
            detail = {"seq": i + 1, "priority": 0, "fn": "bench:f"} if epoch is None else None
            out.append(
                InvocationEvent(
                    namespace=namespace,
                    queue="jobs",
                    invocation_id=inv,
                    ts=ts,
                    type=t,
                    attempt=epoch or 0,
                    epoch=epoch,
                    worker=f"w-{i % 16}",
                    detail=detail,
                )  # fmt: skip
            )
    return out


async def _publish(js, namespace: str, events: list[InvocationEvent], batch: int) -> int:
    payloads = [
        codec.encode(EventBatch(events=events[i : i + batch])) for i in range(0, len(events), batch)
    ]
    subject = subjects.event_subject(namespace, "jobs")
    last = 0
    for start in range(0, len(payloads), WINDOW):
        acks = await asyncio.gather(
            *(js.publish(subject, p) for p in payloads[start : start + WINDOW])
        )
        last = max(last, *(a.seq for a in acks))
    return last


async def _publisher(url: str, namespace: str, invocations: int, batch: int) -> None:
    """The live load, in its own process: ``ready``, then publish on ``go``, then ``last``."""
    nc = await plane_nats(url, serverauth.load(Path(os.environ[SECRETS_ENV])))
    events = _events(namespace, invocations)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    print(await _publish(nc.jetstream(), namespace, events, batch), flush=True)
    await nc.close()


async def _live(url: str, namespace: str, invocations: int, batch: int) -> tuple[float, int]:
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--publisher", url, namespace, str(invocations), str(batch),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    assert (await child.stdout.readline()).strip() == b"ready"
    t0 = time.perf_counter()
    child.stdin.write(b"go\n")
    await child.stdin.drain()
    last = int(await child.stdout.readline())
    await child.wait()
    return t0, last


async def _run(tmp: Path, invocations: int, batch: int) -> None:
    nats_server, secrets, secrets_file = closed_nats_server(tmp)
    os.environ[SECRETS_ENV] = str(secrets_file)  # for the publisher process
    async with nats_server as server:
        nc = await plane_nats(server.url, secrets)
        js = nc.jetstream()
        await ensure_events_stream(js)
        runtime = Runtime(ask_timeout_s=60)
        async with await open_store(tmp / "bench.duckdb") as store:
            for label, namespace in (("backlog", "bench-a"), ("live", "bench-b")):
                if label == "backlog":
                    events = len(LIFECYCLE) * invocations
                    last = await _publish(js, namespace, _events(namespace, invocations), batch)
                    t0 = time.perf_counter()
                    ref = await runtime.spawn(Recorder(store, EventFeed(nc)))
                else:
                    t0, last = await _live(server.url, namespace, invocations, batch)
                await (await ref.ask(WaitRecorded(last)))
                elapsed = time.perf_counter() - t0
                stats = await ref.ask(GetStats())
                print(
                    f"{label:8} {events:,} events in {batch}-event messages: "
                    f"{events / elapsed:,.0f} events/s ({elapsed:.2f} s); recorder so far: "
                    f"{stats.appends} appends, {stats.messages} messages, {stats.stale} stale"
                )
                jobs = await store.list_jobs(namespace, limit=1000)
                assert len(jobs) == min(invocations, 1000)
                assert {j.state for j in jobs} == {"succeeded"}
            await runtime.shutdown()
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=25_000, help="each makes 4 events")
    parser.add_argument("--batch", type=int, default=256, help="events per EventBatch message")
    parser.add_argument("--publisher", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publisher:
        url, namespace, n, batch = args.publisher
        asyncio.run(_publisher(url, namespace, int(n), int(batch)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(Path(tmp), args.invocations, args.batch))


if __name__ == "__main__":
    main()
