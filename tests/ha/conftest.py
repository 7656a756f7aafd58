from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from ha_harness import HA
from nats_cluster import start_cluster


@pytest.fixture
async def ha(nats_server_factory, tmp_path) -> AsyncIterator[HA]:
    """A 3-node NATS cluster; add control planes with ``await ha.add(n)``."""
    cluster = await start_cluster(nats_server_factory, tmp_path)
    made = HA(cluster, tmp_path)
    try:
        yield made
    finally:
        await made.stop()
