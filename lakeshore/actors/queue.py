"""QueueActor: the one owner of a queue's row, its state transitions, admission and stream.

Every mutation goes through :meth:`QueueActor.handle`, is written to the store and recorded
as a queue event with the acting token and the row before and after.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct

from lakeshore import elasticity, quotas
from lakeshore.actors.base import Actor, ActorRef
from lakeshore.actors.idempotency import DEFAULT_KEY_TTL_S
from lakeshore.actors.intake import NO_FAULTS, Intake
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.workers import Members, Scrub
from lakeshore.bus.port import Bus
from lakeshore.errors import (
    ImmutableField,
    Invalid,
    LakeshoreError,
    QueueHasMembers,
    QueueNotFound,
    ReservedName,
    WrongState,
)
from lakeshore.faults import Faults
from lakeshore.model import (
    BUILTIN_PROVIDER,
    CLOSED_STATES,
    DEFAULT_QUEUE,
    Elasticity,
    ElasticityKind,
    EventBatch,
    EventType,
    InvocationEvent,
    InvocationSubmit,
    ProviderKind,
    Queue,
    QueuePatch,
    QueueState,
    Worker,
    levels_of,
    now,
)
from lakeshore.quotas import DEFAULT_QUOTAS, Quotas
from lakeshore.store.port import ProviderRows, QueueStore

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
            f"add it with `lakeshore providers add {e.provider} --kind local|ssh|slurm "
            f"-n {namespace}` "
            f"(list them with `lakeshore providers ls -n {namespace}`), or use the built-in "
            f"{BUILTIN_PROVIDER!r}"
        )
    if row.kind is ProviderKind.EXTERNAL and e.kind is not ElasticityKind.FIXED:
        raise Invalid(
            f"elasticity kind {e.kind.value!r} needs a provider the controller can launch "
            f"daemons on, but {e.provider!r} is external (its daemons are started by hand "
            "with `lakeshore daemon run`); use a local, ssh or slurm provider, or keep "
            "elasticity fixed"
        )


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
        outbox: Outbox,
        key_ttl_s: float = DEFAULT_KEY_TTL_S,
        faults: Faults = NO_FAULTS,
        quotas: Quotas = DEFAULT_QUOTAS,
        row: Queue | None = None,
    ) -> None:
        """``outbox``: publishes the submits' events; ``row``: the queue's row as just read
        by the caller, so that the first start need not read it again (a restart of the
        actor always reads it)."""
        self.name = f"queue:{namespace}/{name}"
        self._quotas = quotas
        self._ns, self._queue = namespace, name
        self._store, self._bus, self._workers = store, bus, workers
        self.row: Queue | None = None
        self._preloaded = row
        self._deleted = False
        self._faults = faults
        self._intake = Intake(
            namespace, name, row=self._current, store=store, bus=bus, workers=workers,
            outbox=outbox, key_ttl_s=key_ttl_s, faults=faults,
        )  # fmt: skip

    def _current(self) -> Queue:
        assert self.row is not None
        return self.row

    async def started(self) -> None:
        preloaded, self._preloaded = self._preloaded, None
        self.row = preloaded or await self._store.get_queue(self._ns, self._queue)
        if self.row is None:
            raise RuntimeError(f"queue {self._ns}/{self._queue} has no row")
        await self._ensure_stream(self.row)

    async def stopped(self) -> None:
        await self._intake.close(QueueNotFound(self._ns, self._queue))

    async def handle(self, msg: QueueMsg) -> Any:
        assert self.row is not None
        if self._deleted:
            # Messages queued behind the DeleteQueue, before the directory stops this actor:
            # none may touch the stream again (a PATCH would re-create it).
            raise QueueNotFound(self._ns, self._queue)
        match msg:
            case GetQueue():
                return self.row
            case CountWaiting():
                return self._intake.waiting
            case PatchQueue(patch=patch, actor=actor):
                return await self._patch(patch, actor)
            case Transition(verb=verb, actor=actor):
                return await self._transition(verb, actor)
            case DeleteQueue(force=force, actor=actor):
                return await self._delete(force, actor)
            case Submit(invocations=specs, wait_s=wait_s):
                return await self._intake.submit(specs, wait_s)
            case CancelPending(invocation_id=inv_id, seq=seq, actor=actor):
                return await self._cancel(inv_id, seq, actor)

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
        if patch.labels is not UNSET:
            changes["labels"] = dict(patch.labels)
        if patch.code is not UNSET:
            changes["code"] = patch.code
        if patch.defaults is not UNSET:
            changes["defaults"] = patch.defaults
        if patch.elasticity is not UNSET:
            changes["elasticity"] = elasticity.merge(old.elasticity, patch.elasticity)
            # A max set before the ceiling was lowered may stay; it may not be raised.
            if changes["elasticity"].max > old.elasticity.max:
                quotas.check_elasticity(self._quotas, changes["elasticity"])
            await check_provider(self._store, self._ns, changes["elasticity"])
        new = msgspec.structs.replace(old, **changes)
        if new == old:
            return old
        new = msgspec.structs.replace(new, updated_at=now())
        if new.max_depth != old.max_depth:
            await self._ensure_stream(new)
        await self._commit(old, new, "patched", actor)
        self._intake.wake()  # more room, or another policy: waiting submits are retried now
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
        # The row refuses first and admits last; the stream follows it, so that a submit
        # the row let through and the stream refused can only meet a row that refuses now.
        if _admits(new) and not _admits(old):
            await self._ensure_stream(new)
        await self._commit(old, new, _EVENT_OF_VERB[verb], actor)
        if _admits(old) and not _admits(new):
            try:
                await self._ensure_stream(new)
            except LakeshoreError as e:
                log.warning(
                    "queue %s/%s is %s, but its stream could not be closed now (%s): it is "
                    "closed when the queue is next ensured (at the next start)",
                    self._ns, new.name, new.state.value, e,
                )  # fmt: skip
        self._intake.wake()  # a queue that stopped admitting refuses its waiting submits now
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
        cancelled = await self._intake.cancel_all_pending(actor)
        await self._bus.delete_queue(self._ns, old.name)
        await self._store.delete_queue(self._ns, old.name)
        # A queue re-created with this name starts afresh: its keys name nothing.
        await self._store.forget_keys(self._ns, old.name)
        self._deleted = True
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

    async def _commit(self, old: Queue, new: Queue, event: str, actor: str | None) -> None:
        await self._store.update_queue(new)
        self.row = new
        await self._store.append_queue_event(
            self._ns, new.name, event, actor, {"before": row_dict(old), "after": row_dict(new)}
        )
        log.info("queue %s/%s %s", self._ns, new.name, event)

    async def _ensure_stream(self, row: Queue) -> None:
        await self._bus.ensure_queue(
            self._ns, row.name, levels=levels_of(row.kind), max_depth=row.max_depth,
            admitting=_admits(row),
        )  # fmt: skip


def _admits(row: Queue) -> bool:
    """Whether the queue's stream takes publishes (:meth:`Bus.ensure_queue`)."""
    return row.state not in CLOSED_STATES
