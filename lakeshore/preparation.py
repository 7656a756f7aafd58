"""Turning a submit into the messages its queue's stream stores: each invocation validated
against its queue's row, given its id, encoded (pure).

The control plane's :class:`~lakeshore.actors.queue.QueueActor` prepares every submit it
admits with these; they run in turns (:mod:`lakeshore.actors.turns`) so that a submit of
thousands does not hold the event loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NoReturn

import msgspec

from lakeshore.actors.turns import pause
from lakeshore.bus import codec
from lakeshore.errors import Invalid, QueueFull, TooLarge, WrongState
from lakeshore.ids import new_id
from lakeshore.model import (
    CLOSED_STATES,
    Invocation,
    InvocationSubmit,
    Isolation,
    Queue,
    QueueKind,
    check_depth,
    check_max_lost,
    check_resources,
    check_stop_grace,
    now,
)

_FN_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
#: NATS' default max payload; an invocation must fit in one message.
MAX_PAYLOAD_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Prepared:
    id: str
    msg_id: str
    level: int
    #: the encoded :class:`Invocation`, ``env`` values and all: never shown
    payload: bytes = field(repr=False)
    spec: InvocationSubmit
    #: what ``payload`` encodes (its ``repr`` masks the ``env`` values)
    inv: Invocation


async def new_ids(n: int) -> list[str]:
    """``n`` fresh invocation ids, made in turns (:mod:`lakeshore.actors.turns`)."""
    ids: list[str] = []
    for i in range(n):
        await pause(i)
        ids.append(new_id())
    return ids


async def prepare(row: Queue, specs: list[InvocationSubmit], ids: list[str]) -> list[Prepared]:
    """Validate every invocation of a submit and encode it with its id, in turns
    (:mod:`lakeshore.actors.turns`); all or nothing.

    Raises:
        Invalid: an invocation is malformed (the message says which, by index).
        TooLarge: an invocation does not fit in one message.
    """
    out: list[Prepared] = []
    submitted_at = now()
    batch = ids[0] if len(specs) > 1 else None
    for i, spec in enumerate(specs):
        await pause(i)
        where = f"invocation {i}" if len(specs) > 1 else "the invocation"
        spec = with_queue_defaults(row, with_queue_code(row, spec))
        _check(row, spec, where)
        inv_id = ids[i]
        inv = Invocation(
            id=inv_id,
            namespace=row.namespace,
            queue=row.name,
            fn=spec.fn,
            args=spec.args,
            kwargs=spec.kwargs,
            command=spec.command,
            env=spec.env,
            priority=spec.priority,
            timeout_s=spec.timeout_s,
            max_attempts=spec.max_attempts,
            submitted_at=submitted_at,
            stop_grace_s=spec.stop_grace_s,
            isolation=spec.isolation,
            max_lost=spec.max_lost,
            code=spec.code,
            resources=spec.resources,
            idempotency_key=spec.idempotency_key,
            batch=batch,
            retry_of=spec.retry_of,
        )
        payload = codec.encode(inv)
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise TooLarge(
                f"{where} is {len(payload)} bytes encoded, more than {MAX_PAYLOAD_BYTES}; "
                "pass large inputs by reference (a path or URL) instead of in args"
            )
        # The Nats-Msg-Id is the id: a retried key resolves to the same id (durably, see
        # idempotency.py), so JetStream deduplicates it too inside its window.
        out.append(Prepared(inv_id, inv_id, spec.priority, payload, spec, inv))
    return out


def with_queue_code(row: Queue, spec: InvocationSubmit) -> InvocationSubmit:
    """``spec`` with its queue's code when it names none (an inline function keeps none:
    it runs in the daemon's own process)."""
    if spec.code is not None or row.code is None:
        return spec
    if spec.fn is not None and spec.isolation is Isolation.INLINE:
        return spec
    return msgspec.structs.replace(spec, code=row.code)


def with_queue_defaults(row: Queue, spec: InvocationSubmit) -> InvocationSubmit:
    """``spec`` with its queue's default resources when it names none of its own."""
    if spec.resources is not None or row.defaults is None or row.defaults.resources is None:
        return spec
    return msgspec.structs.replace(spec, resources=row.defaults.resources)


def _check(row: Queue, spec: InvocationSubmit, where: str) -> None:
    if (spec.fn is None) == (spec.command is None):
        raise Invalid(f"{where} needs exactly one of fn ('module:qualname') or command (argv)")
    if spec.fn is not None and not _FN_RE.match(spec.fn):
        raise Invalid(f"{where}: fn {spec.fn!r} must look like 'package.module:function'")
    if spec.command is not None and not spec.command:
        raise Invalid(f"{where}: command must be a non-empty argv list")
    check_depth(f"{where}: args", spec.args)
    check_depth(f"{where}: kwargs", spec.kwargs)
    check_stop_grace(where, spec.stop_grace_s)
    check_max_lost(where, spec.max_lost)
    if spec.command and spec.isolation is Isolation.INLINE:
        raise Invalid(
            f"{where}: isolation 'inline' is for functions (fn); a command always runs in "
            "a process of its own: leave isolation out"
        )
    if spec.resources is not None:
        check_resources(where, spec.resources)
        if spec.resources.gpus and spec.fn is not None and spec.isolation is Isolation.INLINE:
            raise Invalid(
                f"{where}: isolation 'inline' runs on the daemon's own thread, which cannot "
                "hold devices: leave isolation out to ask for GPUs (a worker process gets them)"
            )
    if spec.code is not None and spec.fn is not None and spec.isolation is Isolation.INLINE:
        raise Invalid(
            f"{where}: isolation 'inline' runs on the daemon's own thread, which cannot take "
            "a code snapshot: leave isolation out (a worker process runs the snapshot)"
        )
    if spec.priority and row.kind is QueueKind.FIFO:
        raise Invalid(
            f"{where} has priority {spec.priority} but queue {row.name!r} is fifo; "
            "priorities need a queue created with --kind priority"
        )


def check_admitting(row: Queue) -> None:
    """Refuse a submit to a queue that admits nothing now.

    Raises:
        WrongState: it is draining or archived.
    """
    if row.state in CLOSED_STATES:
        raise WrongState(
            row.name, row.state.value, "accept submissions", "; unarchive it to admit work again"
        )


def full(row: Queue, index: int, total: int, why: str = "") -> NoReturn:
    """Raise the :class:`QueueFull` of a submit whose ``index``-th item found no room."""
    admitted = f"; the first {index} of {total} were admitted" if index else ""
    reason = f" ({why})" if why else ""
    raise QueueFull(
        f"queue {row.name!r} is full: max_depth {row.max_depth} reached{reason}{admitted}; "
        "retry later, raise --max-depth, or set --on-full block / drop_oldest"
    )
