"""What the control plane's actors need of NATS: the :class:`Bus` and :class:`Feed` ports.

Two implementations pass the same contract tests (``tests/bus/test_bus_contract.py``):
:class:`lakeshore.bus.nats.NatsBus` / :class:`lakeshore.bus.events.EventFeed` against a
real nats-server, and :class:`lakeshore.bus.memory.InMemoryBus` (with its ``feed()``) for
fast actor tests. Acks, redelivery and max-deliver are only ever tested against JetStream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from lakeshore.model import DaemonControl, EventBatch, Result


@dataclass(frozen=True, slots=True)
class Published:
    """One invocation stored in its queue's stream."""

    seq: int
    #: the Nats-Msg-Id was seen inside the duplicate window: nothing new was stored
    duplicate: bool


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """What the bus knows of one queue right now (eventually consistent)."""

    #: stored and not yet delivered
    pending: int
    #: delivered and not yet acknowledged
    running: int
    #: every stored message, leftovers included
    depth: int


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event message as the Recorder sees it; ack it with :meth:`Feed.ack`."""

    batch: EventBatch
    #: the message's ``LS_EVENTS`` stream sequence
    seq: int
    #: how many times it was delivered (1: never before, so it cannot have been recorded)
    delivered: int
    #: the implementation's handle on the message (a nats ``Msg``), opaque to callers
    msg: Any
    #: when the server stored the message, by the server's clock (``None``: unknown)
    stored_at: datetime | None = None


class Bus(Protocol):
    """The queues' streams, lifecycle events and daemon control, as the actors use them.

    Every method raises :class:`~lakeshore.errors.Unavailable` when the bus cannot answer.
    """

    @property
    def connected(self) -> bool: ...

    async def ensure_queue(
        self,
        namespace: str,
        queue: str,
        *,
        levels: int,
        max_depth: int | None,
        admitting: bool = True,
    ) -> None:
        """Create or update the queue's stream (idempotent); ``max_depth`` caps it. A stream
        not ``admitting`` (its queue draining or archived) takes no publish, from anyone
        (:meth:`publish_work` raises ``Unavailable``), and keeps delivering what it holds."""

    async def delete_queue(self, namespace: str, queue: str) -> None:
        """Delete the queue's stream and every invocation in it (absent: no-op)."""

    async def queue_counts(self, namespace: str, queue: str, *, levels: int) -> QueueCounts:
        """Pending, running and stored counts (an unknown queue: all 0)."""

    async def queue_backlog(self, namespace: str, queue: str, *, levels: int) -> int:
        """The invocations stored and not yet delivered (an unknown queue: 0); while a
        consumer cannot answer (it elects its leader) the stream's depth, which counts the
        delivered ones too: an estimate that errs high, answered by the stream alone."""

    async def publish_work(
        self, namespace: str, queue: str, items: list[tuple[bytes, int, str]]
    ) -> list[Published | None]:
        """Store ``(payload, level, msg_id)`` items; ``None`` for each refused as full.

        A ``msg_id`` seen before (inside the duplicate window) stores nothing and answers
        the first one's sequence with ``duplicate=True``.
        """

    async def oldest_pending(
        self, namespace: str, queue: str, *, levels: int
    ) -> tuple[int, bytes] | None:
        """The oldest undelivered invocation over every level: ``(seq, payload)``."""

    async def pending_messages(
        self, namespace: str, queue: str, *, levels: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """Up to ``limit`` undelivered invocations over every level, oldest first per level:
        ``(seq, payload)`` (an unknown queue: none)."""

    async def stored_messages(
        self, namespace: str, queue: str, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]]:
        """Those of the messages at ``seqs`` the queue's stream still holds (delivered or
        not), in sequence order; an unknown queue holds none."""
        ...

    async def delete_message(self, namespace: str, queue: str, seq: int) -> bool:
        """Remove one stored invocation; ``False`` when it is already gone."""

    async def redeliver_now(self, namespace: str, queue: str, seq: int) -> bool:
        """Make the claimed invocation ``seq`` deliverable again at once (its daemon is lost:
        it would otherwise wait out its lease); ``False`` when it is not claimed now."""

    async def nudge(self, namespace: str, queue: str) -> None:
        """Wake idle daemons of ``queue`` (best effort)."""

    async def publish_events(self, namespace: str, queue: str, batch: EventBatch) -> int:
        """Append lifecycle events to the events stream (durable once this returns); the
        message's sequence in it."""

    async def send_control(self, namespace: str, worker_id: str, control: DaemonControl) -> None:
        """Tell one daemon to cancel a run or retire (best effort)."""


class Feed(Protocol):
    """The events stream as the Recorder drains it, and the results it points to."""

    async def ensure(self) -> None:
        """Create the stream, its consumer and the results bucket (idempotent)."""

    async def close(self) -> None: ...

    async def fetch(self, max_batch: int, timeout_s: float) -> list[Delivery]:
        """Up to ``max_batch`` messages not yet acked, oldest first; ``[]`` after
        ``timeout_s`` with none (it does not wait to fill the batch)."""

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge: the messages are never delivered again."""

    async def progress(self) -> tuple[int, int]:
        """``(ack floor, last sequence)`` of the events stream."""

    async def get_result(self, namespace: str, invocation_id: str, epoch: int) -> Result | None:
        """The result a daemon stored for that attempt, if it is still kept."""

    async def watch_result(self, namespace: str, invocation_id: str) -> ResultWatch:
        """Hear the results stored for an invocation from now on (close the watch)."""


class ResultWatch(Protocol):
    """The results of one invocation as daemons store them, heard as they pass."""

    async def result(self, epoch: int) -> Result | None:
        """The result of that attempt if it was heard (``None``: read it with
        :meth:`Feed.get_result`)."""

    async def close(self) -> None: ...


class LogPort(Protocol):
    """Where a daemon publishes its runs' output (:class:`~lakeshore.bus.work.WorkBus`)."""

    @property
    def connected(self) -> bool: ...

    async def publish_log(
        self, namespace: str, invocation_id: str, attempt: int, data: bytes, headers: dict[str, str]
    ) -> None:
        """Store one chunk (see :mod:`lakeshore.bus.logs`).

        Raises:
            Unavailable: not stored.
        """
