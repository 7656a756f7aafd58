"""The record of a submission: what a ``submitted`` event keeps of an invocation (pure).

An invocation's message on its queue's stream says everything its ``submitted`` event
records (:func:`detail`), so the record is made by whoever has the message:

* the control plane, once the submit's messages are stored (``actors/intake.py``);
* whoever touches it first: the first event of every claim (``claimed``, or ``started``
  when the run starts at once; ``daemon/job.py``) carries the record under
  :data:`CARRIED` (:func:`carried`: large arguments or argv left out, so that a daemon's
  events stay small), as do the control plane's ``dropped`` (``drop_oldest``) and
  ``cancelled`` (its queue removed) of a pending one. The Recorder makes the
  ``submitted`` event from it while the invocation has none recorded (:func:`from_event`,
  applied by :func:`lakeshore.fencing.fence_batch`), and records the event without it;
* the control plane, for what nobody touched yet, when a leadership term begins
  (:mod:`lakeshore.services.unrecorded`).

So an invocation stored without its ``submitted`` event (the control plane died between
the publish and the event) is recorded in full all the same. The Recorder records one
``submitted`` event per invocation: a second one (the outbox's event after a record made
from the claim that raced it, one published again after a timeout) is not recorded.

The detail names the fields it keeps: an invocation's ``env`` is not one of them (its
values reach no event, see :mod:`lakeshore.model.redact`; its keys are kept, so that a
retry can ask for them). A submit of several invocations names its ``batch``, the first
one's id; a small function's ``args`` and ``kwargs`` are kept for a retry
(:data:`MAX_KEPT_BODY_BYTES`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from lakeshore import ids
from lakeshore.bus import codec
from lakeshore.model import EventType, Invocation, InvocationEvent

#: A ``submitted`` event keeps a function's ``args`` and ``kwargs`` (what ``jobs retry``
#: submits again) while the invocation's message is at most this big (bytes): the history
#: is not where large inputs go.
MAX_KEPT_BODY_BYTES = 64 * 1024
#: A claim carries a function's ``args`` and ``kwargs``, and a command's argv, while they
#: are at most this big (bytes): a daemon's event batch (up to 256 events) stays far below
#: NATS's ``max_payload``. A record that leaves either out says ``partial``.
MAX_CARRIED_BYTES = 2 * 1024
#: The key of a claim's detail under which its daemon carries the submission's record.
CARRIED = "submission"
_encode = codec.encode
#: What a record made from an event of this type says it was made from.
_FROM = {EventType.CLAIMED: "claim", EventType.STARTED: "claim"}


def detail(inv: Invocation, seq: int, *, keep_args: bool) -> dict[str, Any]:
    """What the ``submitted`` event of ``inv`` records (stored at stream sequence ``seq``);
    a function's ``args`` and ``kwargs`` only when ``keep_args``."""
    out: dict[str, Any] = {
        "seq": seq,
        "priority": inv.priority,
        "fn": inv.fn,
        "command": inv.command,
        "max_attempts": inv.max_attempts,
        "timeout_s": inv.timeout_s,
        "idempotency_key": inv.idempotency_key,
        "stop_grace_s": inv.stop_grace_s,
        "max_lost": inv.max_lost,
        "isolation": inv.isolation,
    }
    if inv.code is not None:
        out["code"] = inv.code
    if inv.resources is not None:
        out["resources"] = inv.resources
    if inv.fn is not None and keep_args:
        out["args"], out["kwargs"] = inv.args, inv.kwargs
    if inv.env:
        out["env_keys"] = sorted(inv.env)
    if inv.batch is not None:
        out["batch"] = inv.batch
    if inv.retry_of is not None:
        out["retry_of"] = inv.retry_of
    return out


def submitted(inv: Invocation, seq: int, size: int, ts: datetime, **marks: str) -> InvocationEvent:
    """The ``submitted`` event of ``inv``, stored at ``seq`` in a message of ``size`` bytes
    (a function's arguments kept up to :data:`MAX_KEPT_BODY_BYTES`); ``marks`` go in its
    detail too (``recorded_from``)."""
    return InvocationEvent(
        namespace=inv.namespace,
        queue=inv.queue,
        invocation_id=inv.id,
        ts=ts,
        type=EventType.SUBMITTED,
        detail={**detail(inv, seq, keep_args=size <= MAX_KEPT_BODY_BYTES), **marks},
    )


def carried(inv: Invocation, seq: int, size: int) -> dict[str, Any]:
    """The record a claim of ``inv`` carries (its message of ``size`` bytes at ``seq``): the
    ``submitted`` event's while it encodes to at most :data:`MAX_CARRIED_BYTES` (as it does
    whenever the message does: the record is no bigger, but for a few field names); else
    without a function's arguments, then without a command's argv and the ``env`` keys
    while still over the bound — ``partial`` then."""
    out = detail(inv, seq, keep_args=True)
    if size <= MAX_CARRIED_BYTES or len(_encode(out)) <= MAX_CARRIED_BYTES:
        return out
    out = detail(inv, seq, keep_args=False)
    if len(_encode(out)) > MAX_CARRIED_BYTES:
        out["command"] = None
        out.pop("env_keys", None)
    if inv.fn is not None or out["command"] is None:
        out["partial"] = True
    return out


def carried_in_full(record: dict[str, Any] | None) -> bool:
    """Whether a claim carries this ``submitted`` record (:func:`detail`) as it is: while it
    encodes to at most :data:`MAX_CARRIED_BYTES` and keeps a function's arguments (else the
    claim's says ``partial``; see :func:`carried`)."""
    if record is None or record.get("fn") is not None and "args" not in record:
        return False
    return len(_encode(record)) <= MAX_CARRIED_BYTES


def from_event(ev: InvocationEvent) -> tuple[InvocationEvent, InvocationEvent | None]:
    """An event without the record it carries, and the ``submitted`` event made of that
    record (``None`` when it carries none). The record's time is the one its id carries
    (the submission's, to the millisecond); ``recorded_from`` names what carried it (the
    ``claim``, or the control plane's ``dropped`` or ``cancelled``)."""
    if ev.detail is None or CARRIED not in ev.detail:
        return ev, None
    rest = dict(ev.detail)
    record = rest.pop(CARRIED)
    bare = msgspec.structs.replace(ev, detail=rest)
    if not isinstance(record, dict):
        return bare, None  # not a record: the claim is recorded without it
    submitted = InvocationEvent(
        namespace=ev.namespace,
        queue=ev.queue,
        invocation_id=ev.invocation_id,
        ts=ids.submitted_at(ev.invocation_id) or ev.ts,
        type=EventType.SUBMITTED,
        detail={**record, "recorded_from": _FROM.get(ev.type, ev.type.value)},
    )
    return bare, submitted
