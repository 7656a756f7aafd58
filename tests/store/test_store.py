from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import msgspec
import pytest
from msgspec.structs import replace

from lakeshore import errors
from lakeshore.errors import SchemaTooNew
from lakeshore.model import (
    Elasticity,
    ElasticityKind,
    Namespace,
    OnFull,
    Queue,
    QueueKind,
    QueueState,
    Token,
    Worker,
    WorkerStatus,
)
from lakeshore.store import Store, open_store
from lakeshore.store.migrations import MIGRATIONS, check_migrations

T0 = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def _ns(name: str, org: str = "acme") -> Namespace:
    return Namespace(name=name, org=org, created_at=T0)


def _token(id: str, namespace: str | None = "team", admin: bool = False) -> Token:
    return Token(id=id, namespace=namespace, description=f"{id} token", admin=admin, created_at=T0)


def _queue(name: str, namespace: str = "team", **kw: object) -> Queue:
    return Queue(name=name, namespace=namespace, created_at=T0, updated_at=T0, **kw)


def _worker(id: str, name: str, namespace: str = "team", **kw: object) -> Worker:
    return Worker(id=id, name=name, namespace=namespace, started_at=T0, **kw)


class InvocationEvent(msgspec.Struct, frozen=True):
    namespace: str
    queue: str
    invocation_id: str
    ts: datetime
    type: str
    attempt: int
    worker: str | None
    epoch: int | None
    detail: dict[str, object] | None


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "lakeshore.duckdb"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[Store]:
    s = await open_store(db_path)
    yield s
    await s.close()


async def test_open_creates_parent_directory_and_applies_every_migration(
    store: Store, db_path: Path
) -> None:
    assert db_path.exists()
    assert await store.schema_version() == len(MIGRATIONS)


async def test_namespaces_round_trip_sorted_and_filtered_by_org(store: Store) -> None:
    for ns in (_ns("zeta"), _ns("alpha", org="other"), _ns("mid")):
        await store.insert_namespace(ns)
    got = await store.get_namespace("alpha")
    assert got == _ns("alpha", org="other")
    assert got is not None and got.created_at.utcoffset() == timedelta(0)
    assert await store.get_namespace("missing") is None
    assert [n.name for n in await store.list_namespaces()] == ["alpha", "mid", "zeta"]
    assert [n.name for n in await store.list_namespaces("acme")] == ["mid", "zeta"]
    assert await store.list_namespaces("nobody") == []


async def test_duplicate_namespace_raises_already_exists(store: Store) -> None:
    await store.insert_namespace(_ns("team"))
    with pytest.raises(errors.AlreadyExists, match="namespace 'team' already exists"):
        await store.insert_namespace(_ns("team", org="other"))
    assert await store.get_namespace("team") == _ns("team")


async def test_tokens_are_found_by_hash_and_listed_per_namespace(store: Store) -> None:
    await store.insert_token(_token("t1"), "h1")
    await store.insert_token(_token("t2"), "h2")
    await store.insert_token(_token("other", namespace="elsewhere"), "h3")
    await store.insert_token(_token("root", namespace=None, admin=True), "h4")
    assert await store.token_by_hash("h2") == _token("t2")
    assert await store.token_by_hash("nope") is None
    assert [t.id for t in await store.list_tokens("team")] == ["t1", "t2"]
    assert await store.list_tokens(None) == [_token("root", namespace=None, admin=True)]


async def test_duplicate_token_id_or_hash_raises_already_exists(store: Store) -> None:
    await store.insert_token(_token("t1"), "h1")
    with pytest.raises(errors.AlreadyExists):
        await store.insert_token(_token("t1"), "fresh")
    with pytest.raises(errors.AlreadyExists) as info:
        await store.insert_token(_token("t2"), "h1")
    assert "h1" not in str(info.value)
    assert [t.id for t in await store.list_tokens("team")] == ["t1"]


async def test_revoked_tokens_are_invisible(store: Store) -> None:
    await store.insert_token(_token("t1"), "h1")
    await store.insert_token(_token("t2"), "h2")
    assert await store.revoke_token("elsewhere", "t1") is None
    assert await store.revoke_token("team", "t1") == _token("t1")
    assert await store.revoke_token("team", "t1") is None
    assert await store.token_by_hash("h1") is None
    assert [t.id for t in await store.list_tokens("team")] == ["t2"]
    with pytest.raises(errors.AlreadyExists):
        await store.insert_token(_token("t3"), "h1")


async def test_admin_tokens_are_revoked_with_a_null_namespace(store: Store) -> None:
    await store.insert_token(_token("root", namespace=None, admin=True), "h")
    assert await store.revoke_token("team", "root") is None
    assert await store.revoke_token(None, "root") is not None
    assert await store.list_tokens(None) == []


