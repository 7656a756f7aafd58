"""An in-memory twin of the bus port, for fast actor tests (the dramatiq StubBroker pattern).

:class:`InMemoryBus` and its :meth:`~InMemoryBus.feed` pass the same contract tests
(``tests/bus/test_contract.py``) as :class:`~lakeshore.bus.nats.NatsBus` and
:class:`~lakeshore.bus.events.EventFeed` against a real nats-server. What JetStream does and
this does not: ack waits, redelivery on their expiry, max-deliver, persistence, clustering.

Beyond the port, tests get the daemons' side of the bus: :meth:`InMemoryBus.claim` and
:meth:`InMemoryBus.ack` stand in for a daemon's pull and ack, :meth:`InMemoryBus.put_result`
for its write to ``LS_RESULTS``, and ``nudges``, ``controls`` and ``events`` record what the
control plane sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from lakeshore.bus import codec, subjects
from lakeshore.bus.port import Delivery, Published, QueueCounts
from lakeshore.errors import Unavailable
from lakeshore.model import DaemonControl, EventBatch, Result, now

#: A repeated msg_id is a duplicate for this long (seconds), as ``NatsBus`` configures it.
DUPLICATE_WINDOW_S = 600.0


@dataclass(slots=True)
class _Message:
    level: int
    payload: bytes
    #: claimed by a "daemon" and not yet acked (JetStream: num_ack_pending)
    delivered: bool = False


@dataclass(slots=True)
class _Stream:
    """One queue's WorkQueue stream and its per-level consumers, folded into one."""

    max_depth: int | None
    #: whether it takes publishes (a queue draining or archived: no)
    admitting: bool = True
    #: seq -> message; dicts keep insertion order, which is seq order
    messages: dict[int, _Message] = field(default_factory=dict)
    last_seq: int = 0
    #: msg_id -> (seq, when first seen)
    msg_ids: dict[str, tuple[int, float]] = field(default_factory=dict)


@dataclass(slots=True)
class _EventLog:
    """``LS_EVENTS`` and its one durable ``recorder`` consumer."""

    #: (namespace, queue, batch) per message; seq = index + 1
    messages: list[tuple[str, str, EventBatch]] = field(default_factory=list)
    #: deliverable now: never handed out, or handed back by redeliver()
    ready: set[int] = field(default_factory=set)
    #: handed out and not acked
    outstanding: set[int] = field(default_factory=set)
    acked: set[int] = field(default_factory=set)
    delivered: dict[int, int] = field(default_factory=dict)
    #: when each message was stored (the server's clock: this process's)
    stored_at: dict[int, datetime] = field(default_factory=dict)
    ack_floor: int = 0
    #: created lazily: it binds to the running loop on first use
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)


