"""Fenced completion: which lifecycle events of an invocation count (pure, no I/O).

The Recorder keeps a :class:`Fence` per invocation and runs every incoming event through
:func:`decide`. The rules (see ``docs/data-plane.md``, "Fenced completion"):

* ``submitted``, ``claimed`` and ``started`` are facts about admission and deliveries:
  always recorded as they are. ``started`` raises the highest started epoch.
* ``succeeded`` and ``failed`` are accepted only while the invocation is unfinished and
  their epoch is not below the highest started epoch. A completion from an epoch *above* it
  is from the newest attempt whose ``started`` has not been recorded yet, so it is accepted
  and raises the epoch (otherwise a lost ``started`` would leave the job running for ever).
* ``retrying`` is fenced like a completion: a superseded attempt's failure must not send
  the invocation back to pending.
* ``cancelled`` is accepted only while unfinished; a daemon's cancel (it carries an epoch)
  is also fenced by the epoch, the control plane's cancel of a pending invocation (no
  epoch) is not. ``dropped`` carries no epoch and is accepted only while unfinished.
* Anything refused is recorded as type ``stale`` with ``detail.stale_type`` (the original
  type) and ``detail.stale_reason``, and counted — never as a second outcome.

The *current state* is the latest accepted event in protocol order, not arrival order:
the accepted terminal event if any, else the greatest ``(epoch, rank)`` of the accepted
non-terminal events (:data:`RANK`), mapped by :data:`STATE_OF_RANK`. Events from one
producer and from another (the control plane's ``submitted``, a daemon's ``claimed``) may
arrive in either order; the state does not depend on it. The store's SQL derives the
same state from the same tables (``lakeshore/store/jobs.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec

from lakeshore.model import EventType, InvocationEvent, InvocationState

#: ``(namespace, invocation_id)``
Key = tuple[str, str]

#: Order of the non-terminal events within one epoch.
RANK: dict[EventType, int] = {
    EventType.SUBMITTED: 0,
    EventType.CLAIMED: 1,
    EventType.STARTED: 2,
    EventType.RETRYING: 3,
}
#: ``top = epoch * RANK_BASE + rank`` encodes ``(epoch, rank)`` in one comparable integer.
RANK_BASE = 8
#: The state an invocation is in when its latest accepted event has this rank.
STATE_OF_RANK: dict[int, InvocationState] = {
    0: InvocationState.PENDING,
    1: InvocationState.RUNNING,
    2: InvocationState.RUNNING,
    3: InvocationState.PENDING,
}
#: Events that finish an invocation.
TERMINAL: dict[EventType, InvocationState] = {
    EventType.SUCCEEDED: InvocationState.SUCCEEDED,
    EventType.FAILED: InvocationState.FAILED,
    EventType.CANCELLED: InvocationState.CANCELLED,
    EventType.DROPPED: InvocationState.DROPPED,
}
#: Accepted events of these types raise the highest started epoch.
RAISES_EPOCH = frozenset(
    {
        EventType.STARTED,
        EventType.RETRYING,
        EventType.SUCCEEDED,
        EventType.FAILED,
        EventType.CANCELLED,
    }
)
#: Events fenced by the epoch (a ``cancelled`` only when it carries one).
EPOCH_FENCED = frozenset(
    {EventType.RETRYING, EventType.SUCCEEDED, EventType.FAILED, EventType.CANCELLED}
)


class Fence(NamedTuple):
    """What the Recorder knows of one invocation."""

    #: highest epoch of an accepted ``started`` (or completion); 0 before any
    started_epoch: int = 0
    #: ``epoch * RANK_BASE + rank`` of the latest accepted non-terminal event; -1: none
    top: int = -1
    #: the state of the accepted terminal event; ``None`` while unfinished
    terminal: InvocationState | None = None

    @property
    def finished(self) -> bool:
        return self.terminal is not None

    @property
    def state(self) -> InvocationState:
        if self.terminal is not None:
            return self.terminal
        return STATE_OF_RANK[self.top % RANK_BASE] if self.top >= 0 else InvocationState.PENDING


def decide(fence: Fence | None, ev: InvocationEvent) -> tuple[Fence, str | None]:
    """Apply one event to an invocation's fence.

    Args:
        fence: what is known of the invocation; ``None`` when it was never seen.
        ev: the event, as it arrived.

    Returns:
        The fence afterwards, and ``None`` if the event is accepted or the reason it is
        stale (the fence is then unchanged).
    """
    f = fence or Fence()
    epoch = ev.epoch or 0
    kind = ev.type
    if kind is EventType.STALE:
        return f, None
    if kind in TERMINAL or kind is EventType.RETRYING:
        if f.terminal is not None:
            return f, f"already {f.terminal.value}"
        fenced = kind in EPOCH_FENCED and (kind is not EventType.CANCELLED or ev.epoch is not None)
        if fenced and epoch < f.started_epoch:
            return f, f"epoch {epoch} was superseded by epoch {f.started_epoch}"
    started = max(f.started_epoch, epoch) if kind in RAISES_EPOCH else f.started_epoch
    if kind in TERMINAL:
        return Fence(started, f.top, TERMINAL[kind]), None
    rank = RANK.get(kind)
    top = f.top if rank is None else max(f.top, epoch * RANK_BASE + rank)
    return Fence(started, top, f.terminal), None


def stale(ev: InvocationEvent, reason: str) -> InvocationEvent:
    """The ``stale`` event recorded in place of a refused one."""
    detail = {**(ev.detail or {}), "stale_type": ev.type.value, "stale_reason": reason}
    return msgspec.structs.replace(ev, type=EventType.STALE, detail=detail)


@dataclass(slots=True)
class Fenced:
    """The outcome of :func:`fence_batch`."""

    #: what to record, in arrival order (refused events rewritten as ``stale``)
    events: list[InvocationEvent] = field(default_factory=list)
    #: the fence afterwards of every invocation the batch touched
    fences: dict[Key, Fence] = field(default_factory=dict)
    #: invocations that finished in this batch
    finished: list[Key] = field(default_factory=list)
    stale: int = 0


def fence_batch(events: Iterable[InvocationEvent], known: Mapping[Key, Fence]) -> Fenced:
    """Decide a batch of events in arrival order.

    Args:
        events: the batch, in the order the events arrived.
        known: the fences of the invocations the batch touches; an absent key is an
            invocation never seen before.

    Returns:
        The events to record, the new fences and the invocations that finished.
    """
    out = Fenced()
    fences = out.fences
    for ev in events:
        key = (ev.namespace, ev.invocation_id)
        before = fences[key] if key in fences else known.get(key)
        after, reason = decide(before, ev)
        if reason is not None:
            out.events.append(stale(ev, reason))
            out.stale += 1
        else:
            out.events.append(ev)
            if after.finished and not (before is not None and before.finished):
                out.finished.append(key)
        fences[key] = after
    return out
