"""The Recorder's writer: appends fenced batches to DuckDB behind the fencing, then acks.

The Recorder fences each fetch and tells its waiters at once; the history follows here, so
a DuckDB append never holds up the next fetch. A DuckDB commit costs milliseconds of the
store's thread whatever its size, so fenced batches gather for up to :data:`LINGER_S`
(less when someone waits for the history: :meth:`HistoryWriter.hurry`) and are appended
together (one statement, one transaction): few, large appends. Only after its append
commits is an event message acked: a crash loses nothing (the unacked messages are
redelivered and fenced again, to the same outcome) and records nothing twice (a message's
sequence is stored in the append's transaction).

A failed append is retried, never skipped — later batches would overtake it — after asking
the store whether it committed after all. While appends fail, the queue fills to its bound
and the Recorder's fetching waits (:meth:`HistoryWriter.put`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakeshore.bus.port import Delivery, Feed
from lakeshore.faults import Faults
from lakeshore.store.port import InvocationHistory

log = logging.getLogger(__name__)

#: Rows waiting for their append, at most (the Recorder's fetching waits beyond it).
MAX_QUEUED_ROWS = 20_000
#: Rows per append, at most (more queued are appended by the next one).
MAX_APPEND_ROWS = 10_000
#: How long fenced batches gather before an append, unless hurried (seconds).
LINGER_S = 0.05
#: Longest pause between retries of a failing append (seconds).
MAX_RETRY_S = 5.0


@dataclass(slots=True)
class Fenced:
    """One fetch, fenced: its rows and the messages that carried them."""

    rows: list[tuple[Any, ...]]
    deliveries: list[Delivery]
    #: counts for the Recorder's stats once appended
    events: int
    stale: int
    #: redeliveries of these messages that came while they waited: acked with them
    again: list[Delivery] = field(default_factory=list)
    #: redeliveries found appended already: only acked, in their turn
    appended: bool = False


class HistoryWriter:
    """Appends what the Recorder fenced, in order, and acks it; runs until cancelled.

    Args:
        store: where history goes.
        feed: where the messages are acked.
        on_recorded: called after each ack with the batches it appended.
        prune_every_s: how often the record of appended messages is pruned.
    """

    def __init__(
        self,
        store: InvocationHistory,
        feed: Feed,
        on_recorded: Callable[[list[Fenced]], None],
        *,
        prune_every_s: float = 60.0,
        faults: Faults | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store, self._feed, self._on_recorded = store, feed, on_recorded
        self._faults = faults or Faults()
        self._prune_every_s, self._clock = prune_every_s, clock
        self._queue: deque[Fenced] = deque()
        self._rows = 0
        #: sequence → its queued batch, until acked
        self._inflight: dict[int, Fenced] = {}
        self._changed = asyncio.Condition()
        self._hurry = asyncio.Event()
        self._pruned_at = clock()

    @property
    def queued_rows(self) -> int:
        return self._rows

    async def put(self, batch: Fenced) -> None:
        """Queue a fenced batch for its append; waits while the queue is at its bound."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._rows < MAX_QUEUED_ROWS)
            self._queue.append(batch)
            self._rows += len(batch.rows)
            for d in batch.deliveries:
                self._inflight[d.seq] = batch
            if self._rows >= MAX_APPEND_ROWS:
                self._hurry.set()
            self._changed.notify_all()

    def adopt(self, delivery: Delivery) -> bool:
        """Take a redelivery of a message still waiting for its append (acked with it).

        Returns:
            Whether it was one; ``False``: the message is not queued here (appended and
            acked already, or never seen).
        """
        batch = self._inflight.get(delivery.seq)
        if batch is None:
            return False
        batch.again.append(delivery)
        return True

    def discard(self) -> None:
        """Forget everything queued (the writer is stopped; nothing of it was acked)."""
        self._queue.clear()
        self._inflight.clear()
        self._rows = 0

    def hurry(self) -> None:
        """Append what is queued now: someone waits for it to be in the history."""
        self._hurry.set()

    async def drain(self, timeout_s: float) -> bool:
        """Wait until everything queued is appended; whether it was, within ``timeout_s``."""
        self.hurry()
        try:
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: not self._queue)
            return True
        except TimeoutError:
            return False

    async def run(self) -> None:
        """Append and ack until cancelled."""
        failures = 0
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: bool(self._queue))
            if not self._hurry.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(LINGER_S):
                        await self._hurry.wait()
            self._hurry.clear()
            taken = self._take()
            try:
                await self._append(taken, recheck=failures > 0)
            except asyncio.CancelledError:
                raise
            except Exception:
                failures += 1
                log.exception("recorder: append attempt %d failed; retrying", failures)
                await asyncio.sleep(min(0.05 * 2**failures, MAX_RETRY_S))
                continue
            failures = 0
            await self._done(taken)
            if self._clock() - self._pruned_at >= self._prune_every_s:
                await self.prune()

    async def prune(self) -> int | None:
        """Forget the sequences of messages acked for good (JetStream will not redeliver);
        answers the ack floor (``None`` when it could not be read)."""
        ack_floor = None
        try:
            ack_floor, last_seq = await self._feed.progress()
            await self._store.prune_recorded_batches(ack_floor, last_seq)
        except Exception as e:
            log.warning("recorder: pruning the record of appended messages failed: %s", e)
        self._pruned_at = self._clock()
        return ack_floor

    def _take(self) -> list[Fenced]:
        """The oldest queued batches, up to :data:`MAX_APPEND_ROWS` rows (at least one);
        they stay queued until appended."""
        taken, rows = [], 0
        for batch in self._queue:
            if taken and rows + len(batch.rows) > MAX_APPEND_ROWS:
                break
            taken.append(batch)
            rows += len(batch.rows)
        return taken

    async def _append(self, taken: Sequence[Fenced], recheck: bool) -> None:
        seqs = [d.seq for b in taken if not b.appended for d in b.deliveries]
        if not seqs:
            return
        if recheck and await self._store.recorded_batches(seqs[:1]):
            log.info("recorder: the failed append had committed after all")
            return
        rows = [row for b in taken for row in b.rows]
        await self._store.append_invocation_events(rows, batches=seqs)
        self._faults.hit("recorder.appended")

    async def _done(self, taken: list[Fenced]) -> None:
        try:
            await self._feed.ack([d for b in taken for d in (*b.deliveries, *b.again)])
        except Exception as e:
            # Appended: a message whose ack was lost comes back and is recognised.
            log.warning("recorder: acking appended messages failed: %s", e)
        async with self._changed:
            for b in taken:
                self._queue.popleft()
                self._rows -= len(b.rows)
                for d in b.deliveries:
                    self._inflight.pop(d.seq, None)
            self._changed.notify_all()
        self._on_recorded(taken)


__all__ = ["Fenced", "HistoryWriter"]
