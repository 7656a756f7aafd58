"""The row-store contract: what every implementation of the ports in store/port.py does.

Each test runs against the DuckDB ``Store`` and the ``InMemoryStore`` (the ``store``
fixture of conftest.py), so the in-memory twin the actor tests use cannot drift from the
real store. DuckDB-only behaviour (tokens, migrations, job queries) is in test_store.py.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
from msgspec.structs import replace

from lakeshore import errors
from lakeshore.fencing import Fence, fence_batch
from lakeshore.model import (
    Elasticity,
    ElasticityKind,
    EventType,
    InvocationEvent,
    InvocationState,
    Namespace,
    Provider,
    ProviderKind,
    Queue,
    QueueState,
    Worker,
    WorkerStatus,
)
from lakeshore.store import Store, port
from lakeshore.store._rows import INVOCATION_EVENT_COLUMNS
from lakeshore.store.memory import INVOCATION_EVENT_COLUMNS as MEMORY_COLUMNS
from lakeshore.store.memory import InMemoryStore

T0 = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
PLUS2 = timezone(timedelta(hours=2))
AnyStore = Store | InMemoryStore
PORTS = [
    port.NamespaceRows,
    port.QueueRows,
    port.WorkerRows,
    port.ProviderRows,
    port.QueueEventLog,
    port.InvocationHistory,
]


def _queue(name: str, namespace: str = "team", **kw: object) -> Queue:
    return Queue(**{"name": name, "namespace": namespace, "created_at": T0, "updated_at": T0, **kw})


def _worker(id: str, name: str, namespace: str = "team", **kw: object) -> Worker:
    return Worker(id=id, name=name, namespace=namespace, started_at=T0, **kw)


def _provider(name: str, namespace: str = "team", **kw: object) -> Provider:
    return Provider(**{"name": name, "namespace": namespace, "kind": ProviderKind.LOCAL,
                       "created_at": T0, **kw})  # fmt: skip


def _ev(
    inv: str,
    type: str,
    epoch: int | None = None,
    namespace: str = "team",
    i: int = 0,
    worker: str | None = None,
) -> tuple[object, ...]:
    """An invocation event row in INVOCATION_EVENT_COLUMNS order."""
    return (namespace, "jobs", inv, T0 + timedelta(seconds=i), type, epoch or 0, worker, epoch,
            None)  # fmt: skip


# ---- the twin implements the ports ----------------------------------------------------


@pytest.mark.parametrize("protocol", PORTS, ids=lambda p: p.__name__)
def test_both_stores_implement_every_port_method_with_the_same_signature(
    protocol: type,
) -> None:
    methods = [n for n, v in vars(protocol).items() if inspect.iscoroutinefunction(v)]
    assert methods
    for name in methods:
        expected = inspect.signature(getattr(protocol, name))
        assert inspect.signature(getattr(Store, name)) == expected, name
        assert inspect.signature(getattr(InMemoryStore, name)) == expected, name


def test_both_stores_read_invocation_rows_in_the_same_column_order() -> None:
    assert MEMORY_COLUMNS == INVOCATION_EVENT_COLUMNS


# ---- namespaces -----------------------------------------------------------------------


async def test_a_namespace_is_found_by_name_with_its_time_in_utc(store: AnyStore) -> None:
    await store.insert_namespace(Namespace(name="team", org="acme", created_at=T0))
    await store.insert_namespace(
        Namespace(name="east", org="acme", created_at=datetime(2025, 1, 2, 5, tzinfo=PLUS2))
    )
    assert await store.get_namespace("team") == Namespace(name="team", org="acme", created_at=T0)
    east = await store.get_namespace("east")
    assert east is not None and east.created_at.utcoffset() == timedelta(0)
    assert east.created_at.hour == 3
    assert await store.get_namespace("missing") is None


async def test_a_second_namespace_of_the_same_name_already_exists(store: AnyStore) -> None:
    await store.insert_namespace(Namespace(name="team", org="acme", created_at=T0))
    with pytest.raises(errors.AlreadyExists, match="^namespace 'team' already exists$"):
        await store.insert_namespace(Namespace(name="team", org="other", created_at=T0))


# ---- queues ---------------------------------------------------------------------------


async def test_an_inserted_queue_reads_back_equal(store: AnyStore) -> None:
    elasticity = Elasticity(kind=ElasticityKind.BURST, max=3, match={"a": "b"})
    q = _queue("jobs", state=QueueState.DRAINING, max_depth=5, elasticity=elasticity)
    await store.insert_queue(q)
    got = await store.get_queue("team", "jobs")
    assert got == q and isinstance(got.state, QueueState)
    assert await store.get_queue("team", "missing") is None
    assert await store.get_queue("elsewhere", "jobs") is None


async def test_a_naive_queue_timestamp_reads_back_as_utc(store: AnyStore) -> None:
    naive = datetime(2025, 1, 2, 3, 4, 5, 123456)
    await store.insert_queue(Queue(name="jobs", namespace="team", created_at=naive,
                                   updated_at=naive.replace(tzinfo=PLUS2)))  # fmt: skip
    got = await store.get_queue("team", "jobs")
    assert got is not None
    assert got.created_at == naive.replace(tzinfo=UTC)
    assert got.updated_at == naive.replace(tzinfo=PLUS2)
    assert got.updated_at.utcoffset() == timedelta(0)


async def test_a_second_queue_of_the_same_name_in_a_namespace_already_exists(
    store: AnyStore,
) -> None:
    await store.insert_queue(_queue("jobs"))
    match = "^queue 'jobs' already exists in namespace 'team'$"
    with pytest.raises(errors.AlreadyExists, match=match):
        await store.insert_queue(_queue("jobs", description="again"))
    await store.insert_queue(_queue("jobs", namespace="elsewhere"))
    assert await store.get_queue("team", "jobs") == _queue("jobs")


async def test_updating_a_queue_overwrites_it_and_a_missing_one_is_not_found(
    store: AnyStore,
) -> None:
    await store.insert_queue(_queue("jobs"))
    changed = _queue("jobs", state=QueueState.PAUSED, description="moved",
                     updated_at=T0 + timedelta(hours=1))  # fmt: skip
    await store.update_queue(changed)
    assert await store.get_queue("team", "jobs") == changed
    with pytest.raises(errors.QueueNotFound) as info:
        await store.update_queue(_queue("ghost"))
    assert str(info.value) == str(errors.QueueNotFound("team", "ghost"))
    assert await store.get_queue("team", "ghost") is None


async def test_deleting_a_queue_reports_whether_it_existed(store: AnyStore) -> None:
    await store.insert_queue(_queue("jobs"))
    await store.append_queue_event("team", "jobs", "queue.created", None, None)
    assert await store.delete_queue("team", "jobs") is True
    assert await store.delete_queue("team", "jobs") is False
    assert await store.get_queue("team", "jobs") is None
    assert len(await store.list_queue_events("team", "jobs")) == 1
    await store.insert_queue(_queue("jobs"))
    assert await store.all_queues() == [_queue("jobs")]


async def test_all_queues_are_ordered_by_namespace_then_name(store: AnyStore) -> None:
    for ns, name in [("x", "b"), ("x", "a"), ("w", "c"), ("y", "a")]:
        await store.insert_queue(_queue(name, namespace=ns, state=QueueState.ARCHIVED))
    listed = [(q.namespace, q.name) for q in await store.all_queues()]
    assert listed == [("w", "c"), ("x", "a"), ("x", "b"), ("y", "a")]


# ---- workers --------------------------------------------------------------------------


async def test_upserting_a_known_id_overwrites_the_worker(store: AnyStore) -> None:
    w = _worker("w-1", "alpha", queues=["jobs"], labels={"gpu": "a100"})
    await store.upsert_worker(w)
    beat = replace(w, status=WorkerStatus.BUSY, current="inv-1",
                   last_heartbeat=T0 + timedelta(seconds=5))  # fmt: skip
    await store.upsert_worker(beat)
    assert await store.list_workers() == [beat]


async def test_update_liveness_writes_only_status_current_and_heartbeat_of_known_ids(
    store: AnyStore,
) -> None:
    a = _worker("w-1", "alpha", queues=["jobs"], labels={"gpu": "a100"})
    b = _worker("w-2", "beta", last_heartbeat=T0)
    await store.upsert_worker(a)
    await store.upsert_worker(b)
    later = T0 + timedelta(seconds=7)
    # what the registry holds: stale name and membership must not be written back
    held_a = replace(a, name="stale", queues=[], status=WorkerStatus.BUSY, current="inv-1",
                     last_heartbeat=later.astimezone(PLUS2))  # fmt: skip
    held_b = replace(b, last_heartbeat=later)
    ghost = _worker("w-ghost", "ghost", last_heartbeat=later)
    await store.update_liveness([held_a, held_b, ghost])
    assert await store.list_workers() == [
        replace(a, status=WorkerStatus.BUSY, current="inv-1", last_heartbeat=later),
        replace(b, last_heartbeat=later),
    ]
    await store.update_liveness([])
    assert len(await store.list_workers()) == 2


async def test_a_renamed_worker_keeps_its_id_and_frees_its_old_name(store: AnyStore) -> None:
    await store.upsert_worker(_worker("w-1", "alpha"))
    await store.upsert_worker(_worker("w-1", "beta"))
    assert [(w.id, w.name) for w in await store.list_workers("team")] == [("w-1", "beta")]
    await store.upsert_worker(_worker("w-2", "alpha"))
    assert [(w.id, w.name) for w in await store.list_workers("team")] == [
        ("w-2", "alpha"),
        ("w-1", "beta"),
    ]


async def test_a_worker_name_taken_by_another_id_already_exists(store: AnyStore) -> None:
    await store.upsert_worker(_worker("w-1", "alpha"))
    await store.upsert_worker(_worker("w-2", "beta"))
    match = "^worker 'alpha' already exists in namespace 'team' with id 'w-1'$"
    with pytest.raises(errors.AlreadyExists, match=match):
        await store.upsert_worker(_worker("w-3", "alpha"))
    with pytest.raises(errors.AlreadyExists, match="with id 'w-1'"):
        await store.upsert_worker(_worker("w-2", "alpha"))
    await store.upsert_worker(_worker("w-4", "alpha", namespace="elsewhere"))
    assert [(w.id, w.name) for w in await store.list_workers("team")] == [
        ("w-1", "alpha"),
        ("w-2", "beta"),
    ]


async def test_upserts_made_at_once_are_taken_in_order_each_refused_alone(
    store: AnyStore,
) -> None:
    # A fleet registering at once: the DuckDB store checks and writes the burst together.
    await store.upsert_worker(_worker("w-1", "alpha"))
    await store.upsert_worker(_worker("w-2", "beta"))
    burst = [
        _worker("w-3", "alpha"),  # alpha is w-1's: refused
        _worker("w-2", "gamma"),  # w-2 moves to gamma: beta is free from here on
        _worker("w-4", "beta"),
        _worker("w-5", "gamma"),  # gamma is w-2's now: refused
        *(_worker(f"w-x{i:03}", f"x{i:03}") for i in range(40)),
        _worker("w-x000", "x-renamed"),  # the later upsert of an id wins
    ]
    got = await asyncio.gather(*(store.upsert_worker(w) for w in burst), return_exceptions=True)
    refused = {burst[i].id: str(e) for i, e in enumerate(got) if e is not None}
    assert refused == {
        "w-3": "worker 'alpha' already exists in namespace 'team' with id 'w-1'",
        "w-5": "worker 'gamma' already exists in namespace 'team' with id 'w-2'",
    }
    rows = {(w.id, w.name) for w in await store.list_workers("team")}
    assert rows == {
        ("w-1", "alpha"), ("w-2", "gamma"), ("w-4", "beta"), ("w-x000", "x-renamed"),
        *((f"w-x{i:03}", f"x{i:03}") for i in range(1, 40)),
    }  # fmt: skip


async def test_a_worker_can_move_to_another_namespace(store: AnyStore) -> None:
    await store.upsert_worker(_worker("w-1", "alpha"))
    await store.upsert_worker(_worker("w-1", "alpha", namespace="elsewhere"))
    assert await store.list_workers("team") == []
    assert await store.list_workers() == [_worker("w-1", "alpha", namespace="elsewhere")]


async def test_workers_are_listed_by_namespace_then_name(store: AnyStore) -> None:
    await store.upsert_worker(_worker("w-1", "b", namespace="y"))
    await store.upsert_worker(_worker("w-2", "a", namespace="y"))
    await store.upsert_worker(_worker("w-3", "z", namespace="x"))
    assert [w.id for w in await store.list_workers()] == ["w-3", "w-2", "w-1"]
    assert [w.id for w in await store.list_workers("y")] == ["w-2", "w-1"]
    assert await store.list_workers("nobody") == []


async def test_deleting_a_worker_reports_whether_it_existed(store: AnyStore) -> None:
    await store.upsert_worker(_worker("w-1", "a"))
    assert await store.delete_worker("w-1") is True
    assert await store.delete_worker("w-1") is False
    assert await store.list_workers() == []


async def test_scrubbing_a_queue_returns_the_changed_workers_by_name(store: AnyStore) -> None:
    await store.upsert_worker(_worker("w-1", "c", queues=["jobs", "etl", "jobs"]))
    await store.upsert_worker(_worker("w-2", "a", queues=["jobs"]))
    await store.upsert_worker(_worker("w-3", "b", queues=["jobs-2", "etl"]))
    await store.upsert_worker(_worker("w-4", "d", namespace="elsewhere", queues=["jobs"]))
    changed = await store.scrub_queue_from_workers("team", "jobs")
    assert [(w.id, w.queues) for w in changed] == [("w-2", []), ("w-1", ["etl"])]
    assert {w.id: w.queues for w in await store.list_workers()} == {
        "w-1": ["etl"],
        "w-2": [],
        "w-3": ["jobs-2", "etl"],
        "w-4": ["jobs"],
    }
    assert await store.scrub_queue_from_workers("team", "jobs") == []


async def test_a_stored_row_shares_no_list_with_the_caller(store: AnyStore) -> None:
    queues = ["jobs", "etl"]
    await store.upsert_worker(_worker("w-1", "a", queues=queues))
    queues.append("leaked")
    [read] = await store.list_workers()
    read.queues.append("leaked")
    [scrubbed] = await store.scrub_queue_from_workers("team", "etl")
    scrubbed.queues.append("leaked")
    assert (await store.list_workers())[0].queues == ["jobs"]


# ---- providers ------------------------------------------------------------------------


async def test_a_provider_reads_back_equal_and_a_second_one_already_exists(
    store: AnyStore,
) -> None:
    p = _provider("cloud", config={"region": "eu", "sizes": [1, 2]})
    await store.insert_provider(p)
    assert await store.get_provider("team", "cloud") == p
    assert await store.get_provider("elsewhere", "cloud") is None
    match = "^provider 'cloud' already exists in namespace 'team'$"
    with pytest.raises(errors.AlreadyExists, match=match):
        await store.insert_provider(_provider("cloud", kind=ProviderKind.EXTERNAL))
    await store.insert_provider(_provider("cloud", namespace="elsewhere"))


async def test_providers_are_listed_by_name_per_namespace(store: AnyStore) -> None:
    for name in ("zeta", "alpha", "mid"):
        await store.insert_provider(_provider(name))
    await store.insert_provider(_provider("other", namespace="elsewhere"))
    assert [p.name for p in await store.list_providers("team")] == ["alpha", "mid", "zeta"]
    assert await store.list_providers("nobody") == []


async def test_deleting_a_provider_returns_it_as_it_was(store: AnyStore) -> None:
    p = _provider("cloud", config={"a": 1})
    await store.insert_provider(p)
    assert await store.delete_provider("team", "cloud") == p
    assert await store.delete_provider("team", "cloud") is None
    assert await store.list_providers("team") == []


# ---- queue events ---------------------------------------------------------------------


async def test_queue_event_ids_increase_in_append_order(store: AnyStore) -> None:
    ids = [(await store.append_queue_event("team", q, "tick", None, None)).id
           for q in ("jobs", "other", "jobs")]  # fmt: skip
    assert ids == sorted(set(ids))


async def test_an_appended_queue_event_comes_back_as_json_would_give_it(
    store: AnyStore,
) -> None:
    at = datetime(2025, 6, 1, 12, tzinfo=PLUS2)
    detail = {"pair": (1, 2), "at": at, 3: "x", "nested": {"l": [1]}}
    event = await store.append_queue_event("team", "jobs", "queue.updated", "t1", detail, ts=at)
    assert (event.namespace, event.queue, event.type, event.actor) == (
        "team", "jobs", "queue.updated", "t1",
    )  # fmt: skip
    assert event.ts == at and event.ts.utcoffset() == timedelta(0)
    expected = {"pair": [1, 2], "at": "2025-06-01T12:00:00+02:00", "3": "x", "nested": {"l": [1]}}
    assert event.detail == expected
    detail["nested"]["l"].append(2)
    [listed] = await store.list_queue_events("team", "jobs", verbose=True)
    assert listed == event and listed.detail == expected


async def test_a_queue_event_without_a_time_is_stamped_now_in_utc(store: AnyStore) -> None:
    before = datetime.now(UTC)
    event = await store.append_queue_event("team", "jobs", "tick", None, None)
    assert event.ts.utcoffset() == timedelta(0)
    assert before <= event.ts <= datetime.now(UTC)
    assert event.detail is None


async def test_queue_events_are_listed_newest_first_up_to_the_limit(store: AnyStore) -> None:
    appended = []
    for i in range(5):
        appended.append(await store.append_queue_event("team", "jobs", "tick", "t", {"i": i}))
        await store.append_queue_event("team", "other", "tick", None, None)
        await store.append_queue_event("elsewhere", "jobs", "tick", None, None)
    newest = [e.id for e in reversed(appended)]
    assert [e.id for e in await store.list_queue_events("team", "jobs", limit=3)] == newest[:3]
    assert [e.id for e in await store.list_queue_events("team", "jobs")] == newest
    assert await store.list_queue_events("team", "jobs", limit=0) == []
    assert await store.list_queue_events("team", "missing") == []


async def test_only_a_verbose_listing_carries_the_detail(store: AnyStore) -> None:
    event = await store.append_queue_event("team", "jobs", "tick", "t", {"i": 1})
    [terse] = await store.list_queue_events("team", "jobs")
    assert terse == replace(event, detail=None)
    [verbose] = await store.list_queue_events("team", "jobs", verbose=True)
    assert verbose == event


async def test_queue_events_since_a_time_leave_out_older_ones(store: AnyStore) -> None:
    # A queue removed and created again: its events since the new row's created_at only.
    async def append(type_: str, at: datetime) -> int:
        return (await store.append_queue_event("team", "jobs", type_, None, None, ts=at)).id

    again = T0 + timedelta(seconds=2)
    old = [await append("created", T0), await append("deleted", T0 + timedelta(seconds=1))]
    new = [await append("created", again), await append("drained", again + timedelta(seconds=1))]
    since = await store.list_queue_events("team", "jobs", since=again)
    assert [e.id for e in since] == new[::-1]
    naive = again.replace(tzinfo=None)  # taken as UTC
    assert await store.list_queue_events("team", "jobs", since=naive) == since
    in_plus2 = again.astimezone(PLUS2)
    assert await store.list_queue_events("team", "jobs", since=in_plus2) == since
    assert len(await store.list_queue_events("team", "jobs", limit=1, since=again)) == 1
    everything = await store.list_queue_events("team", "jobs", since=None)
    assert [e.id for e in everything] == (old + new)[::-1]


async def test_a_negative_limit_is_invalid(store: AnyStore) -> None:
    with pytest.raises(errors.Invalid, match="^limit must be 0 or more, got -1$"):
        await store.list_queue_events("team", "jobs", limit=-1)


# ---- invocation history ---------------------------------------------------------------


async def test_appended_batches_are_recorded_with_their_rows(store: AnyStore) -> None:
    assert await store.recorded_batches([1, 2]) == set()
    rows = [_ev("inv-1", "submitted"), _ev("inv-1", "claimed", 1)]
    assert await store.append_invocation_events(rows, batches=[10, 11]) == 2
    assert await store.append_invocation_events([], batches=[12]) == 0
    assert await store.append_invocation_events([]) == 0
    assert await store.append_invocation_events([_ev("inv-2", "submitted")]) == 1
    assert await store.recorded_batches([9, 10, 11, 12, 13]) == {10, 11, 12}
    assert set(await store.fences(["inv-1", "inv-2"])) == {("team", "inv-1"), ("team", "inv-2")}


async def test_a_malformed_row_appends_nothing(store: AnyStore) -> None:
    with pytest.raises(ValueError):
        await store.append_invocation_events(
            [_ev("inv-1", "submitted"), ("team", "jobs")], batches=[7]
        )
    assert await store.fences(["inv-1"]) == {}
    assert await store.recorded_batches([7]) == set()
    assert await store.max_invocation_id() is None


async def test_pruning_forgets_batches_at_or_below_the_floor_or_past_the_end(
    store: AnyStore,
) -> None:
    await store.append_invocation_events([], batches=[3, 4, 5, 6, 7, 8])
    await store.prune_recorded_batches(ack_floor=4, last_seq=7)
    assert await store.recorded_batches(range(10)) == {5, 6, 7}


async def test_the_events_position_is_the_greatest_batch_appended_pruned_or_not(
    store: AnyStore,
) -> None:
    assert await store.events_position() == 0  # a fresh file
    await store.append_invocation_events([_ev("inv-1", "submitted")], batches=[5, 3])
    assert await store.events_position() == 5
    await store.append_invocation_events([], batches=[4])
    assert await store.events_position() == 5
    await store.prune_recorded_batches(ack_floor=9, last_seq=9)  # all of them forgotten
    assert await store.recorded_batches(range(10)) == set()
    assert await store.events_position() == 5
    await store.append_invocation_events([], batches=[12])
    await store.prune_recorded_batches(ack_floor=0, last_seq=10)  # 12 is past the end
    assert await store.events_position() == 12


async def test_fences_follow_pending_running_succeeded_and_ignore_stale(
    store: AnyStore,
) -> None:
    steps = [
        (_ev("inv", "submitted", i=0), Fence(0, 0, None, (), True), InvocationState.PENDING),
        (_ev("inv", "claimed", 1, i=1), Fence(0, 9, None, (), True), InvocationState.RUNNING),
        (_ev("inv", "started", 1, i=2), Fence(1, 10, None, (), True), InvocationState.RUNNING),
        (_ev("inv", "retrying", 1, i=3), Fence(1, 11, None, (), True), InvocationState.PENDING),
        (_ev("inv", "stale", 9, i=4), Fence(1, 11, None, (), True), InvocationState.PENDING),
        (_ev("inv", "started", 2, i=5), Fence(2, 18, None, (), True), InvocationState.RUNNING),
        (_ev("inv", "succeeded", 2, i=6), Fence(2, 18, InvocationState.SUCCEEDED, (), True),
         InvocationState.SUCCEEDED),
        (_ev("inv", "stale", 3, i=7), Fence(2, 18, InvocationState.SUCCEEDED, (), True),
         InvocationState.SUCCEEDED),
    ]  # fmt: skip
    for row, fence, state in steps:
        await store.append_invocation_events([row])
        assert await store.fences(["inv"]) == {("team", "inv"): fence}
        assert fence.state is state


async def test_fences_hold_the_claims_of_the_epochs_not_below_the_started_one(
    store: AnyStore,
) -> None:
    await store.append_invocation_events(
        [
            _ev("inv", "submitted"),
            _ev("inv", "claimed", 1, i=1, worker="a"), _ev("inv", "started", 1, i=2, worker="a"),
            _ev("inv", "claimed", 2, i=3, worker="b"), _ev("inv", "claimed", 2, i=4, worker="b"),
            _ev("inv", "claimed", 3, i=5, worker="d"), _ev("inv", "claimed", 3, i=6, worker="c"),
            _ev("inv", "claimed", 3, i=7), _ev("inv", "stale", 3, i=8, worker="x"),
            _ev("inv", "succeeded", 3, i=9, namespace="other", worker="y"),
        ]
    )  # fmt: skip
    claims = ((1, "a"), (2, "b"), (3, "c"), (3, "d"))
    running = {("team", "inv"): Fence(1, 3 * 8 + 1, None, claims, submitted=True)}
    assert await store.fences(["inv"]) == {
        **running,
        ("other", "inv"): Fence(3, -1, InvocationState.SUCCEEDED),
    }
    assert await store.unfinished_fences() == running
    await store.append_invocation_events([_ev("inv", "started", 3, i=10, worker="c")])
    started = Fence(3, 3 * 8 + 2, None, ((3, "c"), (3, "d")), submitted=True)
    assert await store.fences(["inv"]) == {
        ("team", "inv"): started,
        ("other", "inv"): Fence(3, -1, InvocationState.SUCCEEDED),
    }
    await store.append_invocation_events([_ev("inv", "failed", 3, i=11, worker="c")])
    assert (await store.fences(["inv"]))[("team", "inv")] == started._replace(
        terminal=InvocationState.FAILED
    )
    assert await store.unfinished_fences() == {}


async def test_an_invocation_without_an_accepted_event_has_no_fence(store: AnyStore) -> None:
    await store.append_invocation_events([_ev("zombie", "stale", 2)])
    assert await store.fences(["zombie", "never"]) == {}
    assert await store.fences([]) == {}
    assert await store.unfinished_fences() == {}


async def test_fences_are_keyed_by_namespace_and_id(store: AnyStore) -> None:
    await store.append_invocation_events(
        [_ev("inv", "submitted"), _ev("inv", "claimed", 3, namespace="other")]
    )
    assert await store.fences(["inv"]) == {
        ("team", "inv"): Fence(0, 0, None, submitted=True),
        ("other", "inv"): Fence(0, 25, None),
    }


async def test_event_structs_are_appended_like_tuples(store: AnyStore) -> None:
    ev = InvocationEvent(namespace="team", queue="jobs", invocation_id="inv", ts=T0,
                         type=EventType.CANCELLED, detail={"by": "t1"})  # fmt: skip
    assert await store.append_invocation_events([ev]) == 1
    assert await store.fences(["inv"]) == {("team", "inv"): Fence(0, -1, InvocationState.CANCELLED)}


async def test_unfinished_fences_exclude_finished_invocations(store: AnyStore) -> None:
    await store.append_invocation_events(
        [
            _ev("done", "submitted"), _ev("done", "started", 1), _ev("done", "failed", 1),
            _ev("dropped", "submitted"), _ev("dropped", "dropped"),
            _ev("running", "submitted"), _ev("running", "started", 2),
            _ev("pending", "submitted"), _ev("pending", "stale", 1),
        ]
    )  # fmt: skip
    assert await store.unfinished_fences() == {
        ("team", "running"): Fence(2, 18, None, submitted=True),
        ("team", "pending"): Fence(0, 0, None, submitted=True),
    }


async def test_max_invocation_id_is_the_greatest_id_ever_appended(store: AnyStore) -> None:
    assert await store.max_invocation_id() is None
    await store.append_invocation_events([_ev("inv-2", "submitted"), _ev("inv-1", "submitted")])
    assert await store.max_invocation_id() == "inv-2"
    await store.append_invocation_events([_ev("inv-3", "stale", 1, namespace="other")])
    assert await store.max_invocation_id() == "inv-3"


async def test_fences_agree_with_fencing_over_random_histories(store: AnyStore) -> None:
    rng = random.Random(11)
    who = random.Random(12)
    types = [t for t in EventType if t is not EventType.STALE]
    events = [
        InvocationEvent(
            namespace=rng.choice(["team", "other"]),
            queue="jobs",
            invocation_id=f"inv-{rng.randrange(150)}",
            ts=T0 + timedelta(seconds=i),
            type=(t := rng.choice(types)),
            epoch=None if t in (EventType.SUBMITTED, EventType.DROPPED) else rng.randint(1, 3),
            worker=who.choice([None, "w-a", "w-b"]),
        )
        for i in range(600)
    ]
    known: dict[tuple[str, str], Fence] = {}
    stale = 0
    for start in range(0, len(events), 50):
        fenced = fence_batch(events[start : start + 50], known)
        known.update(fenced.fences)
        stale += fenced.stale
        await store.append_invocation_events(fenced.events)
    assert stale > 0 and {f.state for f in known.values()} >= {"pending", "running", "failed"}
    assert sum(len(f.claims) for f in known.values()) > 50
    assert await store.fences(sorted({k[1] for k in known})) == known
    assert await store.unfinished_fences() == {k: f for k, f in known.items() if not f.finished}


# ---- lifetime -------------------------------------------------------------------------


async def test_a_closed_store_refuses_calls(store: AnyStore) -> None:
    await store.close()
    await store.close()
    with pytest.raises(errors.Unavailable, match="^the store is closed$"):
        await store.get_queue("team", "jobs")
    with pytest.raises(errors.Unavailable, match="closed"):
        await store.append_invocation_events([_ev("inv", "submitted")])
