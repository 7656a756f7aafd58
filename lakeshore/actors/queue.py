"""QueueActor: the one owner of a queue's row, its state transitions, admission and stream.

Every mutation goes through :meth:`QueueActor.handle`, is written to the store and recorded
as a queue event with the acting token and the row before and after.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct

from lakeshore import elasticity
from lakeshore.actors import admission
from lakeshore.actors.admission import body_digest
from lakeshore.actors.base import Actor, ActorRef
from lakeshore.actors.waiting import Waiting, WaitingRoom
from lakeshore.actors.workers import Members, Scrub
from lakeshore.bus import codec
from lakeshore.bus.port import Bus, Published
from lakeshore.errors import (
    Conflict,
    ImmutableField,
    Invalid,
    LakeshoreError,
    QueueFull,
    QueueHasMembers,
    QueueNotFound,
    ReservedName,
    WrongState,
)
from lakeshore.faults import Faults
from lakeshore.ids import new_id
from lakeshore.model import (
    BUILTIN_PROVIDER,
    DEFAULT_QUEUE,
    Elasticity,
    ElasticityKind,
    EventBatch,
    EventType,
    Invocation,
    InvocationEvent,
    InvocationSubmit,
    OnFull,
    ProviderKind,
    Queue,
    QueuePatch,
    QueueState,
    SubmitAnswer,
    Worker,
    WorkerStatus,
    levels_of,
    now,
)
from lakeshore.store.port import ProviderRows, QueueStore, StoredKey

log = logging.getLogger(__name__)


class GetQueue(Struct, frozen=True):
    pass


class CountWaiting(Struct, frozen=True):
    """How many submits wait for room (``on_full: block``)."""


class PatchQueue(Struct, frozen=True):
    patch: QueuePatch
    actor: str | None


class Transition(Struct, frozen=True):
    verb: Literal["drain", "archive", "unarchive"]
    actor: str | None


class DeleteQueue(Struct, frozen=True):
    force: bool
    actor: str | None


class Submit(Struct, frozen=True):
    invocations: list[InvocationSubmit]
    actor: str | None
    #: how long a ``block`` queue may wait for room (seconds)
    wait_s: float = 30.0


class CancelPending(Struct, frozen=True, kw_only=True):
    """Remove a pending invocation from the stream and record it cancelled."""

    invocation_id: str
    seq: int
    actor: str | None


QueueMsg = GetQueue | CountWaiting | PatchQueue | Transition | DeleteQueue | Submit | CancelPending

#: verb -> (states it may start from, the state it leads to); the target state is a no-op.
_TRANSITIONS: dict[str, tuple[frozenset[QueueState], QueueState]] = {
    "drain": (frozenset({QueueState.ACTIVE}), QueueState.DRAINING),
    "archive": (frozenset({QueueState.ACTIVE, QueueState.DRAINING}), QueueState.ARCHIVED),
    "unarchive": (
        frozenset({QueueState.DRAINING, QueueState.ARCHIVED, QueueState.PAUSED}),
        QueueState.ACTIVE,
    ),
}
_EVENT_OF_VERB = {"drain": "drained", "archive": "archived", "unarchive": "unarchived"}


def row_dict(q: Queue) -> dict[str, Any]:
    return msgspec.to_builtins(q)


async def check_provider(store: ProviderRows, namespace: str, e: Elasticity) -> None:
    """An elasticity object must name a provider of the namespace (the built-in ``local``
    or a stored one), and one the controller can launch on unless its kind is ``fixed``.

    Raises:
        Invalid: naming the provider and how to add it, or why it cannot be used.
    """
    if e.provider == BUILTIN_PROVIDER:
        return
    row = await store.get_provider(namespace, e.provider)
    if row is None:
        raise Invalid(
            f"elasticity provider {e.provider!r} does not exist in namespace {namespace!r}; "
            f"add it with `lakeshore providers add {e.provider} --kind local -n {namespace}` "
            f"(list them with `lakeshore providers ls -n {namespace}`), or use the built-in "
            f"{BUILTIN_PROVIDER!r}"
        )
    if row.kind is ProviderKind.EXTERNAL and e.kind is not ElasticityKind.FIXED:
        raise Invalid(
            f"elasticity kind {e.kind.value!r} needs a provider the controller can launch "
            f"daemons on, but {e.provider!r} is external (its daemons are started by hand "
            "with `lakeshore daemon run`); use a local provider, or keep elasticity fixed"
        )


NO_FAULTS = Faults()
#: Most pending invocations a queue's removal records as cancelled, one by one.
MAX_CANCEL_ON_DELETE = 100_000
#: How long an idempotency key names its invocation unless the server says otherwise (s).
DEFAULT_KEY_TTL_S = 7 * 86400.0


class QueueActor(Actor[QueueMsg]):
    """Owns one queue. Built from its stored row; ensures its stream on every start."""

    def __init__(
        self,
        namespace: str,
        name: str,
        *,
        store: QueueStore,
        bus: Bus,
        workers: ActorRef[Any],
        key_ttl_s: float = DEFAULT_KEY_TTL_S,
        faults: Faults = NO_FAULTS,
    ) -> None:
        self.name = f"queue:{namespace}/{name}"
        self._ns, self._queue = namespace, name
        self._store, self._bus, self._workers = store, bus, workers
        self.row: Queue | None = None
        self._key_ttl_s = key_ttl_s
        self._faults = faults
        self._room = WaitingRoom(retry=self._retry, admit=self._admit, refuse=self._refuse)

    async def started(self) -> None:
        self.row = await self._store.get_queue(self._ns, self._queue)
        if self.row is None:
            raise RuntimeError(f"queue {self._ns}/{self._queue} has no row")
        await self._ensure_stream(self.row)

    async def stopped(self) -> None:
        await self._room.close(QueueNotFound(self._ns, self._queue))

    async def handle(self, msg: QueueMsg) -> Any:
        assert self.row is not None
        match msg:
            case GetQueue():
                return self.row
            case CountWaiting():
                return len(self._room)
            case PatchQueue(patch=patch, actor=actor):
                return await self._patch(patch, actor)
            case Transition(verb=verb, actor=actor):
                return await self._transition(verb, actor)
            case DeleteQueue(force=force, actor=actor):
                return await self._delete(force, actor)
            case Submit(invocations=specs, wait_s=wait_s):
                return await self._submit(specs, wait_s)
            case CancelPending(invocation_id=inv_id, seq=seq, actor=actor):
                return await self._cancel(inv_id, seq, actor)

    async def _submit(
        self, specs: list[InvocationSubmit], wait_s: float
    ) -> asyncio.Future[SubmitAnswer]:
        """Admit a submit; answers a future settled once it is in (at once unless a full
        ``block`` queue makes it wait in the waiting room)."""
        row = self._admitting()
        ids = [new_id() for _ in specs]
        items = admission.prepare(row, specs, ids)  # refuses a bad batch before any key
        known: set[str] = set()
        if any(spec.idempotency_key for spec in specs):
            ids, known = await self._key_ids(specs, ids)
            items = admission.prepare(row, specs, ids)
        waiting = Waiting(items, [None] * len(items), [], time.monotonic() + wait_s)
        for i, item in enumerate(items):
            if item.id in known:  # admitted before and recorded: nothing to publish again
                waiting.published[i] = Published(seq=0, duplicate=True)
        if self._room and row.on_full is OnFull.BLOCK:
            return self._room.park(waiting)  # behind the submits already waiting
        todo = [i for i, p in enumerate(waiting.published) if p is None]
        stored = await admission.publish(self._bus, row, [items[i] for i in todo])
        for i, outcome in zip(todo, stored, strict=True):
            waiting.published[i] = outcome
        self._faults.hit("submit.published")
        try:
            waiting.dropped = await admission.place(
                self._bus, row, items, waiting.published, levels=levels_of(row.kind)
            )
        except QueueFull:
            await self._record_admitted(waiting)
            raise
        if waiting.next_index < len(items):
            return self._room.park(waiting)
        waiting.answer.set_result(await self._admit(waiting))
        return waiting.answer

    async def _key_ids(
        self, specs: list[InvocationSubmit], fresh: list[str]
    ) -> tuple[list[str], set[str]]:
        """Resolve idempotency keys durably: a key seen within ``idempotency_ttl_s`` names
        its first invocation's id; a new key is stored (before anything is published, so a
        crash after the publish still finds it).

        Returns:
            The id of each invocation, and the ids already recorded (not to be published
            again: the stream's duplicate window may be long past).

        Raises:
            Conflict: a key came with another body than the first time.
        """
        digests: dict[str, str] = {}
        for spec in specs:
            key = spec.idempotency_key
            if key is not None and digests.setdefault(key, body_digest(spec)) != body_digest(spec):
                raise _key_conflict(key, "twice in this batch")
        since = now() - timedelta(seconds=self._key_ttl_s)
        stored = await self._store.get_keys(self._ns, self._queue, list(digests), since)
        for key, found in stored.items():
            if found.digest != digests[key]:
                raise _key_conflict(key, f"by invocation {found.invocation_id}")
        new: dict[str, StoredKey] = {}
        ids = list(fresh)
        for i, spec in enumerate(specs):
            key = spec.idempotency_key
            if key is None:
                continue
            entry = stored.get(key) or new.get(key)
            if entry is None:
                entry = new[key] = StoredKey(invocation_id=fresh[i], digest=digests[key])
            ids[i] = entry.invocation_id
        await self._store.put_keys(self._ns, self._queue, new, now())
        self._faults.hit("submit.keys_stored")
        old = [entry.invocation_id for entry in stored.values()]
        known = await self._store.recorded_ids(self._ns, old) if old else set()
        return ids, known

    def _admitting(self) -> Queue:
        """The row, if the queue admits work now.

        Raises:
            WrongState: it is draining or archived.
        """
        row = self.row
        assert row is not None
        if row.state in (QueueState.DRAINING, QueueState.ARCHIVED):
            raise WrongState(
                row.name,
                row.state.value,
                "accept submissions",
                "; unarchive it to admit work again",
            )
        return row

    async def _retry(self, waiting: Waiting) -> bool:
        """The waiting room's retry: store the next items in order while there is room."""
        row = self._admitting()
        while (i := waiting.next_index) < len(waiting.items):
            if row.on_full is not OnFull.BLOCK:
                admission.full(row, i, len(waiting.items), f"on_full is now {row.on_full}")
            [outcome] = await admission.publish(self._bus, row, waiting.items[i : i + 1])
            if outcome is None:
                return False
            waiting.published[i] = outcome
        return True

    async def _refuse(self, waiting: Waiting, why: LakeshoreError | None) -> LakeshoreError:
        """The waiting room's refusal: the error the asker gets (``QueueFull`` once its
        wait ran out), after recording what of the submit was stored."""
        await self._record_admitted(waiting)
        if why is not None:
            return why
        assert self.row is not None
        try:
            admission.full(self.row, waiting.next_index, len(waiting.items), "")
        except QueueFull as e:
            return e

    async def _admit(self, waiting: Waiting) -> SubmitAnswer:
        """Record an admitted submit's events, wake the daemons, answer it."""
        row = self.row
        assert row is not None
        await self._record_admitted(waiting)
        self._faults.hit("submit.recorded")
        await self._bus.nudge(self._ns, row.name)
        items, published = waiting.items, waiting.published
        return SubmitAnswer(
            ids=[p.id for p in items],
            queue=row.name,
            namespace=self._ns,
            warnings=await self._warnings(row),
            duplicates=[
                p.id for p, pub in zip(items, published, strict=True) if pub and pub.duplicate
            ],
        )

    async def _record_admitted(self, waiting: Waiting) -> None:
        """Publish the events of what a submit stored (and of what it evicted)."""
        assert self.row is not None
        events = [
            *waiting.dropped,
            *admission.submitted_events(self.row, waiting.items, waiting.published),
        ]
        for batch in admission.event_batches(events):
            await self._bus.publish_events(self._ns, self._queue, batch)

    async def _warnings(self, row: Queue) -> list[str]:
        if row.elasticity.kind is not ElasticityKind.FIXED:
            return []
        members = await self._workers.ask(Members(self._ns, row.name))
        if any(w.status is not WorkerStatus.LOST for w in members):
            return []
        return [
            f"no_members: queue {row.name!r} has no daemons and its elasticity is fixed; "
            f"the work waits until one joins (lakeshore daemon launch --queue {row.name})"
        ]

    async def _cancel(self, inv_id: str, seq: int, actor: str | None) -> bool:
        removed = await self._bus.delete_message(self._ns, self._queue, seq)
        event = InvocationEvent(
            namespace=self._ns,
            queue=self._queue,
            invocation_id=inv_id,
            ts=now(),
            type=EventType.CANCELLED,
            detail={"seq": seq, "by": actor, "removed": removed},
        )
        await self._bus.publish_events(self._ns, self._queue, EventBatch(events=[event]))
        log.info("invocation %s cancelled while pending (removed=%s)", inv_id, removed)
        return removed

    async def _patch(self, patch: QueuePatch, actor: str | None) -> Queue:
        old = self.row
        assert old is not None
        self._faults.hit("queue.patch")
        if patch.kind is not UNSET:
            raise ImmutableField(
                "kind",
                f"queue {old.name!r} is {old.kind.value}; a queue's kind is fixed at "
                "creation — create a new queue with the kind you need",
            )
        if patch.name is not UNSET:
            raise ImmutableField("name", "create a queue with the new name instead")
        changes: dict[str, Any] = {}
        if patch.description is not UNSET:
            changes["description"] = patch.description
        if patch.max_depth is not UNSET:
            changes["max_depth"] = patch.max_depth
        if patch.on_full is not UNSET:
            changes["on_full"] = patch.on_full
        if patch.elasticity is not UNSET:
            changes["elasticity"] = elasticity.merge(old.elasticity, patch.elasticity)
            await check_provider(self._store, self._ns, changes["elasticity"])
        new = msgspec.structs.replace(old, **changes)
        if new == old:
            return old
        new = msgspec.structs.replace(new, updated_at=now())
        if new.max_depth != old.max_depth:
            await self._ensure_stream(new)
        await self._commit(old, new, "patched", actor)
        self._room.wake()  # more room, or another policy: waiting submits are retried now
        return new

    async def _transition(self, verb: str, actor: str | None) -> Queue:
        old = self.row
        assert old is not None
        sources, target = _TRANSITIONS[verb]
        if old.state is target:
            return old
        if old.name == DEFAULT_QUEUE and verb == "archive":
            raise ReservedName(old.name, "archived")
        if old.state not in sources:
            raise WrongState(old.name, old.state.value, verb, "; unarchive it first")
        new = msgspec.structs.replace(old, state=target, updated_at=now())
        await self._commit(old, new, _EVENT_OF_VERB[verb], actor)
        self._room.wake()  # a queue that stopped admitting refuses its waiting submits now
        return new

    async def _delete(self, force: bool, actor: str | None) -> list[Worker]:
        old = self.row
        assert old is not None
        if old.name == DEFAULT_QUEUE:
            raise ReservedName(old.name, "deleted")
        ask = Scrub if force else Members
        members = await self._workers.ask(ask(self._ns, old.name))
        if members and not force:
            raise QueueHasMembers(old.name, [w.name for w in members])
        cancelled = await self._cancel_pending_for_deletion(actor)
        await self._bus.delete_queue(self._ns, old.name)
        await self._store.delete_queue(self._ns, old.name)
        # A queue re-created with this name starts afresh: its keys name nothing.
        await self._store.forget_keys(self._ns, old.name)
        await self._store.append_queue_event(
            self._ns,
            old.name,
            "deleted",
            actor,
            {
                "before": row_dict(old),
                "scrubbed": [w.name for w in members],
                "force": force,
                "cancelled": cancelled,
            },
        )
        log.info(
            "queue %s/%s deleted (force=%s, %d pending cancelled)",
            self._ns, old.name, force, cancelled,
        )  # fmt: skip
        return members

    async def _cancel_pending_for_deletion(self, actor: str | None) -> int:
        """Record every invocation still pending as ``cancelled`` (reason ``queue_deleted``)
        before its stream goes; running ones finish on their daemons and are recorded."""
        assert self.row is not None
        pending = await self._bus.pending_messages(
            self._ns, self._queue, levels=levels_of(self.row.kind), limit=MAX_CANCEL_ON_DELETE
        )
        ts = now()
        events = []
        for seq, payload in pending:
            try:
                inv_id = codec.decode(payload, Invocation).id
            except msgspec.DecodeError:
                continue  # not an invocation: nothing to record
            events.append(
                InvocationEvent(
                    namespace=self._ns,
                    queue=self._queue,
                    invocation_id=inv_id,
                    ts=ts,
                    type=EventType.CANCELLED,
                    detail={"seq": seq, "by": actor, "reason": "queue_deleted"},
                )  # fmt: skip
            )
        for batch in admission.event_batches(events):
            await self._bus.publish_events(self._ns, self._queue, batch)
        return len(events)

    async def _commit(self, old: Queue, new: Queue, event: str, actor: str | None) -> None:
        await self._store.update_queue(new)
        self.row = new
        await self._store.append_queue_event(
            self._ns, new.name, event, actor, {"before": row_dict(old), "after": row_dict(new)}
        )
        log.info("queue %s/%s %s", self._ns, new.name, event)

    async def _ensure_stream(self, row: Queue) -> None:
        await self._bus.ensure_queue(
            self._ns, row.name, levels=levels_of(row.kind), max_depth=row.max_depth
        )


def _key_conflict(key: str, where: str) -> Conflict:
    return Conflict(
        f"idempotency key {key!r} was used {where} with another body; a key names one "
        "invocation — retry with the same body, or use a new key"
    )
