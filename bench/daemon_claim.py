"""Claims per second of one worker daemon, against raw nats-py ``fetch(100)`` + ``ack()``.

Not a test. Run with ``python bench/daemon_claim.py [--count N] [--concurrency 1,16]``. It
starts its own nats-server and ``lakeshore server`` (a separate process) in a temporary
directory, submits ``N``
no-op invocations (``builtins:int``) through the API for each daemon run, and times one
in-process daemon from registration to the last ``succeeded`` event. Each claim then
costs the full protocol: a no_wait pull, ``claimed``/``started``/``succeeded`` events, a
thread for the call, the ``Result`` put, and ``ack_sync``. The baseline drains the same
number of messages with a bound pull subscription, ``fetch(100)`` and fire-and-forget acks
— the ceiling of the client, doing none of that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from _harness import closed_nats_server, daemon_access, plane_nats
from nats.aio.msg import Msg

from lakeshore.bus import codec, subjects
from lakeshore.config import read_toml
from lakeshore.daemon import DaemonSettings, Running, run_daemon
from lakeshore.model import EventBatch, EventType, InvocationSubmit, QueueCreate
from lakeshore.sdk import Client
from lakeshore.security.serverauth import NatsSecrets

NS = "default"
QUEUE = "bench"
NOOP = InvocationSubmit(fn="builtins:int")


async def submit(client: Client, count: int) -> None:
    for start in range(0, count, 5_000):
        batch = [NOOP] * min(5_000, count - start)
        await client.submit(QUEUE, batch)


async def time_daemon(
    url: str, secrets: NatsSecrets, client: Client, count: int, concurrency: int
) -> float:
    """Seconds one daemon takes to run ``count`` queued no-ops."""
    await submit(client, count)
    nc = await plane_nats(url, secrets)
    done = asyncio.Event()
    succeeded = 0

    async def on_events(msg: Msg) -> None:
        nonlocal succeeded
        batch = codec.decode(msg.data, EventBatch)
        succeeded += sum(e.type is EventType.SUCCEEDED for e in batch.events)
        if succeeded >= count:
            done.set()

    await nc.subscribe(subjects.event_subject(NS, QUEUE, "*"), cb=on_events)
    await nc.flush()  # the server has the subscription before the first event
    stop = asyncio.Event()
    ready: asyncio.Future[Running] = asyncio.get_running_loop().create_future()
    settings = DaemonSettings(
        access=daemon_access(url, secrets),
        name=f"bench-{concurrency}",
        queues=[QUEUE],
        concurrency=concurrency,
    )
    daemon = asyncio.create_task(
        run_daemon(settings, stop, environ=os.environ, on_ready=ready.set_result)
    )
    try:
        async with asyncio.timeout(30):
            await ready
        t0 = time.perf_counter()
        async with asyncio.timeout(600):
            await done.wait()
        elapsed = time.perf_counter() - t0
    finally:
        stop.set()
        await daemon
        await nc.close()
    return elapsed


async def time_raw_fetch(url: str, secrets: NatsSecrets, client: Client, count: int) -> float:
    """Seconds raw nats-py takes to fetch(100) and ack ``count`` queued messages."""
    await submit(client, count)
    nc = await plane_nats(url, secrets)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe_bind(
            subjects.level_consumer(0), stream=subjects.queue_stream(NS, QUEUE)
        )
        got = 0
        t0 = time.perf_counter()
        while got < count:
            for msg in await sub.fetch(100, timeout=5):
                await msg.ack()
                got += 1
        elapsed = time.perf_counter() - t0
        await nc.flush()
    finally:
        await nc.close()
    return elapsed


async def main(count: int, concurrencies: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        nats_server, secrets, secrets_file = closed_nats_server(Path(tmp))
        async with nats_server as server:
            plane = control_plane(Path(tmp) / "plane", server.url, secrets_file)
            async with plane as (api, token), Client(api, token, NS) as client:
                await client.queue_add(QueueCreate(name=QUEUE))
                raw_s = await time_raw_fetch(server.url, secrets, client, count)
                raw = count / raw_s
                print(f"raw nats-py fetch(100)+ack: {count:,} in {raw_s:.2f}s: {raw:,.0f}/s")
                for c in concurrencies:
                    secs = await time_daemon(server.url, secrets, client, count, c)
                    rate = count / secs
                    print(
                        f"daemon, concurrency {c:>3}: {count:,} no-op claims in {secs:.2f}s: "
                        f"{rate:,.0f}/s ({rate / raw:.3f} of raw)",
                        flush=True,
                    )


@contextlib.asynccontextmanager
async def control_plane(
    data_dir: Path, nats_url: str, secrets_file: Path
) -> AsyncIterator[tuple[str, str]]:
    """``lakeshore server`` as its own process, so its work does not share our loop."""
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "lakeshore"),
        "server",
        "--data-dir",
        str(data_dir),
        "--port",
        "0",
        "--nats-url",
        nats_url,
        "--nats-auth-file",
        str(secrets_file),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    output = []
    try:
        async with asyncio.timeout(30):
            while b"press Ctrl-C to stop" not in (line := await proc.stdout.readline()):
                if not line:
                    raise RuntimeError("lakeshore server exited:\n" + "".join(output))
                output.append(line.decode())
        drain = asyncio.create_task(proc.stdout.read())  # keeps the pipe from filling
        config = read_toml(data_dir / "config.toml")
        yield config["api"], config["token"]
    finally:
        if proc.returncode is None:
            proc.terminate()
        try:
            async with asyncio.timeout(30):
                await proc.wait()
        except TimeoutError:
            print("lakeshore server did not stop within 30s of SIGTERM; killed", file=sys.stderr)
            proc.kill()
            await proc.wait()
    await drain


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5_000, help="invocations per run")
    parser.add_argument(
        "--concurrency", default="1,16", help="comma-separated daemon concurrencies to time"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(args.count, [int(c) for c in args.concurrency.split(",")]))
