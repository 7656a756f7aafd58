"""A daemon in a process of its own, for the tests that measure it (its RSS): reads its
``DaemonSettings`` as JSON on stdin, says ``ready`` on stderr once registered, retires on
SIGTERM."""

from __future__ import annotations

import asyncio
import os
import sys

import msgspec

from lakeshore.daemon import DaemonSettings, run_daemon


async def main() -> int:
    settings = msgspec.json.decode(sys.stdin.buffer.read(), type=DaemonSettings)
    return await run_daemon(
        settings,
        asyncio.Event(),
        environ=os.environ,
        handle_signals=True,
        on_ready=lambda _: print("ready", file=sys.stderr, flush=True),
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
