"""Recorder: the one writer of invocation history, and the judge of fenced completion.

A loop task the Recorder owns fetches event messages from ``LS_EVENTS``, runs their events
through :mod:`lakeshore.fencing`, tells the result waiters, and hands the fenced batch to
its :class:`~lakeshore.actors.history.HistoryWriter`, which appends to the store behind
it (batches that queue up during an append go in one statement) and only then acks. A
crash loses nothing (unacked messages are redelivered and fenced again, to the same
outcome) and records nothing twice (the sequences of appended messages are written in
the append's transaction; a redelivered message is checked against them).

Fences live in memory for every unfinished invocation plus an LRU of finished ones. A miss
asks the store, unless the id is above the greatest id ever recorded (ids are time-ordered,
so a new invocation costs no lookup). They are rebuilt from the store at every start.

The inbox never waits for the loop: ``WaitFinished`` answers a future that resolves once
the invocation's terminal event is fenced (durable in JetStream; in the store moments
later), ``WaitRecorded`` one that resolves once a message is in the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import Struct

from lakeshore import fencing
from lakeshore.actors.base import Actor
from lakeshore.actors.compaction import Compact, HistoryCompaction, compact
from lakeshore.actors.history import Fenced, HistoryWriter
from lakeshore.bus.port import Delivery, Feed
from lakeshore.errors import Invalid, Unavailable
from lakeshore.faults import Faults
from lakeshore.fencing import Fence, Key
from lakeshore.model import (
    RESULT_DETAIL,
    RESULT_EVENTS,
    EventType,
    InvocationEvent,
    InvocationState,
    inline_result,
    now,
)
from lakeshore.store.port import InvocationHistory

if TYPE_CHECKING:
    from lakeshore.metrics import InvocationMetrics

log = logging.getLogger(__name__)

#: events/s is measured over this window (seconds).
RATE_WINDOW_S = 10.0
#: Results carried by outcome events kept in memory (at most ``INLINE_RESULT_BYTES`` each):
#: a result waiter is answered from here, without a read.
CARRIED_RESULTS = 4_096
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


class Settled(Struct, frozen=True):
    """Answered with an ``asyncio.Future[int]`` that resolves once every event message
    fenced so far is in the store (at once when none is waiting for its append)."""


class Knows(Struct, frozen=True):
    """Answered with whether the invocation is in the Recorder's memory (every invocation
    unfinished at start or seen since, within the LRU of finished ones): no store query."""

    namespace: str
    id: str


class Unfinished(Struct, frozen=True):
    """Answered with the invocation's :class:`~lakeshore.fencing.Fence` while it is
    unfinished (its claims say who holds which attempt), else ``None``: no store query."""

    namespace: str
    id: str


class HeldBy(Struct, frozen=True):
    """Answered with ``(invocation id, epoch)`` of every unfinished invocation of
    ``namespace`` whose newest open attempt (:func:`~lakeshore.fencing.open_claim`) ``worker``
    claimed: what it was running when it was lost. No store query."""

    namespace: str
    worker: str


class CarriedResult(Struct, frozen=True):
    """Answered with the :class:`~lakeshore.model.Result` that the accepted outcome event of
    attempt ``epoch`` carried, while it is among the :data:`CARRIED_RESULTS` newest, else
    ``None`` (then the store has it, or ``LS_RESULTS``). No store query."""

    namespace: str
    id: str
    epoch: int


class Unrecorded(Struct, frozen=True):
    """Answered with the ids among ``ids`` (of ``namespace``) whose ``submitted`` event is
    not recorded (asks the store for those not in memory, unless ``memory_only``: then
    those count as unrecorded)."""

    namespace: str
    ids: list[str]
    memory_only: bool = False


class GetStats(Struct, frozen=True):
    """Answered with :class:`RecorderStats`."""


RecorderMsg = (
    WaitFinished
    | WaitRecorded
    | Settled
    | Knows
    | Unfinished
    | HeldBy
    | CarriedResult
    | Unrecorded
    | GetStats
    | Compact
)


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
        compactor: the store's compaction of history (``Compact``; ``None``: refused).
        metrics: counts and times what is fenced (``None``: nothing is counted).
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
        compactor: HistoryCompaction | None = None,
        metrics: InvocationMetrics | None = None,
    ) -> None:
        self._store, self._feed = store, feed
        self._compactor = compactor
        self._metrics = metrics
        self._max_batch, self._fetch_timeout_s = max_batch, fetch_timeout_s
        self._cache_size, self._clock = finished_cache, clock
        self._writer = HistoryWriter(
            store, feed, self._recorded, prune_every_s=prune_every_s, faults=faults, clock=clock
        )
        self._writer_task: asyncio.Task[None] | None = None
        self._unfinished: dict[Key, Fence] = {}
        self._finished: OrderedDict[Key, Fence] = OrderedDict()
        #: (epoch, detail) of the newest accepted outcomes that carry their result
        self._carried: OrderedDict[Key, tuple[int | None, dict[str, Any]]] = OrderedDict()
        self._hwm: str | None = None
        self._waiters: dict[Key, list[asyncio.Future[Fence]]] = {}
        self._seq_waiters: list[tuple[int, asyncio.Future[int]]] = []
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False
        self._registered = 0
        self._events = self._stale = self._messages = self._appends = self._last_seq = 0
        #: highest ``LS_EVENTS`` sequence fenced (``_last_seq`` follows once appended)
        self._fenced_seq = 0
        self._rate: deque[tuple[float, int]] = deque()

    async def started(self) -> None:
        await self._halt_loop()
        await self._feed.ensure()
        floor = await self._writer.prune()
        await self._load()
        # Every message at or below the ack floor is in the store for good: a wait for one
        # of them (a read catching up after a restart, when nothing new has come) is over.
        self._last_seq = max(self._last_seq, floor or 0)
        self._fenced_seq = self._last_seq  # what was fenced but not appended comes again
        self._stopping = False
        self._writer_task = asyncio.create_task(self._writer.run(), name="recorder-history")
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
                return self._wait_recorded(seq)
            case Settled():
                return self._wait_recorded(self._fenced_seq)
            case Knows(namespace=ns, id=inv_id):
                return (ns, inv_id) in self._unfinished or (ns, inv_id) in self._finished
            case Unfinished(namespace=ns, id=inv_id):
                return self._unfinished.get((ns, inv_id))
            case HeldBy(namespace=ns, worker=worker):
                held = []
                for (key_ns, inv_id), fence in self._unfinished.items():
                    claim = fencing.open_claim(fence, fencing.ANY_EPOCH) if key_ns == ns else None
                    if claim is not None and claim[1] == worker:
                        held.append((inv_id, claim[0]))
                return held
            case CarriedResult(namespace=ns, id=inv_id, epoch=epoch):
                carried = self._carried.get((ns, inv_id))
                return inline_result(carried[1]) if carried and carried[0] == epoch else None
            case Unrecorded(namespace=ns, ids=ids, memory_only=memory_only):
                known = await self._known_keys({(ns, i) for i in ids}, stored=not memory_only)
                return [i for i in ids if not (f := known.get((ns, i))) or not f.submitted]
            case GetStats():
                return self._stats()
            case Compact():
                if self._compactor is None:
                    raise Invalid("this recorder does not compact history")
                return await compact(self._compactor, msg, now())

    # ---- the loop -------------------------------------------------------------------

    async def _run(self) -> None:
        held: list[Delivery] = []
        failures = 0
        while not self._stopping:
            try:
                held = held or await self._feed.fetch(self._max_batch, self._fetch_timeout_s)
                if held:
                    await self._record(held)
                    held = []
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception:
                # Nothing of a failed fetch is in memory yet: the same messages are fenced
                # again, never skipped (later ones would overtake them).
                failures += 1
                log.exception("recorder: attempt %d failed; retrying", failures)
                await asyncio.sleep(min(0.05 * 2**failures, 5.0))

    async def _halt_loop(self) -> None:
        task, self._loop = self._loop, None
        writer, self._writer_task = self._writer_task, None
        if task is None:
            return
        self._stopping = True
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # Let the appends of what was fenced be acked (else it is redelivered, and skipped).
        if not await self._writer.drain(STOP_TIMEOUT_S):
            log.warning("recorder: the history did not catch up within %g s", STOP_TIMEOUT_S)
        if writer is not None:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
        # What is left was never acked: redelivered to the next loop, fenced anew.
        self._writer.discard()

    async def _record(self, deliveries: list[Delivery]) -> None:
        fresh = await self._unrecorded(deliveries)
        if not fresh:
            return
        events = [ev for d in fresh for ev in on_server_clock(d)]
        fenced = fencing.fence_batch(events, await self._known(events))
        # Waiters are told before the append: the outcome is already durable (the events
        # in JetStream, the result in KV) and fencing is deterministic, so a redelivered
        # batch is fenced to the same outcome. History follows in the writer.
        self._commit(fenced)
        if self._metrics is not None:
            self._metrics.observe(fenced)
        self._fenced_seq = max(self._fenced_seq, *(d.seq for d in fresh))
        rows = [_row(ev) for ev in fenced.events]
        await self._writer.put(Fenced(rows, fresh, len(fenced.events), fenced.stale))

    def _resolve_finished(self, fenced: fencing.Fenced) -> None:
        for key in fenced.finished:
            for fut in self._waiters.pop(key, ()):
                if not fut.done():
                    fut.set_result(fenced.fences[key])

    async def _unrecorded(self, deliveries: list[Delivery]) -> list[Delivery]:
        """Drop messages already fenced (only a redelivery can be one): one still waiting
        for its append is acked with it, one already appended is acked now."""
        redelivered = [d for d in deliveries if d.delivered > 1]
        if not redelivered:
            return deliveries
        adopted = {d.seq for d in redelivered if self._writer.adopt(d)}
        ask = [d.seq for d in redelivered if d.seq not in adopted]
        done = await self._store.recorded_batches(ask) if ask else set()
        if done or adopted:
            count = len(done) + len(adopted)
            log.info("recorder: %d redelivered message(s) were already recorded", count)
        if done:
            acked = [d for d in redelivered if d.seq in done]
            await self._writer.put(Fenced([], acked, 0, 0, appended=True))
        return [d for d in deliveries if d.seq not in adopted and d.seq not in done]

    async def _known(self, events: list[InvocationEvent]) -> dict[Key, Fence]:
        return await self._known_keys({(ev.namespace, ev.invocation_id) for ev in events})

    async def _known_keys(self, keys: set[Key], *, stored: bool = True) -> dict[Key, Fence]:
        """The fences of ``keys`` that were ever recorded: from memory, else (``stored``)
        the store."""
        known: dict[Key, Fence] = {}
        lookup: list[str] = []
        for key in keys:
            fence = self._unfinished.get(key)
            if fence is None and (fence := self._finished.get(key)) is not None:
                self._finished.move_to_end(key)
            if fence is not None:
                known[key] = fence
            elif stored and self._hwm is not None and key[1] <= self._hwm:
                lookup.append(key[1])
        if lookup:
            found = await self._store.fences(lookup)
            known.update((k, f) for k, f in found.items() if k not in known)
        return known

    def _commit(self, fenced: fencing.Fenced) -> None:
        """Make a fenced batch the truth in memory, then tell its waiters."""
        for key, fence in fenced.fences.items():
            if fence.finished:
                self._unfinished.pop(key, None)
                self._finished[key] = fence
                self._finished.move_to_end(key)
            else:
                self._unfinished[key] = fence
        while len(self._finished) > self._cache_size:
            self._finished.popitem(last=False)
        for ev in fenced.events:
            if ev.type in RESULT_EVENTS and ev.detail and RESULT_DETAIL in ev.detail:
                self._carried[(ev.namespace, ev.invocation_id)] = (ev.epoch, ev.detail)
        while len(self._carried) > CARRIED_RESULTS:
            self._carried.popitem(last=False)
        top = max((k[1] for k in fenced.fences), default=None)
        if top is not None and (self._hwm is None or top > self._hwm):
            self._hwm = top
        if log.isEnabledFor(logging.INFO):
            _log_outcomes(fenced)
        self._resolve_finished(fenced)

    def _recorded(self, batches: list[Fenced]) -> None:
        """The writer appended and acked these: counters, then the sequence waiters."""
        now = self._clock()
        n = sum(b.events for b in batches)
        self._events += n
        self._stale += sum(b.stale for b in batches)
        self._messages += sum(len(b.deliveries) for b in batches)
        self._appends += any(not b.appended for b in batches)
        self._last_seq = max(self._last_seq, *(d.seq for b in batches for d in b.deliveries))
        self._rate.append((now, n))
        while self._rate[0][0] < now - RATE_WINDOW_S:
            self._rate.popleft()
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

    def _wait_recorded(self, seq: int) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self._last_seq >= seq:
            fut.set_result(self._last_seq)
        else:
            self._seq_waiters.append((seq, fut))
            self._writer.hurry()
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


def _log_outcomes(fenced: fencing.Fenced) -> None:
    """A line per job that ended otherwise than succeeded, and per stale completion; a
    success only at DEBUG (the history has it: at thousands a second, a line each cost the
    control plane a tenth of its CPU)."""
    quiet = not log.isEnabledFor(logging.DEBUG)
    for key in fenced.finished:
        fence = fenced.fences[key]
        succeeded = fence.terminal is InvocationState.SUCCEEDED
        if succeeded and quiet:
            continue
        level = logging.DEBUG if succeeded else logging.INFO
        log.log(level, "job %s/%s %s (attempt %d)", *key, fence.state.value, fence.started_epoch)
    for ev in fenced.events if fenced.stale else ():
        if ev.type is EventType.STALE and ev.detail:
            why = ev.detail.get("stale_type"), ev.epoch, ev.detail.get("stale_reason")
            log.info("job %s/%s: stale %s of attempt %s (%s)", ev.namespace, ev.invocation_id, *why)


def _row(ev: InvocationEvent) -> tuple[Any, ...]:
    return (ev.namespace, ev.queue, ev.invocation_id, ev.ts, ev.type.value, ev.attempt,
            ev.worker, ev.epoch, ev.detail)  # fmt: skip