async def test_queue_round_trip_keeps_every_field(store: Store) -> None:
    elasticity = Elasticity(
        kind=ElasticityKind.BURST, max=5, pool="gpu", match={"arch": "arm"}, steal_delay_s=2.5
    )
    q = _queue(
        "jobs",
        kind=QueueKind.PRIORITY,
        state=QueueState.DRAINING,
        description="nightly",
        max_depth=100,
        on_full=OnFull.BLOCK,
        elasticity=elasticity,
    )
    await store.insert_queue(q)
    got = await store.get_queue("team", "jobs")
    assert got == q
    assert got is not None and isinstance(got.state, QueueState)
    assert await store.get_queue("team", "missing") is None
    assert await store.get_queue("elsewhere", "jobs") is None


async def test_duplicate_queue_raises_already_exists_per_namespace(store: Store) -> None:
    await store.insert_queue(_queue("jobs"))
    with pytest.raises(errors.AlreadyExists, match="in namespace 'team'"):
        await store.insert_queue(_queue("jobs", description="again"))
    await store.insert_queue(_queue("jobs", namespace="elsewhere"))
    assert len(await store.all_queues()) == 2


async def test_update_queue_overwrites_every_non_key_column(store: Store) -> None:
    await store.insert_queue(_queue("jobs"))
    changed = replace(
        _queue("jobs"),
        state=QueueState.ARCHIVED,
        description="moved",
        max_depth=None,
        on_full=OnFull.DROP_OLDEST,
        elasticity=Elasticity(kind=ElasticityKind.ELASTIC, min=1, max=3),
        updated_at=T0 + timedelta(hours=1),
    )
    await store.update_queue(changed)
    assert await store.get_queue("team", "jobs") == changed
    with pytest.raises(errors.QueueNotFound):
        await store.update_queue(_queue("ghost"))


async def test_delete_queue_reports_whether_it_existed(store: Store) -> None:
    await store.insert_queue(_queue("jobs"))
    assert await store.delete_queue("team", "jobs") is True
    assert await store.delete_queue("team", "jobs") is False
    assert await store.get_queue("team", "jobs") is None
    await store.insert_queue(_queue("jobs"))
    assert await store.get_queue("team", "jobs") == _queue("jobs")


async def test_list_queues_filters_namespaces_and_state_in_order(store: Store) -> None:
    for q in (
        _queue("b", namespace="x"),
        _queue("a", namespace="x", state=QueueState.ARCHIVED),
        _queue("c", namespace="w"),
        _queue("d", namespace="hidden"),
    ):
        await store.insert_queue(q)
    listed = await store.list_queues(["x", "w"])
    assert [(q.namespace, q.name) for q in listed] == [("w", "c"), ("x", "a"), ("x", "b")]
    active = await store.list_queues(["x", "w"], QueueState.ACTIVE)
    assert [q.name for q in active] == ["c", "b"]
    assert await store.list_queues([]) == []
    everything = await store.all_queues()
    assert [q.name for q in everything] == ["d", "c", "a", "b"]


async def test_all_queues_follows_every_queue_write(store: Store) -> None:
    await store.insert_queue(_queue("b"))
    assert [q.name for q in await store.all_queues()] == ["b"]
    await store.insert_queue(_queue("a"))
    assert [q.name for q in await store.all_queues()] == ["a", "b"]
    await store.update_queue(replace(_queue("a"), description="changed"))
    assert [q.description for q in await store.all_queues()] == ["changed", ""]
    listed = await store.all_queues()
    listed.clear()  # the caller's list, not the store's
    await store.delete_queue("team", "b")
    assert [q.name for q in await store.all_queues()] == ["a"]


async def test_list_queues_pages_by_namespace_then_name(store: Store) -> None:
    keys = [("w", "b"), ("x", "a"), ("w", "a"), ("x", "c"), ("x", "b")]
    for ns, name in keys:
        await store.insert_queue(_queue(name, namespace=ns))
    pages, after = [], None
    while page := await store.list_queues(["x", "w"], limit=2, after=after):
        pages.append([(q.namespace, q.name) for q in page])
        after = pages[-1][-1]
    assert pages == [[("w", "a"), ("w", "b")], [("x", "a"), ("x", "b")], [("x", "c")]]
    assert await store.list_queues(["x", "w"], after=("w", "zz")) == await store.list_queues(["x"])
    assert await store.list_queues(["x", "w"], limit=1, after=("x", "c")) == []


