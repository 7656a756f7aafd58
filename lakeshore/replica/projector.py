"""The projector: applies the state stream to this replica's DuckDB, in order, exactly once.

A standby runs one: it reads ``LS_STATE`` from the sequence after the one its file has
applied (``log_positions``) and applies each batch of images together with the batch's
last sequence, in one transaction: a crash re-reads at most what was not committed, and
nothing is applied twice. A new leader stops it and reads what its file lacks up to its
epoch record directly (:meth:`Projector.catch_up`): a leader's own writes are applied as
they are committed (:mod:`lakeshore.store.writes`, through :class:`LeaderWrites`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import msgspec

from lakeshore.bus.connection import check_cancelled
from lakeshore.bus.state import StateLog, StateTail, last_sequence
from lakeshore.errors import NotLeader, Unavailable
from lakeshore.model.images import Image, decode
from lakeshore.store import Store
from lakeshore.store.images import STATE_LOG

log = logging.getLogger(__name__)

#: How long a leader's write waits for its images to come back applied (seconds).
APPLY_TIMEOUT_S = 10.0
#: How long a leader's next write waits for its file to catch up with the stream after a
#: write whose fate the stream did not tell (seconds).
CATCH_UP_BEFORE_WRITE_S = 2.0
#: Pause after a failed read (NATS away, the stream electing its leader), and after a
#: failed apply (a full disk), before trying again (seconds).
_RETRY_S = 1.0
#: Pause before a catch-up asks again (direct reads load no meta leader: soon).
_CATCH_UP_RETRY_S = 0.1


class Projector:
    """Keeps ``store`` up with ``LS_STATE``; :meth:`applied` waits for a sequence."""

    def __init__(self, store: Store, tail: StateTail, js: object) -> None:
        self._store, self._tail, self._js = store, tail, js
        #: the last sequence applied to the file
        self.position = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Follow the stream from the file's position (if not following it already)."""
        if self._task is not None:
            return
        self.position = await self._store.log_position(STATE_LOG) or 0
        self._task = asyncio.create_task(self._run(), name="state-projector")

    async def catch_up(self, seq: int | None = None, timeout_s: float = APPLY_TIMEOUT_S) -> None:
        """Stop following the stream; apply what it holds up to ``seq`` (its end now when
        ``None``), read directly (:meth:`StateTail.read_stored`): a new leader catches up
        to its epoch record while the cluster may still be electing, and a consumer would
        wait for the JetStream meta leader.

        Raises:
            Unavailable: not done within ``timeout_s``.
        """
        await self.stop()
        # A leader's file moves on with its own commits, past what the projector applied.
        self.position = await self._store.log_position(STATE_LOG) or 0
        try:
            async with asyncio.timeout(timeout_s):
                if seq is None:
                    seq = await last_sequence(self._js)
                self._follow_younger(seq)
                said = False
                while self.position < seq:
                    try:
                        batch = await self._tail.read_stored(self.position)
                    except Unavailable as e:
                        if not said:
                            log.info("state catch-up: %s; asking again", e)
                            said = True
                        await asyncio.sleep(_CATCH_UP_RETRY_S)
                        continue
                    if not batch:  # a replica that lags answered: ask again
                        await asyncio.sleep(_CATCH_UP_RETRY_S)
                        continue
                    await self._apply(batch)
        except TimeoutError:
            raise Unavailable(
                f"the state log was not applied up to {seq} within {timeout_s:g}s "
                f"(applied up to {self.position})"
            ) from None
        except Unavailable:
            raise
        except Exception as e:  # the stream's end not read (nats-py's errors)
            raise Unavailable(f"the state log cannot be read: {e or type(e).__name__}") from e

    def _follow_younger(self, last: int) -> None:
        if last < self.position:
            # The stream is younger than the file (its NATS store was lost or replaced):
            # follow the new stream from its start; the leader seeds it from its file.
            log.warning(
                "the state stream ends at %d but this file applied up to %d: "
                "following the stream from its start",
                last,
                self.position,
            )
            self.position = 0

    async def stop(self) -> None:
        """Stop following the stream (:meth:`start` follows it again from the file)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._tail.close()
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(Unavailable("the state projector stopped"))
        self._waiters.clear()

    async def applied(self, seq: int, timeout_s: float = APPLY_TIMEOUT_S) -> None:
        """Return once every message up to ``seq`` is applied to the file.

        Raises:
            Unavailable: not within ``timeout_s``, or the projector stopped.
        """
        if self.position >= seq:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, waiter))
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
        except TimeoutError:
            raise Unavailable(
                f"the state log's sequence {seq} was not applied within {timeout_s:g}s "
                f"(applied up to {self.position})"
            ) from None
        finally:
            if not waiter.done():
                waiter.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove((seq, waiter))

    async def _run(self) -> None:
        try:
            self._follow_younger(await last_sequence(self._js))
        except Exception as e:  # NATS away: follow from the file; the loop retries reads
            log.warning("state projector: cannot read the stream's end (%s)", e)
        failed = 0
        while True:
            check_cancelled()  # stopped by a cancellation, which nats-py may swallow
            try:
                batch = await self._tail.read(self.position)
            except Exception as e:  # a loop that must outlive any outage: retried
                failed += 1
                if failed == 1 or failed % 10 == 0:  # said once, then every ~10 s
                    log.warning("state projector: cannot read the stream (%d tries): %s", failed, e)
                await self._tail.close()
                await asyncio.sleep(_RETRY_S)
                continue
            if failed:
                log.info("state projector: reading the stream again after %d tries", failed)
                failed = 0
            if batch:
                await self._apply(batch)

    async def _apply(self, batch: list[tuple[int, bytes]]) -> None:
        """Apply one batch read from the stream (with its last sequence) and wake the
        waiters it satisfies; a refused apply is tried again until it lands."""
        rows = [image for _, data in batch if data and (image := _image(data)) is not None]
        last = batch[-1][0]
        while True:
            try:
                await self._store.apply_images(rows, last)
                break
            except Unavailable as e:
                log.error("state projector: the store refused a batch: %s", e)
            except Exception:  # a bug: said loudly, and tried again rather than dying
                log.exception("state projector: applying up to %d failed", last)
            await asyncio.sleep(_RETRY_S)
        self.position = last
        for seq, waiter in self._waiters:
            if seq <= last and not waiter.done():
                waiter.set_result(None)


def _image(data: bytes) -> Image | None:
    try:
        return decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        log.error("state projector: skipping a message that is not a row image: %s", e)
        return None


async def seed(store: Store, state: StateLog) -> int:
    """Publish every row of this file to a state stream that holds no row yet (the file
    is from before the stream, or the stream's NATS store was lost); how many rows."""
    if await state.holds_rows():
        return 0
    rows = await store.all_images()
    if rows:
        log.warning("the state stream holds no row: seeding it with this file's %d", len(rows))
        await store.apply_images([], await state.publish(rows))
    return len(rows)


class LeaderWrites:
    """The store's log while this replica leads: its batches go to the state stream,
    fenced by the epoch. The projector is paused meanwhile (the store applies its own
    writes as it commits them); after a batch whose fate the stream did not tell (a
    timeout: some images may have landed), the file catches up before the next one."""

    def __init__(self, state: StateLog, projector: Projector) -> None:
        self._state, self._projector = state, projector
        self._unsure = False

    async def ready(self) -> None:
        if not self._unsure:
            return
        try:
            # Bounded: while the stream cannot answer (no quorum, an election), every
            # write fails at once rather than each waiting out a long catch-up.
            await self._projector.catch_up(timeout_s=CATCH_UP_BEFORE_WRITE_S)
        except Exception as e:
            raise Unavailable(
                "the state log did not say whether the last write was taken, and cannot "
                f"be read now ({e or type(e).__name__}); retry (with the same idempotency keys)"
            ) from e
        self._unsure = False

    async def append(self, images: list[Image]) -> int:
        try:
            return await self._state.publish(images)
        except NotLeader:
            raise
        except BaseException:
            self._unsure = True
            raise


class StandbyWrites:
    """The store's log while this replica does not lead: every write is refused."""

    def __init__(self, leader_url: str | None = None) -> None:
        self.leader_url = leader_url

    async def ready(self) -> None:
        return None

    async def append(self, images: list[Image]) -> int:
        raise NotLeader("this control plane is a standby", self.leader_url)
