"""Shipping code with invocations (spec/code.md): a directory packed into a snapshot, uploaded
once per digest, and named by the invocations that run in it.

``code="."`` means the directory given, resolved when it is given (``configure``, ``@udf``,
``--code``): the snapshot is that directory's files, and a function ``tasks:double`` is
``tasks.py`` at its top. The :class:`Shipper` packs a directory again only when its files
changed (a walk of their sizes and times, no read), and uploads a digest once per API and
org: a submit after the first costs the walk.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from lakeshore.code import snapshot
from lakeshore.code.snapshot import Snapshot
from lakeshore.errors import SnapshotNotFound
from lakeshore.model import CodeInfo
from lakeshore.sdk.call import Call
from lakeshore.sdk.transport import Transport

#: A directory of at most this many files is looked at again on the caller's loop (about
#: 0.1 ms for a few files); a larger one, or one not packed yet, in a thread.
INLINE_FILES = 200
#: The content type of an uploaded snapshot.
TAR = "application/x-tar"


class CodeRoutes(Transport):
    """An org's code snapshots."""

    def code_info(self, digest: str, *, namespace: str | None = None) -> Call[CodeInfo]:
        """One stored snapshot and how the org's jobs use it. Raises ``SnapshotNotFound``
        when it is not stored."""
        return Call(self, CodeInfo, "GET", self._ns(namespace, "code", digest))

    def code_ls(self, *, namespace: str | None = None) -> Call[list[CodeInfo]]:
        """The org's snapshots, the most recently used first."""
        return Call(self, list[CodeInfo], "GET", self._ns(namespace, "code"), key="snapshots")

    async def upload_code(self, snap: Snapshot, *, namespace: str | None = None) -> CodeInfo:
        """Store a snapshot (a no-op when its digest is stored).

        Raises:
            SnapshotTooLarge: over the server's bounds; nothing stored.
        """
        path = self._ns(namespace, "code", snap.digest)
        body = await self.request("PUT", path, content=(snap.data, TAR))
        return Call(self, CodeInfo, "PUT", path).decode(body)


class Shipper:
    """The snapshots this process made, by directory, and the digests it uploaded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._packed: dict[Path, tuple[tuple[object, ...], Snapshot]] = {}
        self._shipped: set[tuple[str, str, str]] = set()
        self._inflight: dict[tuple[int, tuple[str, str, str]], asyncio.Task[None]] = {}

    def snapshot(self, directory: str | os.PathLike[str]) -> Snapshot:
        """``directory``'s snapshot, packed again only if its files changed.

        Raises:
            Invalid: not a directory, or a file cannot be read (named).
            SnapshotTooLarge: over the default bounds (the server may have others).
        """
        root = Path(directory).resolve()
        seen = snapshot.fingerprint(root)
        with self._lock:
            known = self._packed.get(root)
        if known is not None and known[0] == seen:
            return known[1]
        snap = snapshot.pack(root)
        with self._lock:
            self._packed[root] = (seen, snap)
        return snap

    async def ship(
        self, client: CodeRoutes, directory: str | os.PathLike[str], namespace: str | None
    ) -> str:
        """Make sure ``directory``'s snapshot is stored where ``client`` submits; its digest."""
        known = self._packed.get(Path(directory).resolve())
        if known is not None and len(known[0]) <= INLINE_FILES:
            snap = self.snapshot(directory)  # a small tree's walk costs less than a thread hop
        else:
            snap = await asyncio.to_thread(self.snapshot, directory)
        key = (client.api, namespace or client.namespace, snap.digest)
        if key in self._shipped:
            return snap.digest
        # Submits racing on one loop share one upload (a future per loop: the SDK's, or a
        # CLI command's own).
        loop = asyncio.get_running_loop()
        inflight = self._inflight.get((id(loop), key))
        if inflight is None:
            inflight = loop.create_task(self._upload(client, snap, namespace))
            self._inflight[(id(loop), key)] = inflight
            inflight.add_done_callback(lambda _: self._inflight.pop((id(loop), key), None))
        await asyncio.shield(inflight)
        self._shipped.add(key)
        return snap.digest

    @staticmethod
    async def _upload(client: CodeRoutes, snap: Snapshot, namespace: str | None) -> None:
        try:
            await client.code_info(snap.digest, namespace=namespace)
        except SnapshotNotFound:
            await client.upload_code(snap, namespace=namespace)

    def forget(self, client: CodeRoutes, digest: str, namespace: str | None) -> None:
        """``digest`` is not stored where ``client`` submits any more (the server's retention
        deleted it): the next :meth:`ship` uploads it again."""
        self._shipped.discard((client.api, namespace or client.namespace, digest))


#: The process's shipper (the SDK's and the CLI's).
SHIPPER = Shipper()

__all__ = ["SHIPPER", "TAR", "CodeRoutes", "Shipper"]
