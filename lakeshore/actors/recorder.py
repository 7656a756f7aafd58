"""Recorder: the one writer of invocation history, and the judge of fenced completion.

A loop task the Recorder owns fetches event messages from ``LS_EVENTS``, runs their events
through :mod:`lakeshore.fencing`, appends all a fetch brought with *one*
``append_invocation_events`` call, and only then acks. A crash loses nothing (unacked
messages are redelivered) and records nothing twice (the sequences of appended messages are
written in the append's transaction; a redelivered message is checked against them).

Fences live in memory for every unfinished invocation plus an LRU of finished ones. A miss
asks the store, unless the id is above the greatest id ever recorded (ids are time-ordered,
so a new invocation costs no lookup). They are rebuilt from the store at every start.

The inbox never waits for the loop: ``WaitFinished`` answers a future that resolves once
the invocation's terminal event is in the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import msgspec
from msgspec import Struct

from lakeshore import fencing
from lakeshore.actors.base import Actor
from lakeshore.bus.port import Delivery, Feed
from lakeshore.errors import Unavailable
from lakeshore.faults import Faults
from lakeshore.fencing import Fence, Fenced, Key
from lakeshore.model import EventType, InvocationEvent
from lakeshore.store.port import InvocationHistory

log = logging.getLogger(__name__)

#: events/s is measured over this window (seconds).
RATE_WINDOW_S = 10.0
#: How long stopping waits for an append in progress (below the runtime's 5 s bound).
STOP_TIMEOUT_S = 3.0


class WaitFinished(Struct, frozen=True):
    """Answered with an ``asyncio.Future[Fence]`` that resolves once the invocation's end is
    recorded (the fence's ``started_epoch`` is then the accepted attempt's epoch). Cancel
    the future when you stop waiting."""

    namespace: str
    id: str


class WaitRecorded(Struct, frozen=True):
    """Answered with an ``asyncio.Future[int]`` that resolves once the event message with
    stream sequence ``seq`` (a publish's ``PubAck.seq``) or a later one is recorded."""

    seq: int


class Knows(Struct, frozen=True):
    """Answered with whether the invocation is in the Recorder's memory (every invocation
    unfinished at start or seen since, within the LRU of finished ones): no store query."""

    namespace: str
    id: str


class GetStats(Struct, frozen=True):
    """Answered with :class:`RecorderStats`."""


RecorderMsg = WaitFinished | WaitRecorded | Knows | GetStats


class RecorderStats(Struct, frozen=True, kw_only=True):
    #: events recorded since start (stale ones included)
    events: int
    #: events recorded as ``stale`` since start
    stale: int
    #: event messages recorded since start
    messages: int
    #: appends to the store since start (one per fetch)
    appends: int
    #: recorded events per second over the last 10 s
    events_per_s: float
    #: unfinished invocations held in memory
    unfinished: int
    #: highest ``LS_EVENTS`` sequence recorded
    last_seq: int


class Recorder(Actor[RecorderMsg]):
    """Records lifecycle events from ``feed`` into ``store``.

    Args:
        store: the row store (this actor is the only writer of ``invocation_events``).
        feed: the events stream.
        max_batch: event messages per fetch, hence per append.
        fetch_timeout_s: longest wait of one fetch; also bounds how long ``stop`` takes.
        finished_cache: how many finished invocations' fences stay in memory.
        prune_every_s: how often the record of appended messages is pruned.
        clock: monotonic seconds (injectable for tests).
    """

    name = "recorder"

    def __init__(
        self,
        store: InvocationHistory,
        feed: Feed,
        *,
        max_batch: int = 64,
        fetch_timeout_s: float = 1.0,
        finished_cache: int = 100_000,
        prune_every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        faults: Faults | None = None,
    ) -> None:
        self._store, self._feed = store, feed
        self._faults = faults or Faults()
        self._max_batch, self._fetch_timeout_s = max_batch, fetch_timeout_s
        self._cache_size, self._prune_every_s, self._clock = finished_cache, prune_every_s, clock
        self._unfinished: dict[Key, Fence] = {}
        self._finished: OrderedDict[Key, Fence] = OrderedDict()
        self._hwm: str | None = None
        self._waiters: dict[Key, list[asyncio.Future[Fence]]] = {}
        self._seq_waiters: list[tuple[int, asyncio.Future[int]]] = []
        self._loop: asyncio.Task[None] | None = None
        self._stopping = self._recording = False
        self._pruned_at = 0.0
        self._registered = 0
        self._events = self._stale = self._messages = self._appends = self._last_seq = 0
        self._rate: deque[tuple[float, int]] = deque()

    async def started(self) -> None:
        await self._halt_loop()
        await self._feed.ensure()
        await self._prune()
        await self._load()
        self._stopping = False
        self._loop = asyncio.create_task(self._run(), name="recorder-loop")
        log.info("recorder started: %d unfinished invocation(s)", len(self._unfinished))

    async def stopped(self) -> None:
        await self._halt_loop()
        await self._feed.close()
        for fut in [f for futs in self._waiters.values() for f in futs]:
            if not fut.done():
                fut.set_exception(Unavailable("the recorder stopped"))
        self._waiters.clear()

    async def handle(self, msg: RecorderMsg) -> Any:
        match msg:
            case WaitFinished(namespace=ns, id=inv_id):
                return await self._wait_finished((ns, inv_id))
            case WaitRecorded(seq=seq):
                fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
                if self._last_seq >= seq:
                    fut.set_result(self._last_seq)
                else:
                    self._seq_waiters.append((seq, fut))
                return fut
            case Knows(namespace=ns, id=inv_id):
                return (ns, inv_id) in self._unfinished or (ns, inv_id) in self._finished
            case GetStats():
                return self._stats()

    # ---- the loop -------------------------------------------------------------------

    async def _run(self) -> None:
        held: list[Delivery] = []
        failures = 0
        suspect = False
        while not self._stopping:
            try:
                if suspect:
                    # A record failed midway: memory may be ahead of the store.
                    await self._load()
                held = held or await self._feed.fetch(self._max_batch, self._fetch_timeout_s)
                if held:
                    self._recording = True
                    await self._record(held, recheck=suspect)
                    done, held, suspect = held, [], False
                    await self._feed.ack(done)
                    self._recording = False
                if self._clock() - self._pruned_at >= self._prune_every_s:
                    await self._prune()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception:
                # Held messages are retried, never skipped: later ones would overtake them.
                suspect = suspect or self._recording
                self._recording = False
                failures += 1
                log.exception("recorder: attempt %d failed; retrying", failures)
                await asyncio.sleep(min(0.05 * 2**failures, 5.0))

    async def _halt_loop(self) -> None:
        task, self._loop = self._loop, None
        if task is None:
            return
        self._stopping = True
        if not self._recording:
            task.cancel()
        try:
            # Let an append in progress be acked (else it is redelivered, and skipped).
            _, running = await asyncio.wait({task}, timeout=STOP_TIMEOUT_S)
            if running:
                log.warning("recorder: the loop did not stop within %g s", STOP_TIMEOUT_S)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _record(self, deliveries: list[Delivery], recheck: bool) -> None:
        fresh = await self._unrecorded(deliveries, recheck)
        events = [ev for d in fresh for ev in on_server_clock(d)]
        fenced = fencing.fence_batch(events, await self._known(events))
        rows = [_row(ev) for ev in fenced.events]
        # A result waiter is told before the append: the outcome is already durable (the
        # events in JetStream, the result in KV) and fencing is deterministic, so a failed
        # append re-fences the redelivered batch to the same outcome. History follows.
        self._resolve_finished(fenced)
        await self._store.append_invocation_events(rows, batches=[d.seq for d in fresh])
        self._faults.hit("recorder.appended")
        self._commit(fenced, deliveries)

    def _resolve_finished(self, fenced: Fenced) -> None:
        for key in fenced.finished:
            for fut in self._waiters.pop(key, ()):
                if not fut.done():
                    fut.set_result(fenced.fences[key])

    async def _unrecorded(self, deliveries: list[Delivery], recheck: bool) -> list[Delivery]:
        """Drop messages already appended: only a redelivery (or a retry) can be one."""
        again = [d.seq for d in deliveries if recheck or d.delivered > 1]
        if not again:
            return deliveries
        done = await self._store.recorded_batches(again)
        if done:
            log.info("recorder: %d redelivered message(s) were already recorded", len(done))
        return [d for d in deliveries if d.seq not in done]

    async def _known(self, events: list[InvocationEvent]) -> dict[Key, Fence]:
        known: dict[Key, Fence] = {}
        lookup: list[str] = []
        for key in {(ev.namespace, ev.invocation_id) for ev in events}:
            fence = self._unfinished.get(key)
            if fence is None and (fence := self._finished.get(key)) is not None:
                self._finished.move_to_end(key)
            if fence is not None:
                known[key] = fence
            elif self._hwm is not None and key[1] <= self._hwm:
                lookup.append(key[1])
        if lookup:
            stored = await self._store.fences(lookup)
            known.update((k, f) for k, f in stored.items() if k not in known)
        return known

    def _commit(self, fenced: Fenced, deliveries: list[Delivery]) -> None:
        """Make a recorded batch visible: fences, counters, then the waiters."""
        for key, fence in fenced.fences.items():
            if fence.finished:
                self._unfinished.pop(key, None)
                self._finished[key] = fence
                self._finished.move_to_end(key)
            else:
                self._unfinished[key] = fence
        while len(self._finished) > self._cache_size:
            self._finished.popitem(last=False)
        top = max((k[1] for k in fenced.fences), default=None)
        if top is not None and (self._hwm is None or top > self._hwm):
            self._hwm = top
        now, n = self._clock(), len(fenced.events)
        self._events, self._stale = self._events + n, self._stale + fenced.stale
        self._messages, self._appends = self._messages + len(deliveries), self._appends + 1
        self._last_seq = max(self._last_seq, *(d.seq for d in deliveries))
        self._rate.append((now, n))
        while self._rate[0][0] < now - RATE_WINDOW_S:
            self._rate.popleft()
        if log.isEnabledFor(logging.INFO):
            _log_outcomes(fenced)
        self._resolve_finished(fenced)  # waiters that came during the append
        waiting = []
        for seq, seq_fut in self._seq_waiters:
            if seq <= self._last_seq and not seq_fut.done():
                seq_fut.set_result(self._last_seq)
            elif not seq_fut.done():
                waiting.append((seq, seq_fut))
        self._seq_waiters = waiting

    async def _load(self) -> None:
        self._unfinished = await self._store.unfinished_fences()
        self._finished.clear()
        self._hwm = await self._store.max_invocation_id()

    async def _prune(self) -> None:
        ack_floor, last_seq = await self._feed.progress()
        await self._store.prune_recorded_batches(ack_floor, last_seq)
        self._pruned_at = self._clock()

    # ---- the inbox ------------------------------------------------------------------

    async def _wait_finished(self, key: Key) -> asyncio.Future[Fence]:
        fut: asyncio.Future[Fence] = asyncio.get_running_loop().create_future()
        fence = self._unfinished.get(key) or self._finished.get(key)
        if fence is not None and fence.finished:
            fut.set_result(fence)
            return fut
        # Registered before the store is asked: a finish committed meanwhile resolves it.
        self._waiters.setdefault(key, []).append(fut)
        self._registered += 1
        if self._registered >= max(64, len(self._waiters)):
            self._sweep_waiters()
        if fence is None and self._hwm is not None and key[1] <= self._hwm:
            stored = (await self._store.fences([key[1]])).get(key)
            if stored is not None and stored.finished and not fut.done():
                fut.set_result(stored)
        return fut

    def _sweep_waiters(self) -> None:
        """Forget futures their askers gave up on (amortised: runs once per N waits)."""
        self._registered = 0
        for key in list(self._waiters):
            live = [f for f in self._waiters[key] if not f.done()]
            if live:
                self._waiters[key] = live
            else:
                del self._waiters[key]

    def _stats(self) -> RecorderStats:
        now = self._clock()
        recent = sum(n for t, n in self._rate if t >= now - RATE_WINDOW_S)
        return RecorderStats(
            events=self._events, stale=self._stale, messages=self._messages,
            appends=self._appends, events_per_s=round(recent / RATE_WINDOW_S, 1),
            unfinished=len(self._unfinished), last_seq=self._last_seq,
        )  # fmt: skip


#: A batch whose newest event is further than this from the time the server stored it was
#: stamped by a skewed clock (publishing takes milliseconds): it is moved onto the server's.
SKEW_TOLERANCE = timedelta(seconds=2)


def on_server_clock(d: Delivery) -> list[InvocationEvent]:
    """A delivery's events with times on the server's clock.

    Daemons stamp events with their own clock, which may be off by minutes; the times a job
    shows, and the stats' windows, must all be the server's. The batch is shifted by the
    distance between its newest event and the moment the server stored it, which keeps the
    order and the durations within the batch.
    """
    events = d.batch.events
    if d.stored_at is None or not events:
        return events
    offset = d.stored_at - max(ev.ts for ev in events)
    if abs(offset) <= SKEW_TOLERANCE:
        return events
    return [msgspec.structs.replace(ev, ts=ev.ts + offset) for ev in events]


def _log_outcomes(fenced: Fenced) -> None:
    for key in fenced.finished:
        fence = fenced.fences[key]
        log.info("job %s/%s %s (attempt %d)", *key, fence.state.value, fence.started_epoch)
    for ev in fenced.events if fenced.stale else ():
        if ev.type is EventType.STALE and ev.detail:
            why = ev.detail.get("stale_type"), ev.epoch, ev.detail.get("stale_reason")
            log.info("job %s/%s: stale %s of attempt %s (%s)", ev.namespace, ev.invocation_id, *why)


def _row(ev: InvocationEvent) -> tuple[Any, ...]:
    return (ev.namespace, ev.queue, ev.invocation_id, ev.ts, ev.type.value, ev.attempt,
            ev.worker, ev.epoch, ev.detail)  # fmt: skip
