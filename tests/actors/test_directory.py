"""QueueDirectory: which queues exist — create, the reserved ``default`` materialised on
first use, lookup, remove — each with its QueueActor spawned on the same runtime."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from lakeshore.actors import directory as directory_module
from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.directory import (
    CreateQueue,
    DirectoryMsg,
    EnsureDefault,
    Lookup,
    QueueDirectory,
    RemoveQueue,
)
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.queue import GetQueue, Submit
from lakeshore.actors.workers import Register, WorkerMsg
from lakeshore.bus.memory import InMemoryBus
from lakeshore.errors import (
    AlreadyExists,
    Internal,
    Invalid,
    InvalidName,
    QueueHasMembers,
    QueueNotFound,
    ReservedName,
    Unavailable,
)
from lakeshore.model import (
    DEFAULT_QUEUE,
    DEFAULT_QUEUE_DESCRIPTION,
    ElasticityKind,
    OnFull,
    Queue,
    QueueCreate,
    QueueKind,
    WorkerRegister,
    now,
)
from lakeshore.store.memory import InMemoryStore
from lakeshore.store.port import StoredKey

from .support import NS, ago, call, fail_once, queue_events, settle, stored_ids


async def create(directory: ActorRef[DirectoryMsg], name: str = "q", **body: Any) -> Queue:
    return await directory.ask(CreateQueue(NS, QueueCreate(name=name, **body), actor="tok-1"))


async def test_create_writes_the_row_records_it_and_spawns_its_queue_actor(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore, bus: InMemoryBus
) -> None:
    row = await create(directory, "q", kind=QueueKind.PRIORITY, max_depth=3,
                       on_full=OnFull.BLOCK, elasticity={"kind": "elastic", "max": 2})  # fmt: skip
    assert row == await store.get_queue(NS, "q")
    assert (row.kind, row.max_depth, row.on_full) == (QueueKind.PRIORITY, 3, OnFull.BLOCK)
    assert (row.elasticity.kind, row.elasticity.min) == (ElasticityKind.ELASTIC, 1)
    [created] = await queue_events(store, "q")
    assert (created.type, created.actor) == ("created", "tok-1")
    assert created.detail is not None and created.detail["after"]["name"] == "q"
    ref = await directory.ask(Lookup(NS, "q"))
    assert await ref.ask(GetQueue()) == row
    [inv] = (await settle(await ref.ask(Submit([call(0, priority=4)], actor=None)))).ids
    assert stored_ids(bus, "q", level=4) == [inv]  # its stream was made


async def test_a_queue_name_is_created_once(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore
) -> None:
    await create(directory, "q")
    with pytest.raises(AlreadyExists, match="queue 'q' already exists") as refused:
        await create(directory, "q", description="again")
    assert (refused.value.code, refused.value.http_status) == ("already_exists", 409)
    assert (await store.get_queue(NS, "q")).description == ""
    assert len(await queue_events(store, "q")) == 1


async def test_default_is_reserved_and_bad_creates_leave_nothing(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore
) -> None:
    with pytest.raises(ReservedName, match="'default' is reserved") as refused:
        await create(directory, DEFAULT_QUEUE)
    assert refused.value.code == "reserved_name"
    with pytest.raises(InvalidName, match="invalid queue name 'Bad_Name'"):
        await create(directory, "Bad_Name")
    with pytest.raises(Invalid, match="provider 'nope' does not exist"):
        await create(directory, "q", elasticity={"kind": "elastic", "max": 2, "provider": "nope"})
    with pytest.raises(Invalid, match="unknown elasticity field"):
        await create(directory, "q", elasticity={"size": 3})
    assert await store.all_queues() == []
    with pytest.raises(QueueNotFound):
        await directory.ask(Lookup(NS, "q"))


async def test_a_create_whose_stream_cannot_be_made_leaves_no_row(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore, bus: InMemoryBus
) -> None:
    fail_once(bus, "ensure_queue", Unavailable("nats did not answer"))
    with pytest.raises(Unavailable, match="nats did not answer"):
        await create(directory, "q")
    assert await store.get_queue(NS, "q") is None
    assert await queue_events(store, "q") == []
    with pytest.raises(QueueNotFound):
        await directory.ask(Lookup(NS, "q"))
    await create(directory, "q")  # and the name is free


async def test_lookup_of_an_unknown_queue_is_queue_not_found(
    directory: ActorRef[DirectoryMsg],
) -> None:
    with pytest.raises(QueueNotFound, match="queue 'nope' does not exist") as refused:
        await directory.ask(Lookup(NS, "nope"))
    assert (refused.value.code, refused.value.http_status) == ("queue_not_found", 404)


async def test_the_default_queue_is_materialised_on_first_lookup(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore
) -> None:
    assert await store.get_queue(NS, DEFAULT_QUEUE) is None
    ref = await directory.ask(Lookup(NS, DEFAULT_QUEUE))
    row = await ref.ask(GetQueue())
    assert (row.kind, row.description) == (QueueKind.FIFO, DEFAULT_QUEUE_DESCRIPTION)
    assert await store.get_queue(NS, DEFAULT_QUEUE) == row
    assert await directory.ask(Lookup(NS, DEFAULT_QUEUE)) is ref
    await directory.ask(EnsureDefault(NS))
    [created] = await queue_events(store, DEFAULT_QUEUE)
    assert (created.type, created.actor) == ("created", None)  # the system made it


async def test_ensure_default_materialises_it_once(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore
) -> None:
    await directory.ask(EnsureDefault(NS))
    await directory.ask(EnsureDefault(NS))
    assert [q.name for q in await store.all_queues()] == [DEFAULT_QUEUE]
    assert len(await queue_events(store, DEFAULT_QUEUE)) == 1


async def test_remove_deletes_the_queue_and_stops_its_actor(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore
) -> None:
    await create(directory, "q")
    ref = await directory.ask(Lookup(NS, "q"))
    assert await directory.ask(RemoveQueue(NS, "q", force=False, actor="tok-1")) == []
    assert await store.get_queue(NS, "q") is None
    with pytest.raises(QueueNotFound):
        await directory.ask(Lookup(NS, "q"))
    with pytest.raises(Unavailable, match="is not running"):
        await ref.ask(GetQueue())
    assert [e.type for e in await queue_events(store, "q")] == ["created", "deleted"]
    await create(directory, "q")  # the name can be used again


async def test_remove_refuses_a_queue_with_members_unless_forced(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore, registry: ActorRef[WorkerMsg]
) -> None:
    await create(directory, "q")
    reg = WorkerRegister(namespace=NS, name="d1", queues=["q", "other"])
    wid = (await registry.ask(Register(reg))).id
    with pytest.raises(QueueHasMembers, match=r"\(d1\)") as refused:
        await directory.ask(RemoveQueue(NS, "q", force=False, actor=None))
    assert refused.value.http_status == 409
    ref = await directory.ask(Lookup(NS, "q"))  # still there, still served
    assert (await ref.ask(GetQueue())).name == "q"
    scrubbed = await directory.ask(RemoveQueue(NS, "q", force=True, actor=None))
    assert [(w.id, w.queues) for w in scrubbed] == [(wid, ["other"])]
    assert [w.queues for w in await store.list_workers(NS)] == [["other"]]
    with pytest.raises(QueueNotFound):
        await directory.ask(Lookup(NS, "q"))


async def test_remove_refuses_the_default_queue_and_unknown_ones(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore
) -> None:
    await directory.ask(EnsureDefault(NS))
    with pytest.raises(ReservedName, match="cannot be deleted"):
        await directory.ask(RemoveQueue(NS, DEFAULT_QUEUE, force=True, actor=None))
    assert await store.get_queue(NS, DEFAULT_QUEUE) is not None
    await directory.ask(Lookup(NS, DEFAULT_QUEUE))
    with pytest.raises(QueueNotFound):
        await directory.ask(RemoveQueue(NS, "nope", force=True, actor=None))


async def test_a_new_directory_rebuilds_its_queues_from_the_store(
    outbox: Outbox,
    runtime: Runtime,
    directory: ActorRef[DirectoryMsg],
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
) -> None:
    await create(directory, "a")
    await create(directory, "b", max_depth=7)
    await runtime.stop(directory)
    again = await runtime.spawn(
        QueueDirectory(runtime, store=store, bus=bus, workers=registry, outbox=outbox)
    )
    ref = await again.ask(Lookup(NS, "b"))
    assert (await ref.ask(GetQueue())).max_depth == 7
    await again.ask(Lookup(NS, "a"))
    with pytest.raises(AlreadyExists):
        await again.ask(CreateQueue(NS, QueueCreate(name="a"), actor=None))


async def test_a_rebuild_starts_many_queues_side_by_side_each_with_its_own_row(
    outbox: Outbox,
    runtime: Runtime,
    directory: ActorRef[DirectoryMsg],
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = [f"q-{i:02}" for i in range(40)]
    for i, name in enumerate(names):
        await create(directory, name, max_depth=i + 1)
    await runtime.stop(directory)
    monkeypatch.setattr(directory_module, "START_CONCURRENCY", 8)
    reads = 0
    get_queue = store.get_queue

    async def counted(namespace: str, name: str) -> Queue | None:
        nonlocal reads
        reads += 1
        return await get_queue(namespace, name)

    monkeypatch.setattr(store, "get_queue", counted)
    again = await runtime.spawn(
        QueueDirectory(runtime, store=store, bus=bus, workers=registry, outbox=outbox)
    )
    assert reads == 0  # the rows read for the rebuild are handed to the actors
    for i, name in enumerate(names):
        row = await (await again.ask(Lookup(NS, name))).ask(GetQueue())
        assert (row.name, row.max_depth) == (name, i + 1)
    assert reads == 0


async def test_a_crash_restart_reconciles_with_the_store_and_keeps_the_other_queues(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore
) -> None:
    await create(directory, "a")
    await create(directory, "b")
    a, b = await directory.ask(Lookup(NS, "a")), await directory.ask(Lookup(NS, "b"))
    await store.delete_queue(NS, "b")  # behind its back: a row gone...
    ts = now()
    await store.insert_queue(
        Queue(name="c", namespace=NS, created_at=ts, updated_at=ts)
    )  # ...one new
    fail_once(store, "insert_queue", RuntimeError("a bug"))
    with pytest.raises(Internal, match="queue-directory failed"):
        await create(directory, "d")
    assert directory.restarts == 1
    assert await store.get_queue(NS, "d") is None
    # the queues this failure is not about keep their actors (and their waiting submits)
    assert await directory.ask(Lookup(NS, "a")) is a
    with pytest.raises(Unavailable, match="is not running"):
        await b.ask(GetQueue())
    with pytest.raises(QueueNotFound):
        await directory.ask(Lookup(NS, "b"))
    c = await directory.ask(Lookup(NS, "c"))
    assert (await c.ask(GetQueue())).name == "c"
    await create(directory, "d")


async def test_a_queue_whose_actor_could_not_start_is_started_on_first_lookup(
    outbox: Outbox,
    runtime: Runtime,
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ts = now()
    for name in ("a", "b"):
        await store.insert_queue(Queue(name=name, namespace=NS, created_at=ts, updated_at=ts))
    fail_once(bus, "ensure_queue", Unavailable("nats did not answer"))  # a's stream
    with caplog.at_level(logging.WARNING, logger=directory_module.__name__):
        directory = await runtime.spawn(
            QueueDirectory(runtime, store=store, bus=bus, workers=registry, outbox=outbox)
        )
    assert "queue default/a not started (retried on first use)" in caplog.text
    assert (await (await directory.ask(Lookup(NS, "b"))).ask(GetQueue())).name == "b"
    a = await directory.ask(Lookup(NS, "a"))
    [inv] = (await settle(await a.ask(Submit([call()], actor=None)))).ids
    assert stored_ids(bus, "a") == [inv]


async def test_a_queue_recreated_with_a_deleted_ones_name_forgets_its_keys(
    directory: ActorRef[DirectoryMsg],
) -> None:
    spec = call(0, idempotency_key="nightly")
    await create(directory, "q")
    ref = await directory.ask(Lookup(NS, "q"))
    [first] = (await settle(await ref.ask(Submit([spec], actor=None)))).ids
    await directory.ask(RemoveQueue(NS, "q", force=False, actor=None))
    await create(directory, "q")
    ref = await directory.ask(Lookup(NS, "q"))
    again = await settle(await ref.ask(Submit([spec], actor=None)))
    assert again.ids != [first] and again.duplicates == []


async def test_the_directory_forgets_expired_idempotency_keys_when_it_starts(
    outbox: Outbox,
    runtime: Runtime,
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
) -> None:
    entry = StoredKey(invocation_id="0190aaaa-0000-7000-8000-000000000000", digest="d")
    await store.put_keys(NS, "q", {"old": entry}, ago(120))
    await store.put_keys(NS, "q", {"new": entry}, ago(10))
    await runtime.spawn(
        QueueDirectory(
            runtime, store=store, bus=bus, workers=registry, outbox=outbox, key_ttl_s=60.0
        )
    )
    assert list(await store.get_keys(NS, "q", ["old", "new"], ago(3600))) == ["new"]
