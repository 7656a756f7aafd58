"""QueueActor: what each message answers and writes — the row and its queue events in the
store, invocations, events and nudges on the bus — and its refusals.

Its intake (``actors/intake.py``), admission policy (``actors/admission.py``) and durable
idempotency keys (``actors/idempotency.py``) are tested through it; ``on_full: block`` (the
waiting room) is in ``test_waiting_room.py``.
"""

from __future__ import annotations

import msgspec
import pytest

from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.queue import (
    CancelPending,
    CountWaiting,
    DeleteQueue,
    GetQueue,
    PatchQueue,
    QueueActor,
    QueueMsg,
    Submit,
    Transition,
)
from lakeshore.actors.workers import Exited, Register, WorkerMsg
from lakeshore.bus import codec
from lakeshore.bus.memory import DUPLICATE_WINDOW_S, InMemoryBus
from lakeshore.errors import (
    Conflict,
    ImmutableField,
    InsufficientStorage,
    Internal,
    Invalid,
    LakeshoreError,
    QueueFull,
    QueueHasMembers,
    QueueNotFound,
    ReservedName,
    TooLarge,
    Unavailable,
    WrongState,
)
from lakeshore.model import (
    MAX_JSON_DEPTH,
    ElasticityKind,
    EventType,
    Invocation,
    InvocationSubmit,
    OnFull,
    Provider,
    ProviderKind,
    Queue,
    QueueKind,
    QueuePatch,
    QueueState,
    SubmitAnswer,
    WorkerRegister,
    now,
)
from lakeshore.store.memory import InMemoryStore

from .conftest import SpawnQueue
from .support import NS, ago, call, fail_once, published, queue_events, settle, stored_ids


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


async def submit(ref: ActorRef[QueueMsg], *specs: InvocationSubmit) -> SubmitAnswer:
    """Submit and wait for the answer (admitted at once unless the queue blocks)."""
    return await settle(await ref.ask(Submit(list(specs), actor="tok-1")))


async def member(registry: ActorRef[WorkerMsg], name: str, *queues: str) -> str:
    reg = WorkerRegister(namespace=NS, name=name, queues=list(queues))
    return (await registry.ask(Register(reg))).id


# ---- rows ------------------------------------------------------------------------------


async def test_get_queue_answers_the_stored_row(
    spawn_queue: SpawnQueue, store: InMemoryStore
) -> None:
    ref = await spawn_queue("q", kind=QueueKind.PRIORITY, max_depth=5)
    row = await ref.ask(GetQueue())
    assert row == await store.get_queue(NS, "q")
    assert (row.kind, row.max_depth, row.state) == (QueueKind.PRIORITY, 5, QueueState.ACTIVE)
    assert await ref.ask(CountWaiting()) == 0


async def test_a_queue_without_a_row_cannot_start(
    outbox: Outbox,
    runtime: Runtime,
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
) -> None:
    with pytest.raises(RuntimeError, match="has no row"):
        await runtime.spawn(
            QueueActor(NS, "ghost", store=store, bus=bus, workers=registry, outbox=outbox)
        )


async def test_a_patch_is_written_and_recorded_with_its_actor_and_a_no_op_is_not(
    spawn_queue: SpawnQueue, store: InMemoryStore
) -> None:
    ref = await spawn_queue("q")
    new = await ref.ask(PatchQueue(QueuePatch(description="nightly"), actor="tok-1"))
    assert new.description == "nightly"
    assert await store.get_queue(NS, "q") == new
    [patched] = await queue_events(store, "q", "patched")
    assert patched.actor == "tok-1"
    assert patched.detail is not None
    assert (patched.detail["before"]["description"], patched.detail["after"]["description"]) == (
        "",
        "nightly",
    )
    again = await ref.ask(PatchQueue(QueuePatch(description="nightly"), actor="tok-1"))
    assert again == new
    assert len(await queue_events(store, "q", "patched")) == 1


