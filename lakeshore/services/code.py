"""Code snapshots of an org (spec/code.md): uploads checked and stored once per digest, and
the submit's check that every digest it names is stored.

A snapshot is uploaded before the invocations that name it are submitted (the SDK and the
CLI do both); an upload is checked whole before anything is stored — its digest, that it
is a tar of plain files, and the server's bounds (``code_max_bytes``, ``code_max_files``)
— and a digest already stored is not stored again. Snapshots belong to the org: every
namespace of the org reaches them, no other org does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import msgspec
from nats.js import JetStreamContext
from nats.js.object_store import ObjectStore

from lakeshore.access import Access
from lakeshore.code import bucket, snapshot
from lakeshore.errors import (
    Invalid,
    LakeshoreError,
    SnapshotNotFound,
    SnapshotTooLarge,
    Unavailable,
)
from lakeshore.model import CodeInfo, CodeUse, now
from lakeshore.store import Store

log = logging.getLogger(__name__)

#: What a tar adds to its files' bytes, at most, per file (a header, a PAX header for long
#: names, padding) and in all (the end blocks): see :attr:`CodeService.max_upload`.
TAR_OVERHEAD_PER_FILE = 3 * 512
TAR_OVERHEAD = 20 * 512


#: How an org's jobs use its snapshots (:meth:`~lakeshore.store.jobs.JobQueries.code_use`
#: over the org's namespaces).
Usage = Callable[[str], Awaitable[dict[str, CodeUse]]]


async def _no_usage(org: str) -> dict[str, CodeUse]:
    return {}


def usage_in(store: Store, access: Access) -> Usage:
    """How an org's jobs use its snapshots, and how many of its queues name each as their
    code (a queue's code is kept as long as the queue names it)."""

    async def usage(org: str) -> dict[str, CodeUse]:
        namespaces = [n.name for n in await access.list_namespaces(org)]
        use = await store.code_use(namespaces)
        for q in await store.list_queues(namespaces):
            if q.code is not None:
                had = use.get(q.code, CodeUse())
                use[q.code] = msgspec.structs.replace(had, queues=had.queues + 1)
        return use

    return usage


async def require(code: CodeService | None, org: str, digests: set[str]) -> None:
    """What a submit or a queue names must be stored in the org (:meth:`CodeService.require`)
    — on a control plane that stores code at all.

    Raises:
        SnapshotNotFound: one is not stored.
        Unavailable: no code is stored here.
    """
    if not digests:
        return
    if code is None:
        raise Unavailable("this control plane stores no code: leave code out")
    await code.require(org, digests)


class CodeService:
    """Args:
    js: the control plane's JetStream context (it alone writes the buckets).
    max_bytes, max_files: the server's ``code_max_bytes`` and ``code_max_files``.
    replicas: JetStream replicas of each org's bucket.
    usage: how an org's jobs use its snapshots.
    retention_s: a snapshot no unfinished job and no queue names is deleted this long after
        its last use (its jobs' last event, else its upload).
    """

    def __init__(
        self,
        js: JetStreamContext,
        *,
        max_bytes: int,
        max_files: int,
        replicas: int = 1,
        usage: Usage = _no_usage,
        retention_s: float = 7 * 86400.0,
    ) -> None:
        self._js, self._replicas = js, replicas
        self._usage, self._retention_s = usage, retention_s
        self.max_bytes, self.max_files = max_bytes, max_files
        #: digests known stored, per org: a submit naming one asks NATS nothing
        self._known: dict[str, set[str]] = {}
        self._writes: dict[tuple[str, str], asyncio.Lock] = {}
        self._buckets: dict[str, ObjectStore] = {}

    @property
    def max_upload(self) -> int:
        """The longest upload body read: twice the bounds plus a tar's own bytes. One a
        little over the bounds is read whole, so that its refusal names its largest files;
        one far over them is refused by its length alone."""
        return 2 * (self.max_bytes + self.max_files * TAR_OVERHEAD_PER_FILE) + TAR_OVERHEAD

    async def show(self, org: str, digest: str) -> CodeInfo:
        """One stored snapshot.

        Raises:
            SnapshotNotFound: nothing is stored under ``digest`` in the org.
        """
        info = await bucket.stored(await self._bucket(org), digest)
        if info is None:
            raise SnapshotNotFound(
                f"code snapshot {digest} is not stored in this org: upload it with "
                f"`PUT …/code/{digest}` (the SDK and `lakeshore submit --code` do)"
            )
        self._known.setdefault(org, set()).add(digest)
        return info

    async def show_used(self, org: str, digest: str) -> CodeInfo:
        """:meth:`show` with how the org's jobs use it."""
        info = await self.show(org, digest)
        return _used(info, (await self._usage(org)).get(digest))

    async def list(self, org: str) -> list[CodeInfo]:
        """The org's snapshots with how its jobs use them, the most recently used first."""
        stored = await bucket.listed(await self._bucket(org))
        use = await self._usage(org)
        shown = [_used(info, use.get(info.digest)) for info in stored]
        return sorted(shown, key=_last_use, reverse=True)

    async def prune(self, now: datetime) -> list[tuple[str, str]]:
        """Delete the snapshots no unfinished job and no queue names whose last use is older
        than the retention; ``(org, digest)`` of each deleted."""
        deleted = []
        for org in await bucket.orgs(self._js):
            for info in await self.list(org):
                if (
                    info.unfinished
                    or info.queues
                    or now - _last_use(info) < timedelta(seconds=self._retention_s)
                ):
                    continue
                async with self._writes.setdefault((org, info.digest), asyncio.Lock()):
                    await bucket.delete(await self._bucket(org), info.digest)
                self._writes.pop((org, info.digest), None)
                self._known.get(org, set()).discard(info.digest)
                deleted.append((org, info.digest))
        return deleted

    async def put(
        self, org: str, digest: str, body: AsyncIterator[bytes], length: int | None
    ) -> tuple[CodeInfo, bool]:
        """Store an uploaded snapshot unless its digest is stored; ``(info, created)``.

        Raises:
            SnapshotTooLarge: over the bounds (before it is read whole when its length says
                so); nothing stored.
            Invalid: its bytes do not match ``digest``, or are not a snapshot; nothing stored.
        """
        if length is not None and length > self.max_upload:
            raise self._far_over(digest, f"a {length:,}-byte upload")
        data = await self._read(digest, body)
        size, files = snapshot.check(
            data, digest, max_bytes=self.max_bytes, max_files=self.max_files
        )
        # One write per digest at a time: two uploads of one snapshot store it once (the lock
        # stays while the snapshot does: a later one is not let in beside a waiting one).
        async with self._writes.setdefault((org, digest), asyncio.Lock()):
            store = await self._bucket(org)
            info = await bucket.stored(store, digest)
            created = info is None
            if info is None:
                info = await bucket.put(store, digest, data, size=size, files=files)
        self._known.setdefault(org, set()).add(digest)
        return info, created

    async def require(self, org: str, digests: set[str]) -> None:
        """Check that every digest a submit names is stored in the org.

        Raises:
            SnapshotNotFound: one is not (named), so nothing is submitted.
        """
        known = self._known.get(org, set())
        for digest in sorted(digests - known):
            try:
                await self.show(org, digest)
            except SnapshotNotFound:
                raise SnapshotNotFound(
                    f"code snapshot {digest} is not uploaded to this org: upload it first "
                    f"(`PUT /v1/namespaces/NS/code/{digest}`; the SDK's code= and "
                    "`lakeshore submit --code DIR` do it for you)"
                ) from None

    async def _read(self, digest: str, body: AsyncIterator[bytes]) -> bytes:
        parts: list[bytes] = []
        got = 0
        async for part in body:
            got += len(part)
            if got > self.max_upload:
                raise self._far_over(digest, f"an upload of more than {self.max_upload:,} bytes")
            parts.append(part)
        if not got:
            raise Invalid(f"code snapshot {digest}: the upload is empty; send the snapshot's tar")
        return b"".join(parts)

    def _far_over(self, digest: str, what: str) -> SnapshotTooLarge:
        return SnapshotTooLarge(
            f"code snapshot {digest} is {what}, far over code_max_bytes {self.max_bytes:,}; "
            f"list what need not ship in {snapshot.IGNORE_FILE} (gitignore syntax)"
        )

    async def _bucket(self, org: str) -> ObjectStore:
        store = self._buckets.get(org)
        if store is None:
            store = self._buckets[org] = await bucket.bucket(self._js, org, replicas=self._replicas)
        return store


def _used(info: CodeInfo, use: CodeUse | None) -> CodeInfo:
    if use is None:
        return info
    return msgspec.structs.replace(info, **msgspec.structs.asdict(use))


def _last_use(info: CodeInfo) -> datetime:
    return max(t for t in (info.last_used, info.stored_at, _EPOCH) if t is not None)


_EPOCH = datetime.fromtimestamp(0, UTC)


class Retention:
    """Prunes the snapshots every ``every_s`` (:meth:`CodeService.prune`) until closed."""

    def __init__(self, service: CodeService, every_s: float) -> None:
        self._task = asyncio.create_task(self._run(service, every_s), name="code-retention")

    async def _run(self, service: CodeService, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                for org, digest in await service.prune(now()):
                    log.info("code snapshot %s of org %s deleted: unused past retention",
                             digest, org)  # fmt: skip
            except (LakeshoreError, *bucket.NATS_ERRORS) as e:
                log.warning("code retention: %s", e)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


__all__ = ["CodeService", "Retention", "require", "usage_in"]
