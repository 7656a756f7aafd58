"""The live state a plan is made against: one snapshot per namespace, read through the SDK."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from msgspec import Struct

from lakeshore.errors import NotFound
from lakeshore.model import Provider, Queue, Worker
from lakeshore.sdk import Client


class Live(Struct, frozen=True, kw_only=True):
    """A namespace as it is now (empty when it does not exist yet)."""

    namespace: str
    exists: bool = True
    providers: list[Provider] = []
    #: this namespace's queues only (a list answers every namespace of the org)
    queues: list[Queue] = []
    workers: list[Worker] = []


async def read_live(client: Client, namespaces: Iterable[str]) -> dict[str, Live]:
    """Snapshot each namespace: its providers, queues and workers.

    Nothing is changed: an unknown namespace is found by ``GET`` and read as empty
    (provider routes would create it).

    Raises:
        LakeshoreError: the API refused a read (token, org) or could not be reached.
    """
    out: dict[str, Live] = {}
    for ns in namespaces:
        try:
            await client.namespaces_show(ns)
        except NotFound:
            out[ns] = Live(namespace=ns, exists=False)
            continue
        providers, queues, workers = await asyncio.gather(
            client.providers_ls(namespace=ns),
            client.queues_ls(namespace=ns),
            client.workers_ls(namespace=ns),
        )
        mine = [q for q in queues if q.namespace == ns]
        out[ns] = Live(namespace=ns, providers=providers, queues=mine, workers=workers)
    return out


__all__ = ["Live", "read_live"]
