"""The cost of runs' live logs (spec/runs.md §2) to the daemon that publishes them.

A real ``lakeshore server`` and one daemon in a process of its own. Three runs, one after
another, each measured by the daemon's CPU time (``/proc/<pid>/stat``) over the run's wall
time, and by what reached ``LS_LOGS``:

- silent: ``sleep`` — nothing is published;
- chatty: a command writing ``--mb-s`` MB/s (in 64 KiB writes) for ``--seconds``, with
  ``log_max_bytes`` high enough to publish all of it;
- chatty, capped at 0: the same output read from the pipes and counted, none published
  (the cost of reading the output alone).

    .venv/bin/python bench/logs.py [--mb-s 10] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import msgspec
from _harness import daemon_access, server

from lakeshore.daemon import DaemonSettings, run_daemon
from lakeshore.model import InvocationSubmit, QueueCreate
from lakeshore.sdk import Client
from lakeshore.security import serverauth
from lakeshore.security.natsd import SECRETS_FILE

TICK_S = os.sysconf("SC_CLK_TCK")
CHATTY = (
    "import sys, time\n"
    "block = (b'y' * 1023 + b'\\n') * 64\n"
    "rate, seconds = {rate}, {seconds}\n"
    "start = time.monotonic()\n"
    "sent = 0\n"
    "while time.monotonic() - start < seconds:\n"
    "    sys.stdout.buffer.write(block); sys.stdout.flush(); sent += len(block)\n"
    "    ahead = sent / rate - (time.monotonic() - start)\n"
    "    if ahead > 0: time.sleep(ahead)\n"
)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S


async def daemon_main() -> int:
    """``bench/logs.py --daemon``: a daemon whose settings come as JSON on stdin."""
    settings = msgspec.json.decode(sys.stdin.buffer.read(), type=DaemonSettings)
    ready = lambda _: print("ready", file=sys.stderr, flush=True)  # noqa: E731
    return await run_daemon(
        settings, asyncio.Event(), environ=os.environ, handle_signals=True, on_ready=ready
    )


async def one_run(client: Client, srv, queue: str, log_max_bytes: int, argv: list[str]) -> str:
    secrets = serverauth.load(srv.data_dir / SECRETS_FILE)
    settings = DaemonSettings(
        access=daemon_access(srv.nats_url, secrets), name=f"logs-{log_max_bytes}",
        queues=[queue], log_max_bytes=log_max_bytes,
    )  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--daemon", stdin=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(msgspec.json.encode(settings))
    proc.stdin.close()
    try:
        while (line := await proc.stderr.readline()) != b"ready\n":
            assert line, "the daemon exited"
        drain = asyncio.create_task(proc.stderr.read())
        nc = await srv.raw_nats()
        js = nc.jetstream()
        before = (await js.stream_info("LS_LOGS")).state
        cpu0, t0 = cpu_s(proc.pid), time.monotonic()
        inv = (await client.submit(queue, InvocationSubmit(command=argv))).ids[0]
        result = await client.job_result(inv, wait_s=300)
        wall, cpu = time.monotonic() - t0, cpu_s(proc.pid) - cpu0
        after = (await js.stream_info("LS_LOGS")).state
        await nc.close()
        assert result.ok, result
        msgs, mib = after.messages - before.messages, (after.bytes - before.bytes) / 2**20
        return (
            f"daemon CPU {cpu:.2f} s over {wall:.2f} s ({100 * cpu / wall:.1f} %); "
            f"published {msgs:,} messages, {mib:.1f} MiB"
        )
    finally:
        proc.terminate()
        await proc.wait()
        drain.cancel()


async def main(mb_s: float, seconds: float) -> None:
    async with server() as srv:
        async with Client(srv.api, srv.token) as client:
            await client.queue_add(QueueCreate(name="logs"))
            chatty = [sys.executable, "-c", CHATTY.format(rate=mb_s * 1e6, seconds=seconds)]
            rows = [
                ("silent (sleep)", 2**24, ["sleep", str(seconds)]),
                (f"chatty {mb_s:g} MB/s, all published", 2**31, chatty),
                (f"chatty {mb_s:g} MB/s, log_max_bytes 0", 0, chatty),
            ]
            for what, cap, argv in rows:
                print(f"{what}: {await one_run(client, srv, 'logs', cap, argv)}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--daemon"]:
        sys.exit(asyncio.run(daemon_main()))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb-s", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(main(args.mb_s, args.seconds))