async def test_upsert_worker_inserts_then_updates_by_id(store: Store) -> None:
    w = _worker("w-1", "alpha", queues=["jobs"], labels={"gpu": "a100"}, managed=True)
    await store.upsert_worker(w)
    assert await store.get_worker("team", "w-1") == w
    beat = replace(
        w,
        status=WorkerStatus.BUSY,
        current="inv-9",
        last_heartbeat=T0 + timedelta(seconds=5),
        queues=["jobs", "other"],
    )
    await store.upsert_worker(beat)
    assert await store.get_worker("team", "alpha") == beat
    renamed = replace(beat, name="beta")
    await store.upsert_worker(renamed)
    assert await store.list_workers("team") == [renamed]
    assert await store.get_worker("team", "alpha") is None


async def test_same_worker_name_with_another_id_raises_already_exists(store: Store) -> None:
    await store.upsert_worker(_worker("w-1", "alpha"))
    await store.upsert_worker(_worker("w-2", "beta"))
    with pytest.raises(errors.AlreadyExists, match="'w-1'"):
        await store.upsert_worker(_worker("w-3", "alpha"))
    with pytest.raises(errors.AlreadyExists):
        await store.upsert_worker(_worker("w-2", "alpha"))
    await store.upsert_worker(_worker("w-4", "alpha", namespace="elsewhere"))
    assert [w.id for w in await store.list_workers("team")] == ["w-1", "w-2"]


async def test_get_worker_prefers_the_id_over_a_name(store: Store) -> None:
    await store.upsert_worker(_worker("w-1", "alpha"))
    await store.upsert_worker(_worker("alpha", "zed"))
    assert (await store.get_worker("team", "alpha")) == _worker("alpha", "zed")
    assert (await store.get_worker("team", "w-1")) == _worker("w-1", "alpha")
    assert await store.get_worker("elsewhere", "w-1") is None


async def test_list_and_delete_workers(store: Store) -> None:
    await store.upsert_worker(_worker("w-1", "b", namespace="y"))
    await store.upsert_worker(_worker("w-2", "a", namespace="y"))
    await store.upsert_worker(_worker("w-3", "z", namespace="x"))
    assert [w.id for w in await store.list_workers()] == ["w-3", "w-2", "w-1"]
    assert [w.id for w in await store.list_workers("y")] == ["w-2", "w-1"]
    assert await store.delete_worker("w-2") is True
    assert await store.delete_worker("w-2") is False
    assert [w.id for w in await store.list_workers()] == ["w-3", "w-1"]


async def test_scrub_removes_a_queue_from_every_worker_of_the_namespace(store: Store) -> None:
    await store.upsert_worker(_worker("w-1", "a", queues=["jobs", "etl"]))
    await store.upsert_worker(_worker("w-2", "b", queues=["jobs"]))
    await store.upsert_worker(_worker("w-3", "c", queues=["jobs-2", "etl"]))
    await store.upsert_worker(_worker("w-4", "d", namespace="elsewhere", queues=["jobs"]))
    changed = await store.scrub_queue_from_workers("team", "jobs")
    assert [(w.id, w.queues) for w in changed] == [("w-1", ["etl"]), ("w-2", [])]
    assert {w.id: w.queues for w in await store.list_workers()} == {
        "w-1": ["etl"],
        "w-2": [],
        "w-3": ["jobs-2", "etl"],
        "w-4": ["jobs"],
    }
    assert await store.scrub_queue_from_workers("team", "jobs") == []


async def test_queue_events_are_listed_newest_first_with_limit(store: Store) -> None:
    appended = [
        await store.append_queue_event("team", "jobs", "queue.created", "t1", {"n": i})
        for i in range(5)
    ]
    await store.append_queue_event("team", "other", "queue.created", None, None)
    assert [e.id for e in appended] == sorted({e.id for e in appended})
    assert appended[0].detail == {"n": 0} and appended[0].actor == "t1"
    assert appended[0].ts.utcoffset() == timedelta(0)
    listed = await store.list_queue_events("team", "jobs", limit=3)
    assert [e.id for e in listed] == [e.id for e in reversed(appended)][:3]
    assert all(e.detail is None for e in listed)
    assert await store.list_queue_events("team", "jobs", limit=0) == []
    with pytest.raises(errors.Invalid):
        await store.list_queue_events("team", "jobs", limit=-1)


