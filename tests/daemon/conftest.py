"""Daemon fixtures: a bench (NATS side of a test), in-process daemons, daemon processes.

Every daemon runs against the session nats-server and a real control plane. In-process
daemons are ``run_daemon`` tasks owned by :class:`~daemon_support.DaemonPool`; process
daemons are ``python -m lakeshore.daemon`` children owned by
:class:`~daemon_support.ProcessPool`. Both are stopped, within a bound, at teardown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from daemon_support import NS, Bench, DaemonPool, ProcessPool
from natsauth import plane_nats

from lakeshore.bus import subjects


@pytest_asyncio.fixture
async def bench(nats_server, control_plane, api) -> AsyncIterator[Bench]:
    """The NATS and HTTP side of a test, its event log listening before any daemon runs."""
    nc = await plane_nats(nats_server.url)
    try:
        b = Bench(nc, api)
        await nc.subscribe(subjects.event_subject(NS, "*", "*"), cb=b.events.on_batch)
        await nc.flush()
        yield b
    finally:
        await nc.close()


@pytest_asyncio.fixture
async def daemons(api, bench) -> AsyncIterator[DaemonPool]:
    pool = DaemonPool(api)
    try:
        yield pool
    finally:
        await pool.close()


@pytest_asyncio.fixture
async def processes(api, bench) -> AsyncIterator[ProcessPool]:
    pool = ProcessPool(api)
    try:
        yield pool
    finally:
        await pool.close()