@pytest.mark.parametrize("patch", [QueuePatch(kind="priority"), QueuePatch(name="other")])
async def test_kind_and_name_are_immutable(
    spawn_queue: SpawnQueue, store: InMemoryStore, patch: QueuePatch
) -> None:
    ref = await spawn_queue("q")
    with pytest.raises(ImmutableField) as refused:
        await ref.ask(PatchQueue(patch, actor=None))
    assert refused.value.code == "immutable_field"
    assert await queue_events(store, "q") == []


async def test_a_patch_of_max_depth_resizes_the_stream(spawn_queue: SpawnQueue) -> None:
    ref = await spawn_queue("q", max_depth=1)
    await submit(ref, call(0))
    with pytest.raises(QueueFull):
        await submit(ref, call(1))
    await ref.ask(PatchQueue(QueuePatch(max_depth=2), actor=None))
    await submit(ref, call(1))
    with pytest.raises(QueueFull):
        await submit(ref, call(2))


async def test_a_patch_merges_the_elasticity_object(
    spawn_queue: SpawnQueue, store: InMemoryStore
) -> None:
    ref = await spawn_queue("q")
    patch = QueuePatch(elasticity={"kind": "fully_elastic", "max": 3})
    row = await ref.ask(PatchQueue(patch, actor=None))
    assert (row.elasticity.kind, row.elasticity.min, row.elasticity.max) == (
        ElasticityKind.FULLY_ELASTIC,
        0,
        3,
    )
    assert (await store.get_queue(NS, "q")).elasticity == row.elasticity


async def test_a_patch_naming_a_provider_it_cannot_launch_on_changes_nothing(
    spawn_queue: SpawnQueue, store: InMemoryStore
) -> None:
    ref = await spawn_queue("q")
    await store.insert_provider(
        Provider(name="by-hand", namespace=NS, kind=ProviderKind.EXTERNAL, created_at=now())
    )
    unknown = QueuePatch(elasticity={"kind": "elastic", "max": 2, "provider": "nope"})
    with pytest.raises(Invalid, match="provider 'nope' does not exist"):
        await ref.ask(PatchQueue(unknown, actor=None))
    external = QueuePatch(elasticity={"kind": "elastic", "max": 2, "provider": "by-hand"})
    with pytest.raises(Invalid, match="'by-hand' is external"):
        await ref.ask(PatchQueue(external, actor=None))
    bad = QueuePatch(elasticity={"kind": "elastic", "max": 0})
    with pytest.raises(Invalid, match="max"):
        await ref.ask(PatchQueue(bad, actor=None))
    assert (await ref.ask(GetQueue())).elasticity.kind is ElasticityKind.FIXED
    assert await queue_events(store, "q") == []


# ---- transitions -----------------------------------------------------------------------


async def test_transitions_are_written_recorded_and_a_repeat_is_a_no_op(
    spawn_queue: SpawnQueue, store: InMemoryStore
) -> None:
    ref = await spawn_queue("q")
    assert (await ref.ask(Transition("drain", "tok-1"))).state is QueueState.DRAINING
    assert (await ref.ask(Transition("drain", "tok-1"))).state is QueueState.DRAINING
    assert (await store.get_queue(NS, "q")).state is QueueState.DRAINING
    assert (await ref.ask(Transition("archive", None))).state is QueueState.ARCHIVED
    with pytest.raises(WrongState, match="queue 'q' is archived; cannot drain") as refused:
        await ref.ask(Transition("drain", None))
    assert refused.value.code == "wrong_state"
    assert (await ref.ask(Transition("unarchive", None))).state is QueueState.ACTIVE
    events = await queue_events(store, "q")
    assert [e.type for e in events] == ["drained", "archived", "unarchived"]
    assert events[0].actor == "tok-1"
    assert events[0].detail is not None
    assert (events[0].detail["before"]["state"], events[0].detail["after"]["state"]) == (
        "active",
        "draining",
    )