async def test_verbose_queue_events_carry_their_detail_and_timestamp(store: Store) -> None:
    at = datetime(2025, 6, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    detail = {"before": {"max_depth": None}, "after": {"max_depth": 10}}
    event = await store.append_queue_event("team", "jobs", "queue.updated", "t1", detail, ts=at)
    assert event.ts == at and event.ts.utcoffset() == timedelta(0)
    [listed] = await store.list_queue_events("team", "jobs", verbose=True)
    assert listed == event and listed.detail == detail


async def test_invocation_events_append_as_one_batch(store: Store) -> None:
    tuples = [
        ("team", "jobs", "inv-1", T0 + timedelta(seconds=i), "claimed", 1, "w-1", i, {"i": i})
        for i in range(3)
    ]
    struct = InvocationEvent("team", "jobs", "inv-1", T0 + timedelta(minutes=1), "done", 2,
                             None, None, None)  # fmt: skip
    assert await store.append_invocation_events([*tuples, struct]) == 4
    assert await store.append_invocation_events([]) == 0
    assert await store.list_invocation_events("team", "inv-1") == [
        *tuples,
        tuple(msgspec.structs.astuple(struct)),
    ]
    with pytest.raises(ValueError):
        await store.append_invocation_events([tuples[0], ("team", "jobs")])
    assert len(await store.list_invocation_events("team", "inv-1")) == 4


async def test_reopening_the_file_keeps_every_row(db_path: Path) -> None:
    async with await open_store(db_path) as store:
        await store.insert_namespace(_ns("team"))
        await store.insert_token(_token("t1"), "h1")
        await store.insert_queue(_queue("jobs"))
        await store.upsert_worker(_worker("w-1", "alpha", queues=["jobs"]))
        first = await store.append_queue_event("team", "jobs", "queue.created", "t1", {"a": 1})
        await store.append_invocation_events([("team", "jobs", "i", T0, "done", 1, None, 1, None)])
    async with await open_store(db_path) as store:
        assert await store.list_namespaces() == [_ns("team")]
        assert await store.token_by_hash("h1") == _token("t1")
        assert await store.all_queues() == [_queue("jobs")]
        assert await store.list_workers() == [_worker("w-1", "alpha", queues=["jobs"])]
        assert await store.list_queue_events("team", "jobs", verbose=True) == [first]
        second = await store.append_queue_event("team", "jobs", "queue.updated", None, None)
        assert second.id > first.id
        assert len(await store.list_invocation_events("team", "i")) == 1
        assert await store.schema_version() == len(MIGRATIONS)


async def test_migrations_apply_only_the_missing_ones(db_path: Path) -> None:
    await (await open_store(db_path)).close()
    longer = [*MIGRATIONS, (len(MIGRATIONS) + 1, ["CREATE TABLE extra (x INTEGER)"])]
    async with await open_store(db_path, migrations=longer) as store:
        assert await store.schema_version() == len(longer)
    async with await open_store(db_path, migrations=longer) as store:
        assert await store.schema_version() == len(longer)


async def test_a_failing_migration_leaves_the_previous_version(db_path: Path) -> None:
    await (await open_store(db_path)).close()
    broken = [*MIGRATIONS, (len(MIGRATIONS) + 1, ["CREATE TABLE extra (x INTEGER)", "BOGUS"])]
    with pytest.raises(Exception, match="BOGUS"):
        await open_store(db_path, migrations=broken)
    fixed = [*MIGRATIONS, (len(MIGRATIONS) + 1, ["CREATE TABLE extra (x INTEGER)"])]
    async with await open_store(db_path, migrations=fixed) as store:
        assert await store.schema_version() == len(fixed)


async def test_a_file_with_a_newer_schema_is_refused(db_path: Path) -> None:
    longer = [*MIGRATIONS, (len(MIGRATIONS) + 1, ["CREATE TABLE extra (x INTEGER)"])]
    await (await open_store(db_path, migrations=longer)).close()
    with pytest.raises(SchemaTooNew, match=f"schema version {len(longer)}") as info:
        await open_store(db_path)
    assert info.value.found == len(longer) and info.value.known == len(MIGRATIONS)
    async with await open_store(db_path, migrations=longer) as store:
        assert await store.schema_version() == len(longer)


def test_migration_versions_must_run_from_one_without_gaps() -> None:
    check_migrations(MIGRATIONS)
    with pytest.raises(ValueError):
        check_migrations([(1, []), (3, [])])
    with pytest.raises(ValueError):
        check_migrations([(2, [])])


async def test_concurrent_calls_all_land(store: Store) -> None:
    n = 200
    async with asyncio.timeout(30):
        await asyncio.gather(
            *(store.insert_queue(_queue(f"q-{i:03}")) for i in range(n)),
            *(store.append_queue_event("team", "jobs", "tick", None, {"i": i}) for i in range(n)),
            *(store.upsert_worker(_worker(f"w-{i}", f"n-{i}")) for i in range(n)),
        )
        assert [q.name for q in await store.all_queues()] == [f"q-{i:03}" for i in range(n)]
        events = await store.list_queue_events("team", "jobs", limit=n + 1, verbose=True)
        assert sorted(e.detail["i"] for e in events if e.detail) == list(range(n))
        assert len({e.id for e in events}) == n
        assert len(await store.list_workers("team")) == n


async def test_a_closed_store_refuses_calls(db_path: Path) -> None:
    store = await open_store(db_path)
    await store.close()
    await store.close()
    with pytest.raises(errors.Unavailable, match="closed"):
        await store.get_namespace("team")
