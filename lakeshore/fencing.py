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
* The events fenced by the epoch are also fenced by the *claimant* when they name a
  ``worker``: one from epoch E is refused if an accepted ``claimed`` or ``started`` of
  epoch E is recorded and none of them names that worker ("attempt 2 was claimed by daemon
  w-abc, not w-xyz"). The check applies only when that epoch's claim or start was recorded
  (a completion whose ``claimed`` and ``started`` are lost or not recorded yet is accepted,
  as above). Events without a worker (the control plane's) are not checked. Every worker
  that claimed or started an epoch is one of its claimants (``claimed`` and ``started`` are
  recorded as they are; two claims of one epoch are the known limit of data-plane.md), so
  the order in which the claimants' events arrive does not matter.
  The identity is guaranteed by the bus, not checked here: a daemon may publish events only
  as itself, and the Recorder's feed drops an event whose ``worker`` is not the publishing
  daemon. A fence keeps the claims of the epochs not below the highest started epoch, the
  only ones a completion can still be accepted from.
* An event may carry the submission's record (:mod:`lakeshore.submission`: a claim, the
  control plane's drop or cancel of a pending one): it is recorded without it, preceded
  by the ``submitted`` event made of it. One ``submitted`` event is recorded per
  invocation (the fence's ``submitted``); a later one is left out (``Fenced.repeated``).
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

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec

from lakeshore import submission
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
#: Accepted events of these types that name a worker make it a claimant of their epoch.
CLAIMING = frozenset({EventType.CLAIMED, EventType.STARTED})

#: ``(epoch, worker)`` of an accepted :data:`CLAIMING` event.
Claim = tuple[int, str]


class Fence(NamedTuple):
    """What the Recorder knows of one invocation."""

    #: highest epoch of an accepted ``started`` (or completion); 0 before any
    started_epoch: int = 0
    #: ``epoch * RANK_BASE + rank`` of the latest accepted non-terminal event; -1: none
    top: int = -1
    #: the state of the accepted terminal event; ``None`` while unfinished
    terminal: InvocationState | None = None
    #: ``(epoch, worker)`` of the accepted claims of the epochs not below ``started_epoch``,
    #: distinct and sorted (:func:`kept_claims`)
    claims: tuple[Claim, ...] = ()
    #: whether its ``submitted`` event is recorded
    submitted: bool = False

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
    if kind is EventType.SUBMITTED and not f.submitted:
        f = f._replace(submitted=True)
    if kind in TERMINAL or kind is EventType.RETRYING:
        if f.terminal is not None:
            return f, f"already {f.terminal.value}"
        fenced = kind in EPOCH_FENCED and (kind is not EventType.CANCELLED or ev.epoch is not None)
        if fenced and epoch < f.started_epoch:
            return f, f"epoch {epoch} was superseded by epoch {f.started_epoch}"
        if fenced and ev.worker is not None:
            claimants = [w for e, w in f.claims if e == epoch]
            if claimants and ev.worker not in claimants:
                by = " or ".join(claimants)
                return f, f"attempt {epoch} was claimed by daemon {by}, not {ev.worker}"
    started = max(f.started_epoch, epoch) if kind in RAISES_EPOCH else f.started_epoch
    claims = f.claims
    if kind in CLAIMING and ev.worker is not None:
        claims = kept_claims((*claims, (epoch, ev.worker)), started)
    elif started != f.started_epoch:
        claims = kept_claims(claims, started)
    if kind in TERMINAL:
        return Fence(started, f.top, TERMINAL[kind], claims, f.submitted), None
    rank = RANK.get(kind)
    top = f.top if rank is None else max(f.top, epoch * RANK_BASE + rank)
    return Fence(started, top, f.terminal, claims, f.submitted), None


def kept_claims(claims: Iterable[Claim], started_epoch: int) -> tuple[Claim, ...]:
    """The claims a fence keeps: distinct, sorted, of the epochs not below ``started_epoch``
    (a completion from a lower epoch is refused whoever sent it)."""
    return tuple(sorted({c for c in claims if c[0] >= started_epoch}))


#: An ``epoch`` above every real one: :func:`open_claim` of it is the newest open claim.
ANY_EPOCH = 2**62


def open_claim(fence: Fence | None, epoch: int) -> Claim | None:
    """The claim of the latest attempt before ``epoch`` that has not ended: no outcome of
    the invocation, no ``retrying`` of that attempt (nor anything of a later one) accepted.
    ``None``: a delivery of ``epoch`` is the only live attempt."""
    if fence is None or fence.finished:
        return None
    earlier = [claim for claim in fence.claims if claim[0] < epoch]
    if not earlier:
        return None
    claim = max(earlier)
    if fence.top >= claim[0] * RANK_BASE + RANK[EventType.RETRYING]:
        return None
    return claim


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
    #: ``submitted`` events left out: the invocation's was recorded already
    repeated: int = 0


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
    for ev in _unpacked(events):
        key = (ev.namespace, ev.invocation_id)
        before = fences[key] if key in fences else known.get(key)
        if ev.type is EventType.SUBMITTED and before is not None and before.submitted:
            out.repeated += 1
            continue
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


def _unpacked(events: Iterable[InvocationEvent]) -> Iterator[InvocationEvent]:
    """``events``, each one that carries a submission's record without it and preceded by
    the ``submitted`` event made of it (:func:`lakeshore.submission.from_event`)."""
    for ev in events:
        if ev.detail is not None and submission.CARRIED in ev.detail:
            ev, made = submission.from_event(ev)
            if made is not None:
                yield made
        yield ev
