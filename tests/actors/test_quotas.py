"""Quotas per org, at their owners: the checks, the QueueDirectory and QueueActor (queues,
the elasticity ceiling), the WorkerRegistry (daemons) and the pending tally — each refusal
names its quota and leaves nothing changed. (Through the API, and the local providers'
quota: tests/http/test_quotas_api.py; the runtime fixture is tests/actors/conftest.py's.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakeshore import quotas
from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.directory import (
    CreateQueue,
    DirectoryMsg,
    Lookup,
    QueueDirectory,
    RemoveQueue,
)
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.queue import GetQueue, PatchQueue
from lakeshore.actors.workers import (
    Exited,
    ListWorkers,
    Prepare,
    Register,
    WorkerMsg,
    WorkerRegistry,
)
from lakeshore.bus.memory import InMemoryBus
from lakeshore.errors import Invalid, QuotaExceeded
from lakeshore.model import (
    Elasticity,
    ElasticityKind,
    Namespace,
    Queue,
    QueueCreate,
    QueuePatch,
    Worker,
    WorkerRegister,
    WorkerStatus,
    now,
)
from lakeshore.quotas import Quotas
from lakeshore.services.pending import PendingTally
from lakeshore.store import open_store
from lakeshore.store.memory import InMemoryStore

#: namespace -> org: two namespaces of org acme, one of org globex
ORGS = {"alpha": "acme", "beta": "acme", "gamma": "globex"}
LIMITS = Quotas(
    queues_per_namespace=2,
    daemons_per_org=3,
    local_daemons_per_host=2,
    pending_per_org=5,
    elasticity_max=4,
)
WAIT_S = 5.0


def over(quota: str, limit: int) -> Any:
    """``pytest.raises`` for a QuotaExceeded naming ``quota`` and its value."""
    return pytest.raises(QuotaExceeded, match=rf"over quota {quota} \({limit}\)")


# ---- the checks ------------------------------------------------------------------------


def test_the_defaults_are_generous_but_bounded() -> None:
    q = Quotas()
    assert q.queues_per_namespace == 10_000 and q.daemons_per_org == 1_000
    assert q.local_daemons_per_host == 64 and q.pending_per_org == 1_000_000
    assert q.elasticity_max == 100


def test_room_is_all_or_nothing_unless_partial() -> None:
    assert quotas.daemon_room(LIMITS, "acme", 1, 2) == 2
    with over("daemons_per_org", 3) as info:
        quotas.daemon_room(LIMITS, "acme", 2, 2)
    assert info.value.http_status == 429 and info.value.code == "quota_exceeded"
    assert (info.value.quota, info.value.limit) == ("daemons_per_org", 3)
    assert "org 'acme' has 2 daemon(s)" in info.value.message
    assert "`daemons_per_org = N` under [quotas]" in info.value.message
    assert quotas.daemon_room(LIMITS, "acme", 2, 2, partial=True) == 1
    with over("local_daemons_per_host", 2):
        quotas.local_room(LIMITS, "acme", 2, 1, partial=True)


def test_each_check_names_its_quota() -> None:
    quotas.check_queues(LIMITS, "alpha", 1)
    with over("queues_per_namespace", 2):
        quotas.check_queues(LIMITS, "alpha", 2)
    quotas.check_pending(LIMITS, "acme", 3, 2)
    with over("pending_per_org", 5):
        quotas.check_pending(LIMITS, "acme", 3, 3)
    quotas.check_elasticity(LIMITS, Elasticity(kind=ElasticityKind.ELASTIC, min=1, max=4))
    with over("elasticity_max", 4):
        quotas.check_elasticity(LIMITS, Elasticity(kind=ElasticityKind.ELASTIC, min=1, max=5))


def test_only_starting_and_running_daemons_of_the_org_count() -> None:
    rows = [
        Worker(id=f"w-{s}", name=s, namespace=ns, status=WorkerStatus(s), started_at=now())
        for ns in ("alpha", "gamma")
        for s in ("starting", "idle", "busy", "retiring", "lost", "stopped")
    ]
    assert quotas.daemons_in(rows, {"alpha", "beta"}) == 4


# ---- the owners, on the in-memory twins --------------------------------------------------


@pytest.fixture
async def store() -> InMemoryStore:
    s = InMemoryStore()
    for name, org in ORGS.items():
        await s.insert_namespace(Namespace(name=name, org=org, created_at=now()))
    return s


@pytest.fixture
async def registry(runtime: Runtime, store: InMemoryStore) -> ActorRef[WorkerMsg]:
    return await runtime.spawn(WorkerRegistry(store, quotas=LIMITS))


async def _spawn_directory(
    runtime: Runtime, store: InMemoryStore, registry: ActorRef[WorkerMsg], **kw: Any
) -> ActorRef[DirectoryMsg]:
    bus = InMemoryBus()
    return await runtime.spawn(
        QueueDirectory(runtime, store=store, bus=bus, workers=registry, outbox=Outbox(bus), **kw)
    )


@pytest.fixture
async def directory(
    runtime: Runtime, store: InMemoryStore, registry: ActorRef[WorkerMsg]
) -> ActorRef[DirectoryMsg]:
    return await _spawn_directory(runtime, store, registry, quotas=LIMITS)


async def create(directory: ActorRef[DirectoryMsg], ns: str, name: str, **body: Any) -> Queue:
    return await directory.ask(CreateQueue(ns, QueueCreate(name=name, **body), actor="tok-1"))


async def names(store: InMemoryStore, ns: str) -> list[str]:
    return [q.name for q in await store.all_queues() if q.namespace == ns]


async def test_queues_per_namespace_counts_the_namespaces_queues_but_default(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore
) -> None:
    await directory.ask(Lookup("alpha", "default"))
    await create(directory, "alpha", "a")
    await create(directory, "alpha", "b")
    with over("queues_per_namespace", 2) as info:
        await create(directory, "alpha", "c")
    assert "namespace 'alpha' has 2 queue(s) besides default" in info.value.message
    assert await names(store, "alpha") == ["a", "b", "default"]
    assert await store.list_queue_events("alpha", "c") == []
    await create(directory, "beta", "c")  # per namespace: the sibling has room
    await directory.ask(RemoveQueue("alpha", "a", force=False, actor=None))
    await create(directory, "alpha", "c")
    assert await names(store, "alpha") == ["b", "c", "default"]


async def test_a_queue_above_the_elasticity_ceiling_is_not_created(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore
) -> None:
    with over("elasticity_max", 4) as info:
        await create(directory, "alpha", "big", elasticity={"kind": "elastic", "max": 5})
    assert "elasticity max 5 is above it" in info.value.message
    assert await names(store, "alpha") == []
    with pytest.raises(Invalid):  # a bad object is still a 400, before any quota
        await create(directory, "alpha", "big", elasticity={"kind": "elastic", "max": 10**6})
    row = await create(directory, "alpha", "big", elasticity={"kind": "elastic", "max": 4})
    assert row.elasticity.max == 4


async def test_a_patch_may_not_raise_max_above_the_ceiling(
    directory: ActorRef[DirectoryMsg], store: InMemoryStore
) -> None:
    await create(directory, "alpha", "q", elasticity={"kind": "elastic", "max": 2})
    queue = await directory.ask(Lookup("alpha", "q"))
    before = await queue.ask(GetQueue())
    patch = QueuePatch(description="changed", elasticity={"max": 5})
    with over("elasticity_max", 4):
        await queue.ask(PatchQueue(patch, actor="tok-1"))
    assert await queue.ask(GetQueue()) == before == await store.get_queue("alpha", "q")
    assert [e.type for e in await store.list_queue_events("alpha", "q")] == ["created"]
    after = await queue.ask(PatchQueue(QueuePatch(elasticity={"max": 4}), actor="tok-1"))
    assert after.elasticity.max == 4


async def test_a_max_above_a_lowered_ceiling_may_stay_or_go_down(
    runtime: Runtime, store: InMemoryStore, registry: ActorRef[WorkerMsg]
) -> None:
    wide = await _spawn_directory(runtime, store, registry)
    await create(wide, "alpha", "q", elasticity={"kind": "elastic", "max": 9})
    await runtime.stop(wide)
    narrow = await _spawn_directory(runtime, store, registry, quotas=LIMITS)
    queue = await narrow.ask(Lookup("alpha", "q"))
    kept = await queue.ask(PatchQueue(QueuePatch(elasticity={"min": 2}), actor=None))
    assert (kept.elasticity.min, kept.elasticity.max) == (2, 9)
    lowered = await queue.ask(PatchQueue(QueuePatch(elasticity={"max": 6}), actor=None))
    assert lowered.elasticity.max == 6
    with over("elasticity_max", 4):
        await queue.ask(PatchQueue(QueuePatch(elasticity={"max": 7}), actor=None))


async def register(registry: ActorRef[WorkerMsg], ns: str, name: str, **fields: Any) -> Worker:
    return await registry.ask(Register(WorkerRegister(namespace=ns, name=name, **fields)))


async def test_daemons_per_org_counts_every_namespace_of_the_org(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    await register(registry, "alpha", "d1")
    await register(registry, "beta", "d2")
    await register(registry, "beta", "d3")
    with over("daemons_per_org", 3) as info:
        await register(registry, "alpha", "d4")
    assert "org 'acme' has 3 daemon(s) starting or running" in info.value.message
    assert {w.name for w in await store.list_workers()} == {"d1", "d2", "d3"}
    await register(registry, "gamma", "d4")  # another org
    again = await register(registry, "alpha", "d1")  # a restarted daemon: counted already
    assert again.status is WorkerStatus.IDLE


async def test_lost_and_stopped_daemons_make_room(registry: ActorRef[WorkerMsg]) -> None:
    rows = [await register(registry, "alpha", f"d{i}") for i in range(3)]
    await registry.ask(Exited("alpha", rows[0].id, 1, "crashed"))
    await registry.ask(Exited("alpha", rows[1].id, 0, "stopped", requested=True))
    await register(registry, "alpha", "d3")
    await register(registry, "alpha", "d4")
    with over("daemons_per_org", 3):
        await register(registry, "alpha", "d0")  # back from lost: counts again


def starting(ns: str, name: str) -> Worker:
    return Worker(id=f"w-{name}", name=name, namespace=ns, status=WorkerStatus.STARTING,
                  managed=True, started_at=now())  # fmt: skip


async def test_a_launch_is_refused_whole_and_the_controllers_is_cut_to_fit(
    registry: ActorRef[WorkerMsg],
) -> None:
    await register(registry, "alpha", "hand")
    batch = [starting("beta", f"m-{i:02d}") for i in range(3)]
    with over("daemons_per_org", 3):
        await registry.ask(Prepare("beta", batch))
    assert [w.name for w in await registry.ask(ListWorkers())] == ["hand"]
    made = await registry.ask(Prepare("beta", batch, partial=True))
    assert [w.name for w in made] == ["m-00", "m-01"]
    with over("daemons_per_org", 3):
        await registry.ask(Prepare("beta", [starting("beta", "m-02")], partial=True))


# ---- the pending tally: the real store, the in-memory bus --------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_the_tally_estimates_between_reads_and_reads_again_at_the_quota(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path / "tally.duckdb")
    try:
        for name, org in ORGS.items():
            await store.insert_namespace(Namespace(name=name, org=org, created_at=now()))
        bus = InMemoryBus()
        for ns in ("alpha", "beta"):
            await store.insert_queue(
                Queue(name="q", namespace=ns, created_at=now(), updated_at=now())
            )
            await bus.ensure_queue(ns, "q", levels=1, max_depth=None)
        await bus.publish_work("alpha", "q", [(b"x", 0, "m-1"), (b"y", 0, "m-2")])
        clock = Clock()
        tally = PendingTally(store, bus, LIMITS, refresh_s=1.0, clock=clock)
        assert await tally.reserve("beta", 3) == "acme"  # 2 read in alpha, 3 admitted
        with over("pending_per_org", 5) as info:
            await tally.reserve("alpha", 1)
        assert "org 'acme' has 5 invocation(s) pending" in info.value.message
        assert await tally.reserve("gamma", 5) == "globex"
        bus.claim("alpha", "q", 0, 2)  # a daemon took both: not seen until the next read
        with over("pending_per_org", 5):
            await tally.reserve("alpha", 1)
        clock.t = 1.0
        # Read again: nothing pending (beta's 3 were counted, never stored).
        assert await tally.reserve("alpha", 2) == "acme"
        tally.release("acme", 2)  # its submit failed
        assert await tally.reserve("alpha", 5) == "acme"
    finally:
        await store.close()
