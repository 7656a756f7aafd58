"""A Recorder on the session nats-server and a DuckDB file of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from harness import Harness, delete_events_stream
from natsauth import plane_nats

from lakeshore.store import open_store


@pytest_asyncio.fixture
async def harness(nats_server, tmp_path: Path) -> AsyncIterator[Harness]:
    """A fresh LS_EVENTS (deleted before and after) and a fresh store; no Recorder yet."""
    nc = await plane_nats(nats_server.url)
    await delete_events_stream(nc.jetstream())
    store = await open_store(tmp_path / "lakeshore.duckdb")
    h = Harness(nc, store)
    try:
        yield h
    finally:
        await h.runtime.shutdown()
        await store.close()
        await delete_events_stream(nc.jetstream())
        await nc.close()
