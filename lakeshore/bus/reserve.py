"""Room kept in JetStream's store for the control plane's own writes.

nats-server refuses a write once its store is *over* its limit, not when the write would
take it over (``server/jetstream.go``: ``limitsExceeded`` asks ``wouldExceedLimits(storeType,
0)``): the write that crosses the limit is stored, and every write after it is refused —
the events that record work, the leader's lease, the state log — until room comes back. A
submit is answered once its work is stored, so that work stays: it was accepted.

So the control plane keeps room aside: the stream ``LS_RESERVE`` holds :data:`RESERVE_BYTES`
of filler. The first time one of its writes is refused for want of room, it deletes the
stream, so that its own writes go on in that room, and refuses new work (507
``insufficient_storage``) while the reserve is out. Every ``retry_s`` it puts the filler back;
once that is stored and a small write after it is accepted too (the store is still under its
limit), work is admitted again. No tenant's grant reaches the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import nats.errors
import nats.js.errors as jse
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext

from lakeshore.bus import subjects
from lakeshore.errors import InsufficientStorage

log = logging.getLogger(__name__)

#: Room kept aside (bytes): the events of a few thousand invocations, a lease's renewals.
RESERVE_BYTES = 4 * 1024 * 1024
#: Largest filler message (bytes; below NATS's default max_payload of 1 MiB).
CHUNK_BYTES = 512 * 1024
#: Pause between two tries of putting the filler back (seconds).
RETRY_S = 1.0
#: JetStream's error code when its store is full ("insufficient resources").
ERR_INSUFFICIENT_RESOURCES = 10023


def store_full(exc: object) -> bool:
    """Whether ``exc`` is JetStream refusing a write because its store is full."""
    return isinstance(exc, jse.APIError) and exc.err_code == ERR_INSUFFICIENT_RESOURCES


class _StillFull(Exception):
    pass


class StoreReserve:
    """Args:
    js: the control plane's JetStream context.
    replicas: the reserve stream's replicas (those of every Lakeshore stream).
    size: bytes kept aside.
    retry_s: pause between two tries of putting them back (seconds).
    """

    def __init__(
        self,
        js: JetStreamContext,
        *,
        replicas: int = 1,
        size: int = RESERVE_BYTES,
        retry_s: float = RETRY_S,
    ) -> None:
        self._js, self._replicas, self._retry_s = js, replicas, retry_s
        self._chunks = [CHUNK_BYTES] * (size // CHUNK_BYTES) + (
            [size % CHUNK_BYTES] if size % CHUNK_BYTES else []
        )
        self._size = size
        self._out = False
        self._task: asyncio.Task[None] | None = None

    @property
    def out(self) -> bool:
        """Whether the reserve is given up (the store was found full; work is refused)."""
        return self._out

    async def arm(self) -> None:
        """Make the stream and put the filler in, unless it is there; a store already full
        gives the reserve up at once (work is refused until room comes back)."""
        try:
            info = await self._js.stream_info(subjects.RESERVE_STREAM)
        except jse.NotFoundError:
            info = await self._js.add_stream(self._config())
        if info.state.bytes >= self._size:
            return
        try:
            await self._put_back()
        except _StillFull:
            self.give_up()

    def _config(self) -> StreamConfig:
        return StreamConfig(
            name=subjects.RESERVE_STREAM,
            subjects=[f"{subjects.RESERVE_PREFIX}.>"],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            discard=DiscardPolicy.OLD,
            max_msgs_per_subject=len(self._chunks),
            num_replicas=self._replicas,
        )

    def give_up(self) -> None:
        """A write was refused for want of room: drop the filler (the control plane's own
        writes go on in its room), refuse work, and put it back once room has come back."""
        if self._out:
            return
        self._out = True
        log.warning(
            "JetStream's store is full: the %d MiB kept for the control plane's own writes "
            "are given to them, and new work is refused (507 insufficient_storage) until "
            "room comes back (tried every %g s)",
            self._size // (1024 * 1024), self._retry_s,
        )  # fmt: skip
        self._task = asyncio.ensure_future(self._regain())

    def check(self, what: str) -> None:
        """Raise while the reserve is out.

        Raises:
            InsufficientStorage: JetStream's store is full; names what was refused.
        """
        if self._out:
            raise InsufficientStorage(
                what,
                "NATS JetStream's store is full (insufficient resources): new work is "
                "refused until room comes back — run or drop pending work, free space "
                "under the NATS store, or raise its max_file_store",
            )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _regain(self) -> None:
        tries = 0
        while True:
            try:
                if tries:
                    await self._put_back()
                    self._out = False
                    log.info("room came back in JetStream's store: work is admitted again")
                    return
                await self._drop()
            except (_StillFull, nats.errors.Error, jse.Error, TimeoutError, OSError) as e:
                # Still full; or the filler's write failed on the disk itself (nats-server
                # then keeps that stream's write error until it restarts): dropped again.
                log.debug("the reserve could not be put back now (%r): tried again", e)
                await self._drop_quietly()
            tries += 1
            await asyncio.sleep(self._retry_s)

    async def _put_back(self) -> None:
        """Publish the filler between two probes that say whether the store is under its
        limit (before: is there room at all; after: did the filler take it over). A filler
        that took it over is dropped at once: the writes refused meanwhile are the few of
        those round trips.

        Raises:
            _StillFull: a write was refused for want of room.
        """
        probe = subjects.reserve_subject("probe")
        try:
            await self._js.add_stream(self._config())  # answers the stream if it is there
            await self._js.publish(probe, b"")
            await self._js.purge_stream(subjects.RESERVE_STREAM)
            for size in self._chunks:
                await self._js.publish(subjects.reserve_subject(), bytes(size))
            await self._js.publish(probe, b"")
        except jse.APIError as e:
            if store_full(e):
                raise _StillFull from e
            raise

    async def _drop(self) -> None:
        """Delete the stream: its files go at once (a purge by subject frees the disk only
        as blocks are compacted), and with them any write error it kept."""
        with contextlib.suppress(jse.NotFoundError):
            await self._js.delete_stream(subjects.RESERVE_STREAM)

    async def _drop_quietly(self) -> None:
        try:
            await self._drop()
        except (nats.errors.Error, jse.Error, TimeoutError, OSError) as e:
            log.debug("the reserve could not be dropped now (%r)", e)