class InMemoryBus:
    """The :class:`~lakeshore.bus.port.Bus` port in memory, with the daemons' side as hooks.

    Args:
        clock: monotonic seconds, for the duplicate window (inject one to test expiry).

    Attributes:
        nudges: every ``(namespace, queue)`` nudged, in order.
        controls: every ``(namespace, worker_id, control)`` sent, in order.
        events: every ``(namespace, queue, batch)`` published, in order.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._log = _EventLog()
        self._results: dict[str, bytes] = {}
        self._closed = False
        self.nudges: list[tuple[str, str]] = []
        self.controls: list[tuple[str, str, DaemonControl]] = []
        #: log subject -> ``(headers, body)`` of each chunk published there, in order
        self.logs: dict[str, list[tuple[dict[str, str], bytes]]] = {}
        self._log_ids: set[str] = set()

    @property
    def events(self) -> list[tuple[str, str, EventBatch]]:
        return self._log.messages

    @property
    def connected(self) -> bool:
        return not self._closed

    async def close(self) -> None:
        self._closed = True

    def feed(self) -> InMemoryFeed:
        """The events this bus received, as the Recorder drains them (one shared consumer)."""
        return InMemoryFeed(self)

    # -- the Bus port ------------------------------------------------------------------------

    async def ensure_queue(
        self,
        namespace: str,
        queue: str,
        *,
        levels: int,
        max_depth: int | None,
        admitting: bool = True,
    ) -> None:
        """Create the queue's stream, or update its ``max_depth`` and whether it takes
        publishes (nothing stored is lost)."""
        self._check()
        stream = self._streams.setdefault((namespace, queue), _Stream(max_depth))
        stream.max_depth, stream.admitting = max_depth, admitting

    async def delete_queue(self, namespace: str, queue: str) -> None:
        self._check()
        self._streams.pop((namespace, queue), None)

    async def queue_counts(self, namespace: str, queue: str, *, levels: int) -> QueueCounts:
        self._check()
        stream = self._streams.get((namespace, queue))
        if stream is None:
            return QueueCounts(0, 0, 0)
        # As NatsBus sums its per-level consumers: levels outside 0..levels-1 are stored
        # (depth) but neither pending nor running.
        counted = [m for m in stream.messages.values() if m.level < levels]
        running = sum(m.delivered for m in counted)
        return QueueCounts(len(counted) - running, running, len(stream.messages))

    async def queue_backlog(self, namespace: str, queue: str, *, levels: int) -> int:
        return (await self.queue_counts(namespace, queue, levels=levels)).pending

    async def publish_work(
        self, namespace: str, queue: str, items: list[tuple[bytes, int, str]]
    ) -> list[Published | None]:
        """Store ``(payload, level, msg_id)`` items; ``None`` for each refused as full.

        Raises:
            Unavailable: the queue's stream does not exist or takes nothing (its queue is
                draining or archived); NATS: no stream responded.
        """
        stream = self._stream(namespace, queue)
        if not stream.admitting:
            raise Unavailable(f"could not publish to {namespace}/{queue}: no stream responded")
        now = self._clock()
        out: list[Published | None] = []
        for payload, level, msg_id in items:
            # JetStream checks the msg_id before the limits: a retry to a full queue is
            # still answered as the duplicate it is.
            seen = stream.msg_ids.get(msg_id)
            if seen is not None and now - seen[1] < DUPLICATE_WINDOW_S:
                out.append(Published(seq=seen[0], duplicate=True))
            elif stream.max_depth is not None and len(stream.messages) >= stream.max_depth:
                out.append(None)  # discard=new
            else:
                stream.last_seq += 1
                stream.messages[stream.last_seq] = _Message(level, payload)
                stream.msg_ids[msg_id] = (stream.last_seq, now)
                out.append(Published(seq=stream.last_seq, duplicate=False))
        return out

    async def oldest_pending(
        self, namespace: str, queue: str, *, levels: int
    ) -> tuple[int, bytes] | None:
        """The oldest undelivered invocation of levels ``0..levels-1``; ``None`` for none
        (an unknown queue too)."""
        self._check()
        stream = self._streams.get((namespace, queue))
        for seq, m in stream.messages.items() if stream else ():
            if not m.delivered and m.level < levels:
                return seq, m.payload
        return None

    async def pending_messages(
        self, namespace: str, queue: str, *, levels: int, limit: int
    ) -> list[tuple[int, bytes]]:
        self._check()
        stream = self._streams.get((namespace, queue))
        found = [
            (seq, m.payload)
            for seq, m in (stream.messages.items() if stream else ())
            if not m.delivered and m.level < levels
        ]
        return sorted(found, key=lambda sp: sp[0])[:limit]

    async def stored_messages(
        self, namespace: str, queue: str, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]]:
        self._check()
        stream = self._streams.get((namespace, queue))
        if stream is None:
            return []
        return [(s, stream.messages[s].payload) for s in sorted(set(seqs)) if s in stream.messages]

    async def delete_message(self, namespace: str, queue: str, seq: int) -> bool:
        self._check()
        stream = self._streams.get((namespace, queue))
        return stream is not None and stream.messages.pop(seq, None) is not None

    async def redeliver_now(self, namespace: str, queue: str, seq: int) -> bool:
        """Nothing is ever claimed here (daemons pull from NATS only)."""
        self._check()
        return False

    async def nudge(self, namespace: str, queue: str) -> None:
        self._check()
        self.nudges.append((namespace, queue))

    async def publish_events(self, namespace: str, queue: str, batch: EventBatch) -> int:
        self._check()
        log = self._log
        async with log.changed:
            log.messages.append((namespace, queue, batch))
            log.stored_at[len(log.messages)] = now()
            log.ready.add(len(log.messages))
            log.changed.notify_all()
        return len(log.messages)

    async def send_control(self, namespace: str, worker_id: str, control: DaemonControl) -> None:
        self._check()
        self.controls.append((namespace, worker_id, control))

    # -- the daemons' side (test hooks, not part of the port) --------------------------------

    def claim(self, namespace: str, queue: str, level: int, n: int) -> list[tuple[int, bytes]]:
        """Deliver up to ``n`` pending invocations of one level, oldest first, as a daemon's
        pull on that level's consumer does: they count as running until :meth:`ack`.

        Raises:
            Unavailable: the queue's stream does not exist.
        """
        stream = self._stream(namespace, queue)
        out: list[tuple[int, bytes]] = []
        for seq, m in stream.messages.items():
            if len(out) == n:
                break
            if m.level == level and not m.delivered:
                m.delivered = True
                out.append((seq, m.payload))
        return out

    def ack(self, namespace: str, queue: str, seq: int) -> None:
        """Acknowledge a claim: a WorkQueue stream then forgets the message."""
        self._stream(namespace, queue).messages.pop(seq, None)

    def put_result(self, namespace: str, invocation_id: str, epoch: int, result: Result) -> None:
        """Store an attempt's result as a daemon does in ``LS_RESULTS``."""
        # Encoded as on the wire, so a result that NATS could not carry fails here too.
        key = subjects.result_key(namespace, invocation_id, epoch)
        self._results[key] = codec.encode(result)

    async def publish_log(
        self, namespace: str, invocation_id: str, attempt: int, data: bytes, headers: dict[str, str]
    ) -> None:
        """Store a log chunk as a daemon does in ``LS_LOGS`` (a repeated ``Nats-Msg-Id``
        once, as JetStream's duplicate window does)."""
        self._check()
        subject = subjects.log_subject(namespace, invocation_id, attempt)
        msg_id = headers.get("Nats-Msg-Id")
        if msg_id is not None and msg_id in self._log_ids:
            return
        if msg_id is not None:
            self._log_ids.add(msg_id)
        self.logs.setdefault(subject, []).append((dict(headers), bytes(data)))

    async def redeliver(self) -> None:
        """Make every fetched and un-acked event deliverable again (an ack wait expired)."""
        log = self._log
        async with log.changed:
            log.ready |= log.outstanding
            log.outstanding.clear()
            log.changed.notify_all()

    def _stream(self, namespace: str, queue: str) -> _Stream:
        self._check()
        stream = self._streams.get((namespace, queue))
        if stream is None:
            raise Unavailable(f"no stream for {namespace}/{queue}: it was never ensured")
        return stream

    def _check(self) -> None:
        if self._closed:
            raise Unavailable("the in-memory bus is closed")