@pytest.mark.parametrize("verb", ["drain", "archive"])
async def test_a_queue_that_stopped_admitting_refuses_submits_until_unarchived(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus, verb: str
) -> None:
    ref = await spawn_queue("q")
    await ref.ask(Transition(verb, None))
    with pytest.raises(WrongState, match="cannot accept submissions; unarchive it"):
        await ref.ask(Submit([call()], actor=None))
    assert await published(outbox, bus) == [] and bus.nudges == []
    await ref.ask(Transition("unarchive", None))
    assert len((await submit(ref, call())).ids) == 1


async def test_the_default_queue_cannot_be_archived_or_deleted(
    spawn_queue: SpawnQueue, store: InMemoryStore
) -> None:
    ref = await spawn_queue("default")
    with pytest.raises(ReservedName, match="cannot be archived") as refused:
        await ref.ask(Transition("archive", None))
    assert refused.value.code == "reserved_name"
    with pytest.raises(ReservedName, match="cannot be deleted"):
        await ref.ask(DeleteQueue(force=True, actor=None))
    assert (await store.get_queue(NS, "default")).state is QueueState.ACTIVE
    await ref.ask(Transition("drain", None))  # draining it is allowed


# ---- submit ----------------------------------------------------------------------------


async def test_a_submit_is_stored_announced_with_its_seqs_and_nudged_once(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q")
    answer = await submit(ref, call(0), call(1, max_attempts=3))
    assert (answer.queue, answer.namespace, answer.duplicates) == ("q", NS, [])
    assert answer.ids == sorted(answer.ids)  # time-ordered
    await settle(outbox.flushed())
    [(ns, queue, batch)] = bus.events  # one event batch for the whole submit
    assert (ns, queue) == (NS, "q")
    assert [e.type for e in batch.events] == [EventType.SUBMITTED] * 2
    assert [e.invocation_id for e in batch.events] == answer.ids
    details = [e.detail or {} for e in batch.events]
    assert [d["seq"] for d in details] == [1, 2]
    assert [(d["fn"], d["max_attempts"]) for d in details] == [("jobs:work", 1), ("jobs:work", 3)]
    assert bus.nudges == [(NS, "q")]
    assert stored_ids(bus, "q") == answer.ids


async def test_every_admitted_submit_nudges_its_queue(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q")
    for n in range(3):
        await submit(ref, call(n))
    assert bus.nudges == [(NS, "q")] * 3
    assert [(e.detail or {})["seq"] for e in await published(outbox, bus, EventType.SUBMITTED)] == [
        1,
        2,
        3,
    ]


async def test_a_priority_invocation_is_stored_on_its_level(
    spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q", kind=QueueKind.PRIORITY)
    [high] = (await submit(ref, call(0, priority=7))).ids
    [low] = (await submit(ref, call(1))).ids
    assert stored_ids(bus, "q", level=7) == [high]
    assert stored_ids(bus, "q", level=0) == [low]


async def test_an_idempotent_resubmit_answers_the_same_id_as_a_duplicate(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q")
    first = await submit(ref, call(0, idempotency_key="nightly-1"))
    again = await submit(ref, call(0, idempotency_key="nightly-1"), call(1))
    assert again.ids[0] == first.ids[0]
    assert again.duplicates == first.ids
    # Nothing is stored or announced twice: the first submit's message is recorded by its
    # outbox, its claim, or a new term's look at the stream.
    announced = [e.invocation_id for e in await published(outbox, bus, EventType.SUBMITTED)]
    assert announced == [first.ids[0], again.ids[1]]
    assert stored_ids(bus, "q") == [first.ids[0], again.ids[1]]


async def test_an_idempotent_resubmit_after_a_restart_answers_the_first_id(
    outbox: Outbox,
    runtime: Runtime,
    spawn_queue: SpawnQueue,
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
) -> None:
    ref = await spawn_queue("q")
    first = await submit(ref, call(0, idempotency_key="nightly-1"))
    await runtime.stop(ref)
    ref = await runtime.spawn(
        QueueActor(NS, "q", store=store, bus=bus, workers=registry, outbox=outbox)
    )
    again = await submit(ref, call(0, idempotency_key="nightly-1"))
    assert again.ids == first.ids  # the key is durable: the same invocation
    assert again.duplicates == first.ids
    assert {e.invocation_id for e in await published(outbox, bus, EventType.SUBMITTED)} == set(
        first.ids
    )
    assert stored_ids(bus, "q") == first.ids


async def test_a_key_reused_with_another_body_is_a_conflict(
    spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q")
    await submit(ref, call(0, idempotency_key="k"))
    with pytest.raises(Conflict, match="idempotency key 'k' was used by invocation") as refused:
        await ref.ask(Submit([call(1, idempotency_key="k")], actor=None))
    assert refused.value.http_status == 409
    with pytest.raises(Conflict, match="idempotency key 'j' was used twice in this batch"):
        await ref.ask(Submit([call(0, idempotency_key="j"), call(1, idempotency_key="j")], None))
    assert len(stored_ids(bus, "q")) == 1


async def test_a_batch_repeating_a_key_with_the_same_body_is_one_invocation(
    spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q")
    answer = await submit(ref, call(0, idempotency_key="k"), call(0, idempotency_key="k"))
    assert answer.ids[0] == answer.ids[1]
    assert stored_ids(bus, "q") == answer.ids[:1]


async def test_a_recorded_invocation_is_not_published_again_after_the_duplicate_window(
    runtime: Runtime, store: InMemoryStore, registry: ActorRef[WorkerMsg]
) -> None:
    clock = [0.0]
    bus = InMemoryBus(clock=lambda: clock[0])
    outbox = Outbox(bus)  # on this bus
    ts = now()
    await store.insert_queue(Queue(name="q", namespace=NS, created_at=ts, updated_at=ts))
    ref = await runtime.spawn(
        QueueActor(NS, "q", store=store, bus=bus, workers=registry, outbox=outbox)
    )
    [inv] = (await submit(ref, call(0, idempotency_key="k"))).ids
    await store.append_invocation_events(await published(outbox, bus))  # what the Recorder does
    clock[0] += DUPLICATE_WINDOW_S + 1  # the stream forgot the message id
    again = await submit(ref, call(0, idempotency_key="k"))
    assert (again.ids, again.duplicates) == ([inv], [inv])
    assert stored_ids(bus, "q") == [inv]
    assert len(await published(outbox, bus, EventType.SUBMITTED)) == 1
    await outbox.close()


async def test_a_key_older_than_its_ttl_names_nothing(
    runtime: Runtime, store: InMemoryStore, registry: ActorRef[WorkerMsg]
) -> None:
    clock = [0.0]
    bus = InMemoryBus(clock=lambda: clock[0])
    outbox = Outbox(bus)  # on this bus
    ts = now()
    await store.insert_queue(Queue(name="q", namespace=NS, created_at=ts, updated_at=ts))
    actor = QueueActor(
        NS, "q", store=store, bus=bus, workers=registry, outbox=outbox, key_ttl_s=60.0
    )
    ref = await runtime.spawn(actor)
    [first] = (await submit(ref, call(0, idempotency_key="k"))).ids
    [entry] = (await store.get_keys(NS, "q", ["k"], ago(3600))).values()
    assert entry.invocation_id == first
    await store.put_keys(NS, "q", {"k": entry}, ago(120))  # stored 2 minutes ago
    clock[0] += DUPLICATE_WINDOW_S + 1
    again = await submit(ref, call(0, idempotency_key="k"))
    assert again.ids != [first] and again.duplicates == []
    assert stored_ids(bus, "q") == [first, *again.ids]


@pytest.mark.parametrize(
    ("specs", "error", "says"),
    [
        ([InvocationSubmit()], Invalid, "needs exactly one of fn"),
        ([InvocationSubmit(fn="x:y", command=["true"])], Invalid, "needs exactly one of fn"),
        ([InvocationSubmit(fn="not a function")], Invalid, "must look like"),
        ([InvocationSubmit(command=[])], Invalid, "non-empty argv"),
        ([call(0), call(1, priority=3)], Invalid, "invocation 1 has priority 3 but queue 'q'"),
        (
            [InvocationSubmit(fn="jobs:work", args=["x" * 1_100_000])],
            TooLarge,
            "pass large inputs by reference",
        ),
        ([call(0, kwargs={"x": _nested(MAX_JSON_DEPTH + 1)})], Invalid, "nested more than"),
    ],
)
async def test_a_bad_submit_is_refused_whole_and_admits_nothing(
    outbox: Outbox,
    spawn_queue: SpawnQueue,
    bus: InMemoryBus,
    specs: list[InvocationSubmit],
    error: type[LakeshoreError],
    says: str,
) -> None:
    ref = await spawn_queue("q")
    with pytest.raises(error, match=says):
        await ref.ask(Submit(specs, actor=None))
    assert stored_ids(bus, "q") == []
    assert await published(outbox, bus) == [] and bus.nudges == []
    await outbox.close()


async def test_a_full_reject_queue_answers_queue_full_and_publishes_nothing(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q", max_depth=1, on_full=OnFull.REJECT)
    [first] = (await submit(ref, call(0))).ids
    with pytest.raises(QueueFull, match="queue 'q' is full: max_depth 1 reached") as refused:
        await ref.ask(Submit([call(1)], actor=None))
    assert (refused.value.code, refused.value.http_status) == ("queue_full", 429)
    assert [e.invocation_id for e in await published(outbox, bus)] == [first]
    assert bus.nudges == [(NS, "q")]
    assert stored_ids(bus, "q") == [first]


async def test_a_reject_batch_keeps_its_first_items_and_says_how_many(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q", max_depth=2)
    with pytest.raises(QueueFull, match="the first 2 of 3 were admitted"):
        await ref.ask(Submit([call(0), call(1), call(2)], actor=None))
    stored = stored_ids(bus, "q")
    assert len(stored) == 2
    assert [e.invocation_id for e in await published(outbox, bus, EventType.SUBMITTED)] == stored


async def test_drop_oldest_evicts_the_oldest_pending_and_records_it_dropped(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q", max_depth=2, on_full=OnFull.DROP_OLDEST)
    [a, b] = (await submit(ref, call(0), call(1))).ids
    [(_, running)] = bus.claim(NS, "q", 0, 1)  # a daemon runs a
    [c] = (await submit(ref, call(2))).ids
    [dropped] = await published(outbox, bus, EventType.DROPPED)
    assert dropped.invocation_id == b  # the oldest *pending*, not the running a
    record = dropped.detail.pop("submission")  # the drop may be all the history hears of it
    assert dropped.detail == {"seq": 2, "reason": "on_full drop_oldest"}
    [submitted_b] = [
        e for e in await published(outbox, bus, EventType.SUBMITTED) if e.invocation_id == b
    ]
    assert record == submitted_b.detail, "what the submit's own event recorded"
    # the eviction is published with the submit that caused it, before its submitted event
    *_, drop, last = await published(outbox, bus)
    assert [(e.type, e.invocation_id) for e in (drop, last)] == [
        (EventType.DROPPED, b),
        (EventType.SUBMITTED, c),
    ]
    counts = await bus.queue_counts(NS, "q", levels=1)
    assert (counts.pending, counts.running) == (1, 1)
    assert codec.decode(running, Invocation).id == a
    assert stored_ids(bus, "q") == [c]


async def test_drop_oldest_never_drops_running_work(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q", max_depth=2, on_full=OnFull.DROP_OLDEST)
    await submit(ref, call(0), call(1))
    assert len(bus.claim(NS, "q", 0, 2)) == 2  # both run
    with pytest.raises(QueueFull, match="every stored invocation is running"):
        await ref.ask(Submit([call(2)], actor=None))
    assert await published(outbox, bus, EventType.DROPPED) == []
    assert (await bus.queue_counts(NS, "q", levels=1)).running == 2


async def test_a_fixed_queue_without_live_members_warns(
    spawn_queue: SpawnQueue, registry: ActorRef[WorkerMsg]
) -> None:
    ref = await spawn_queue("q")
    [warning] = (await submit(ref, call())).warnings
    assert warning.startswith("no_members: queue 'q' has no daemons")
    await member(registry, "d1", "q")
    assert (await submit(ref, call())).warnings == []


async def test_a_scaled_queue_does_not_warn_about_members(spawn_queue: SpawnQueue) -> None:
    ref = await spawn_queue("q")
    await ref.ask(PatchQueue(QueuePatch(elasticity={"kind": "fully_elastic", "max": 2}), None))
    assert (await submit(ref, call())).warnings == []


async def test_cancel_pending_removes_the_message_and_announces_it(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q")
    [inv] = (await submit(ref, call())).ids
    [sub] = await published(outbox, bus, EventType.SUBMITTED)
    seq = (sub.detail or {})["seq"]
    assert await ref.ask(CancelPending(invocation_id=inv, seq=seq, actor="tok-1")) is True
    assert stored_ids(bus, "q") == []
    assert await ref.ask(CancelPending(invocation_id=inv, seq=seq, actor="tok-1")) is False
    cancels = await published(outbox, bus, EventType.CANCELLED)
    assert [(e.invocation_id, e.epoch) for e in cancels] == [(inv, None)] * 2
    assert [e.detail for e in cancels] == [
        {"seq": seq, "by": "tok-1", "removed": True},
        {"seq": seq, "by": "tok-1", "removed": False},
    ]


# ---- delete ----------------------------------------------------------------------------


async def test_delete_is_refused_while_the_queue_has_members(
    spawn_queue: SpawnQueue, store: InMemoryStore, bus: InMemoryBus, registry: ActorRef[WorkerMsg]
) -> None:
    ref = await spawn_queue("q")
    await member(registry, "d1", "q")
    await submit(ref, call())
    with pytest.raises(QueueHasMembers, match=r"still has 1 member\(s\) \(d1\)") as refused:
        await ref.ask(DeleteQueue(force=False, actor=None))
    assert (refused.value.code, refused.value.http_status) == ("queue_has_members", 409)
    assert await store.get_queue(NS, "q") is not None
    assert (await bus.queue_counts(NS, "q", levels=1)).pending == 1


async def test_a_forced_delete_scrubs_members_and_removes_row_and_stream(
    outbox: Outbox,
    spawn_queue: SpawnQueue,
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
) -> None:
    ref = await spawn_queue("q")
    wid = await member(registry, "d1", "q", "other")
    [running, pending] = (await submit(ref, call(0), call(1))).ids
    assert len(bus.claim(NS, "q", 0, 1)) == 1  # the first runs on d1
    scrubbed = await ref.ask(DeleteQueue(force=True, actor="tok-1"))
    assert [(w.id, w.queues) for w in scrubbed] == [(wid, ["other"])]
    assert [w.queues for w in await store.list_workers(NS)] == [["other"]]
    assert await store.get_queue(NS, "q") is None
    with pytest.raises(Unavailable, match="no stream"):
        bus.claim(NS, "q", 0, 1)
    [deleted] = await queue_events(store, "q", "deleted")
    assert deleted.actor == "tok-1"
    assert deleted.detail is not None
    assert (deleted.detail["scrubbed"], deleted.detail["force"]) == (["d1"], True)
    assert (deleted.detail["before"]["name"], deleted.detail["cancelled"]) == ("q", 1)
    # the pending invocation is recorded cancelled; the running one finishes on its daemon
    [cancelled] = await published(outbox, bus, EventType.CANCELLED)
    assert cancelled.invocation_id == pending != running
    record = cancelled.detail.pop("submission")  # as its submit's own event recorded it
    assert cancelled.detail == {"seq": 2, "by": "tok-1", "reason": "queue_deleted"}
    [submitted] = [
        e for e in await published(outbox, bus, EventType.SUBMITTED) if e.invocation_id == pending
    ]
    assert record == submitted.detail


async def test_a_lost_member_still_holds_the_queue_but_a_stopped_one_does_not(
    spawn_queue: SpawnQueue, registry: ActorRef[WorkerMsg]
) -> None:
    ref = await spawn_queue("q")
    wid = await member(registry, "d1", "q")
    await registry.ask(Exited(NS, wid, 1, "crashed"))  # lost: it may come back
    with pytest.raises(QueueHasMembers):
        await ref.ask(DeleteQueue(force=False, actor=None))
    await registry.ask(Exited(NS, wid, None, "stopped by hand", requested=True))
    assert await ref.ask(DeleteQueue(force=False, actor=None)) == []


# ---- restart ---------------------------------------------------------------------------


async def test_a_crash_restarts_the_queue_actor_from_its_stored_row_and_stream(
    spawn_queue: SpawnQueue, store: InMemoryStore, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q")
    row = await store.get_queue(NS, "q")
    assert row is not None
    await store.update_queue(msgspec.structs.replace(row, description="written meanwhile"))
    await bus.delete_queue(NS, "q")  # and its stream vanished
    fail_once(store, "update_queue", RuntimeError("a bug"))
    with pytest.raises(Internal, match="queue:default/q failed"):
        await ref.ask(PatchQueue(QueuePatch(description="mine"), actor=None))
    assert ref.restarts == 1
    assert (await ref.ask(GetQueue())).description == "written meanwhile"
    [inv] = (await submit(ref, call())).ids  # the restart ensured the stream again
    assert stored_ids(bus, "q") == [inv]
    patched = await ref.ask(PatchQueue(QueuePatch(description="mine"), actor=None))
    assert patched.description == "mine"
    assert [e.type for e in await queue_events(store, "q")] == ["patched"]


async def test_a_patch_reaching_a_deleted_queues_actor_recreates_no_stream(
    spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q")
    await ref.ask(DeleteQueue(force=False, actor=None))
    with pytest.raises(QueueNotFound):
        await ref.ask(PatchQueue(QueuePatch(max_depth=5), actor=None))
    with pytest.raises(Unavailable, match="no stream"):
        bus.claim(NS, "q", 0, 1)  # the deleted queue's stream is still gone


@pytest.mark.parametrize(
    "failure",
    [InsufficientStorage("record events", "the store is full"), Unavailable("NATS did not answer")],
)
async def test_a_submit_is_answered_once_stored_and_its_events_follow_when_they_can(
    failure: LakeshoreError, outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    # The answer waits for the work alone: events the bus refuses for a while (its store
    # full, NATS silent) are published again until they are stored, nothing taken back.
    ref = await spawn_queue("q")
    fail_once(bus, "publish_events", failure)
    answer = await submit(ref, call(0, idempotency_key="k"), call(1))
    assert stored_ids(bus, "q") == answer.ids
    announced = await published(outbox, bus, EventType.SUBMITTED)
    assert [e.invocation_id for e in announced] == answer.ids
    again = await submit(ref, call(0, idempotency_key="k"))
    assert again.duplicates == answer.ids[:1]  # the key still names the stored invocation
    assert len(await published(outbox, bus, EventType.SUBMITTED)) == 2  # nothing again