class InMemoryFeed:
    """The :class:`~lakeshore.bus.port.Feed` port over the events an :class:`InMemoryBus`
    received; build it with :meth:`InMemoryBus.feed`."""

    def __init__(self, bus: InMemoryBus) -> None:
        self._bus = bus
        self._log = bus._log

    async def ensure(self) -> None:
        self._bus._check()

    async def close(self) -> None:
        pass

    async def fetch(self, max_batch: int, timeout_s: float) -> list[Delivery]:
        """Up to ``max_batch`` deliverable events, oldest first, as soon as there is one;
        ``[]`` after ``timeout_s`` with none. Each is handed out once until redelivered."""
        self._bus._check()
        log = self._log
        async with log.changed:
            try:
                async with asyncio.timeout(timeout_s):
                    await log.changed.wait_for(lambda: bool(log.ready))
            except TimeoutError:
                return []
            out = []
            for seq in sorted(log.ready)[:max_batch]:
                log.ready.discard(seq)
                log.outstanding.add(seq)
                log.delivered[seq] = log.delivered.get(seq, 0) + 1
                ns, queue, batch = log.messages[seq - 1]
                # As EventFeed does: an event naming another queue than its subject is dropped.
                events = [e for e in batch.events if (e.namespace, e.queue) == (ns, queue)]
                if len(events) != len(batch.events):
                    batch = EventBatch(events=events)
                out.append(
                    Delivery(batch, seq, log.delivered[seq], msg=seq, stored_at=log.stored_at[seq])
                )
            return out

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        log = self._log
        for d in deliveries:
            log.outstanding.discard(d.seq)
            log.ready.discard(d.seq)
            log.acked.add(d.seq)
        # The floor only moves over a gap-free run of acks, as JetStream's ack floor does.
        while log.ack_floor + 1 in log.acked:
            log.ack_floor += 1

    async def progress(self) -> tuple[int, int]:
        self._bus._check()
        return self._log.ack_floor, len(self._log.messages)

    async def get_result(self, namespace: str, invocation_id: str, epoch: int) -> Result | None:
        self._bus._check()
        data = self._bus._results.get(subjects.result_key(namespace, invocation_id, epoch))
        return None if data is None else codec.decode(data, Result)

    async def watch_result(self, namespace: str, invocation_id: str) -> _ResultWatch:
        self._bus._check()
        return _ResultWatch(self, namespace, invocation_id)


class _ResultWatch:
    """A result watch of the twin: it hears every result in its store."""

    def __init__(self, feed: InMemoryFeed, namespace: str, invocation_id: str) -> None:
        self._feed, self._ns, self._id = feed, namespace, invocation_id

    async def result(self, epoch: int) -> Result | None:
        return await self._feed.get_result(self._ns, self._id, epoch)

    async def close(self) -> None:
        pass
