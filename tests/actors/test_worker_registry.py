"""WorkerRegistry: registration, heartbeats and their replies, membership, liveness on an
injected timeline (heartbeat timestamps in the past), launches' rows and exits."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.workers import (
    Beat,
    EditQueues,
    Exited,
    LastReport,
    ListWorkers,
    MarkWorkerLost,
    Members,
    Placed,
    Prepare,
    Register,
    RetireWorker,
    Scrub,
    SetLeases,
    Sweep,
    WorkerMsg,
    WorkerRegistry,
)
from lakeshore.errors import AlreadyExists, Internal, Invalid, InvalidName, WorkerNotFound
from lakeshore.model import (
    DEFAULT_QUEUE,
    QUEUED,
    ClaimMark,
    Heartbeat,
    HeartbeatReply,
    StealGrant,
    Worker,
    WorkerRegister,
    WorkerStatus,
    now,
)
from lakeshore.store.memory import InMemoryStore

from .support import NS, WALL, Wall, ago, fail_once, queue_events

IDLE, BUSY, LOST = WorkerStatus.IDLE, WorkerStatus.BUSY, WorkerStatus.LOST
STOPPED, RETIRING, STARTING = WorkerStatus.STOPPED, WorkerStatus.RETIRING, WorkerStatus.STARTING


async def register(
    registry: ActorRef[WorkerMsg], name: str, *queues: str, ns: str = NS, **fields: object
) -> Worker:
    reg = WorkerRegister(namespace=ns, name=name, queues=list(queues), **fields)
    return await registry.ask(Register(reg))


async def beat(
    registry: ActorRef[WorkerMsg],
    worker: Worker,
    status: WorkerStatus = IDLE,
    *,
    age_s: float = 0.0,
    current: list[str] | None = None,
    claims: ClaimMark | None = None,
) -> HeartbeatReply:
    """A heartbeat heard ``age_s`` seconds ago by the registry's clock (the daemon's own
    ``ts`` is not trusted)."""
    hb = Heartbeat(worker_id=worker.id, namespace=worker.namespace, status=status,
                   current=current or [], ts=ago(age_s), claims=claims)  # fmt: skip
    WALL.offset_s = -age_s
    try:
        return await registry.ask(Beat(hb))
    finally:
        WALL.offset_s = 0.0


async def row(registry: ActorRef[WorkerMsg], worker_id: str) -> Worker:
    return next(w for w in await registry.ask(ListWorkers()) if w.id == worker_id)


def starting(name: str, *queues: str, started_s_ago: float = 0.0) -> Worker:
    return Worker(id=f"w-{name}", name=name, namespace=NS, queues=list(queues),
                  status=STARTING, started_at=ago(started_s_ago))  # fmt: skip


# ---- registration and heartbeats -------------------------------------------------------


async def test_register_writes_an_idle_row_with_a_new_id(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    w = await register(registry, "d1", "a", "b", "a", labels={"gpu": "1"})
    assert w.id.startswith("w-")
    assert (w.status, w.queues, w.labels, w.provider) == (
        IDLE,
        ["a", "b"],
        {"gpu": "1"},
        "external",
    )
    assert w.last_heartbeat is not None and w.started_at == w.last_heartbeat
    assert await store.list_workers(NS) == [w]


async def test_registering_again_keeps_the_id_start_and_edited_membership(
    registry: ActorRef[WorkerMsg],
) -> None:
    first = await register(registry, "d1", "a")
    await registry.ask(EditQueues(NS, "d1", add=["b"], remove=[], actor=None))
    again = await register(registry, "d1", "zzz")  # a daemon restarted with its old flags
    assert (again.id, again.started_at, again.queues) == (first.id, first.started_at, ["a", "b"])


async def test_a_launched_daemon_registers_with_the_id_it_was_given(
    registry: ActorRef[WorkerMsg],
) -> None:
    [prepared] = await registry.ask(Prepare(NS, [starting("d1", "a")]))
    w = await register(registry, "d1", "a", id=prepared.id, managed=True)
    assert (w.id, w.status, w.managed) == ("w-d1", IDLE, True)
    assert len(await registry.ask(ListWorkers(NS))) == 1


@pytest.mark.parametrize("placed_first", [True, False])
async def test_where_a_provider_placed_a_daemon_is_kept_on_its_row(
    registry: ActorRef[WorkerMsg], store: InMemoryStore, placed_first: bool
) -> None:
    [prepared] = await registry.ask(Prepare(NS, [starting("d1", "a")]))
    where = {"host": "gpu1", "pid": "4242"}
    if placed_first:
        await registry.ask(Placed(NS, prepared.id, where))
    await register(registry, "d1", "a", id=prepared.id, managed=True)
    if not placed_first:
        await registry.ask(Placed(NS, prepared.id, where))
    [row] = await registry.ask(ListWorkers(NS))
    assert (row.status, row.placement) == (IDLE, where)
    assert (await store.list_workers())[0].placement == where
    assert await registry.ask(Placed("other-ns", prepared.id, {})) is None


@pytest.mark.parametrize(("name", "queues"), [("Bad_Name", []), ("d1", ["Bad_Queue"])])
async def test_register_refuses_bad_names(
    registry: ActorRef[WorkerMsg], store: InMemoryStore, name: str, queues: list[str]
) -> None:
    with pytest.raises(InvalidName):
        await register(registry, name, *queues)
    assert await store.list_workers() == []


async def test_a_heartbeat_reply_carries_the_queues_and_no_orders(
    registry: ActorRef[WorkerMsg],
) -> None:
    w = await register(registry, "d1", "a", "b")
    assert await beat(registry, w, BUSY, current=["inv-1"]) == HeartbeatReply(queues=["a", "b"])
    seen = await row(registry, w.id)
    assert (seen.status, seen.current) == (BUSY, "inv-1")


async def test_the_last_heartbeat_reports_what_the_daemon_runs_by_its_own_clock(
    registry: ActorRef[WorkerMsg],
) -> None:
    w = await register(registry, "d1", "a")
    assert await registry.ask(LastReport(w.id)) is None  # nothing heard since it started
    await beat(registry, w, BUSY, current=["inv-1", "inv-2"], age_s=3, claims=ClaimMark("b", 4))
    report = await registry.ask(LastReport(w.id))
    assert report.running == {"inv-1", "inv-2"}
    assert report.claims == ClaimMark("b", 4)  # the daemon's latest claim, as it sent it
    await beat(registry, w, IDLE)
    assert (await registry.ask(LastReport(w.id))).running == frozenset()


async def test_a_heartbeat_of_an_unknown_worker_asks_it_to_register(
    registry: ActorRef[WorkerMsg],
) -> None:
    w = await register(registry, "d1")
    ghost = Worker(id="w-ghost", name="ghost", namespace=NS, started_at=now())
    assert (await beat(registry, ghost)).unknown is True
    elsewhere = Worker(id=w.id, name=w.name, namespace="other", started_at=now())
    assert (await beat(registry, elsewhere)).unknown is True


def record_calls(
    obj: object, method: str, log: list[tuple[str, tuple[object, ...]]] | None = None
) -> list[tuple[object, ...]]:
    """The arguments of every later call of ``obj.method`` (async), which still runs; each
    call is also appended to ``log`` with the method's name (to see the order of several)."""
    calls: list[tuple[object, ...]] = []
    real = getattr(obj, method)

    async def recording(*args: object) -> object:
        calls.append(args)
        if log is not None:
            log.append((method, args))
        return await real(*args)

    setattr(obj, method, recording)
    return calls


async def stored_beats(store: InMemoryStore) -> dict[str, object]:
    return {w.name: w.last_heartbeat for w in await store.list_workers(NS)}


async def test_heartbeats_that_change_nothing_are_written_together_once_per_persist_period(
    runtime: Runtime, store: InMemoryStore
) -> None:
    registry = await runtime.spawn(WorkerRegistry(store, persist_every_s=5.0, clock=WALL))
    d1, d2 = await register(registry, "d1"), await register(registry, "d2")
    registered = await stored_beats(store)
    writes = record_calls(store, "update_liveness")
    await beat(registry, d1, age_s=-1.0)
    await beat(registry, d2, age_s=-1.0)
    assert await stored_beats(store) == registered  # heard in memory only
    heard = {w.name: w.last_heartbeat for w in await registry.ask(ListWorkers(NS))}
    assert heard != registered
    assert await registry.ask(Sweep()) == []
    assert await stored_beats(store) == heard
    assert [sorted(w.name for w in batch) for (batch,) in writes] == [["d1", "d2"]]
    await beat(registry, d1, age_s=-2.0)
    await registry.ask(Sweep())  # within the period of the last write: nothing written
    assert await stored_beats(store) == heard and len(writes) == 1
    WALL.offset_s = 6.0
    try:
        await registry.ask(Sweep())
    finally:
        WALL.offset_s = 0.0
    assert (await stored_beats(store))["d1"] == (await row(registry, d1.id)).last_heartbeat
    assert len(writes) == 2


async def test_a_heartbeat_that_changes_status_or_current_is_written_at_once(
    runtime: Runtime, store: InMemoryStore
) -> None:
    registry = await runtime.spawn(WorkerRegistry(store, persist_every_s=5.0, clock=WALL))
    w = await register(registry, "d1")
    await beat(registry, w, BUSY, age_s=-1.0, current=["inv-1"])
    [written] = await store.list_workers(NS)
    assert (written.status, written.current) == (BUSY, "inv-1")
    assert written.last_heartbeat == (await row(registry, w.id)).last_heartbeat
    await beat(registry, w, STOPPED, age_s=-2.0)
    [stopped] = await store.list_workers(NS)
    assert (stopped.status, stopped.current) == (STOPPED, None)


async def test_the_registry_writes_the_heartbeats_it_holds_when_it_stops(
    runtime: Runtime, store: InMemoryStore
) -> None:
    registry = await runtime.spawn(WorkerRegistry(store, persist_every_s=5.0, clock=WALL))
    w = await register(registry, "d1")
    await beat(registry, w, age_s=-1.0)
    heard = (await row(registry, w.id)).last_heartbeat
    await runtime.stop(registry)
    assert await stored_beats(store) == {"d1": heard}


async def test_a_worker_heard_before_a_crash_of_the_registry_is_not_lost_after_it(
    runtime: Runtime, store: InMemoryStore
) -> None:
    registry = await runtime.spawn(WorkerRegistry(store, lost_after_s=10.0, clock=WALL))
    WALL.offset_s = -60.0
    try:
        w = await register(registry, "d1")  # its stored time is a minute old
    finally:
        WALL.offset_s = 0.0
    await beat(registry, w)  # heard now, not written yet
    fail_once(store, "upsert_worker", RuntimeError("a bug"))
    with pytest.raises(Internal):
        await register(registry, "d2")
    # The registration's write failed after the registry answered it later: the registry
    # restarts before its next message.
    assert await registry.ask(Sweep()) == []
    assert registry.restarts == 1
    assert (await row(registry, w.id)).status is IDLE


async def test_a_new_registry_counts_silence_from_its_own_start(
    runtime: Runtime, store: InMemoryStore
) -> None:
    """A control plane down for longer than lost_after (an upgrade, a failover) answered no
    heartbeat meanwhile: its workers get a full lost_after from its start, not a mass loss."""
    WALL.offset_s = -60.0
    try:
        first = await runtime.spawn(WorkerRegistry(store, lost_after_s=10.0, clock=WALL))
        w = await register(first, "d1")  # last heard a minute ago
        await runtime.stop(first)
    finally:
        WALL.offset_s = 0.0
    registry = await runtime.spawn(WorkerRegistry(store, lost_after_s=10.0, clock=WALL))
    assert await registry.ask(Sweep()) == []
    WALL.offset_s = 11.0  # and still silent a lost_after after the start: lost
    try:
        assert [x.id for x in await registry.ask(Sweep())] == [w.id]
    finally:
        WALL.offset_s = 0.0


async def test_a_scrub_keeps_the_heartbeat_times_held_in_memory(
    registry: ActorRef[WorkerMsg],
) -> None:
    w = await register(registry, "d1", "a", "b")
    await beat(registry, w, age_s=-1.0)
    heard = (await row(registry, w.id)).last_heartbeat
    [scrubbed] = await registry.ask(Scrub(NS, "a"))
    assert (scrubbed.queues, scrubbed.last_heartbeat) == (["b"], heard)
    assert await row(registry, w.id) == scrubbed


async def test_steal_grants_are_delivered_until_their_until(
    registry: ActorRef[WorkerMsg],
) -> None:
    w = await register(registry, "d1", "a")
    other = await register(registry, "d2", "a")
    live = StealGrant(queue="b", until=now() + timedelta(seconds=60))
    lapsed = StealGrant(queue="c", until=ago(1))
    await registry.ask(SetLeases({w.id: [live, lapsed]}))
    assert (await beat(registry, w)).steal == [live]
    assert (await beat(registry, other)).steal == []
    await registry.ask(SetLeases({}))  # the controller's next set replaces them all
    assert (await beat(registry, w)).steal == []


# ---- retirement ------------------------------------------------------------------------


async def test_a_retired_worker_is_told_to_retire_until_it_stops(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    w = await register(registry, "d1")
    assert (await registry.ask(RetireWorker(NS, "d1"))).status is RETIRING
    assert [s.status for s in await store.list_workers(NS)] == [RETIRING]
    reply = await beat(registry, w, IDLE)
    assert reply.retire is True
    assert (await row(registry, w.id)).status is RETIRING  # not idle again
    reply = await beat(registry, w, STOPPED)
    assert reply.retire is False
    assert (await row(registry, w.id)).status is STOPPED
    assert (await registry.ask(RetireWorker(NS, w.id))).status is STOPPED  # nothing to do


async def test_retiring_an_unknown_worker_is_worker_not_found(
    registry: ActorRef[WorkerMsg],
) -> None:
    await register(registry, "d1", ns="other")
    with pytest.raises(WorkerNotFound, match="no worker with id or name 'd1'") as refused:
        await registry.ask(RetireWorker(NS, "d1"))
    assert (refused.value.code, refused.value.http_status) == ("worker_not_found", 404)


# ---- membership ------------------------------------------------------------------------


async def test_a_membership_edit_is_written_and_recorded_on_each_queue(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    w = await register(registry, "d1", "a", "b")
    new = await registry.ask(EditQueues(NS, "d1", add=["c", "b"], remove=["a"], actor="tok-1"))
    assert new.queues == ["b", "c"]
    assert [s.queues for s in await store.list_workers(NS)] == [["b", "c"]]
    assert (await beat(registry, w)).queues == ["b", "c"]  # the daemon learns it next beat
    [added] = await queue_events(store, "c")
    [removed] = await queue_events(store, "a")
    assert (added.type, added.actor) == ("member_added", "tok-1")
    assert added.detail == {"worker": w.id, "name": "d1", "queues": ["b", "c"]}
    assert removed.type == "member_removed"
    assert await queue_events(store, "b") == []  # already a member: nothing happened


async def test_an_edit_that_changes_nothing_records_nothing(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    w = await register(registry, "d1", "a")
    assert await registry.ask(EditQueues(NS, w.id, add=["a"], remove=["z"], actor=None)) == w
    assert await queue_events(store, "a") == [] and await queue_events(store, "z") == []


async def test_membership_edits_refuse_default_bad_names_and_unknown_workers(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    await register(registry, "d1", "a")
    with pytest.raises(Invalid, match="'default' cannot be added or removed explicitly"):
        await registry.ask(EditQueues(NS, "d1", add=[DEFAULT_QUEUE], remove=[], actor=None))
    with pytest.raises(Invalid, match="'default' cannot be added or removed explicitly"):
        await registry.ask(EditQueues(NS, "d1", add=[], remove=[DEFAULT_QUEUE], actor=None))
    with pytest.raises(InvalidName):
        await registry.ask(EditQueues(NS, "d1", add=["No Way"], remove=[], actor=None))
    with pytest.raises(WorkerNotFound):
        await registry.ask(EditQueues(NS, "nobody", add=["b"], remove=[], actor=None))
    assert [w.queues for w in await store.list_workers(NS)] == [["a"]]


async def test_members_are_the_workers_pulling_from_a_queue_and_not_stopped(
    registry: ActorRef[WorkerMsg],
) -> None:
    plain = await register(registry, "d1")  # [] is the default queue
    literal = await register(registry, "d2", DEFAULT_QUEUE)  # a literal entry counts too
    a = await register(registry, "d3", "a")
    lost = await register(registry, "d4", "a")
    stopped = await register(registry, "d5", "a")
    await register(registry, "d6", "a", ns="other")
    await registry.ask(Exited(NS, lost.id, 1, "crashed"))
    await registry.ask(Exited(NS, stopped.id, 0, "done"))
    default_members = await registry.ask(Members(NS, DEFAULT_QUEUE))
    assert [w.id for w in default_members] == [plain.id, literal.id]
    assert [w.id for w in await registry.ask(Members(NS, "a"))] == [a.id, lost.id]
    assert await registry.ask(Members(NS, "nobody")) == []


async def test_scrub_removes_a_queue_from_every_worker(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    w1 = await register(registry, "d1", "a", "b")
    await register(registry, "d2", "b")
    w3 = await register(registry, "d3", "a")
    scrubbed = await registry.ask(Scrub(NS, "a"))
    assert [(w.id, w.queues) for w in scrubbed] == [(w1.id, ["b"]), (w3.id, [])]
    assert await registry.ask(Members(NS, "a")) == []
    assert (await beat(registry, w3)).queues == []  # now in the default queue
    assert {w.name: w.queues for w in await store.list_workers(NS)} == {
        "d1": ["b"], "d2": ["b"], "d3": []
    }  # fmt: skip


async def test_list_workers_by_namespace_sorted_by_name(registry: ActorRef[WorkerMsg]) -> None:
    await register(registry, "zed")
    await register(registry, "abe")
    await register(registry, "mid", ns="other")
    assert [w.name for w in await registry.ask(ListWorkers(NS))] == ["abe", "zed"]
    assert len(await registry.ask(ListWorkers())) == 3


# ---- liveness --------------------------------------------------------------------------


async def test_a_worker_silent_for_lost_after_s_is_lost_at_the_next_sweep(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    silent = await register(registry, "d1", "a", "b")
    fresh = await register(registry, "d2", "a")
    quiet = await register(registry, "d3")  # of the default queue
    await beat(registry, silent, BUSY, age_s=60, current=["inv-1"])
    await beat(registry, fresh, age_s=9)
    await beat(registry, quiet, age_s=11)
    lost = await registry.ask(Sweep())
    assert [(w.id, w.status) for w in lost] == [(silent.id, LOST), (quiet.id, LOST)]
    assert (await row(registry, fresh.id)).status is IDLE
    assert {w.name: w.status for w in await store.list_workers(NS)} == {
        "d1": LOST, "d2": IDLE, "d3": LOST
    }  # fmt: skip
    for queue in ("a", "b"):
        [event] = await queue_events(store, queue, "daemon_lost")
        assert event.detail is not None
        assert (event.detail["worker"], event.detail["current"]) == (silent.id, "inv-1")
    [event] = await queue_events(store, DEFAULT_QUEUE, "daemon_lost")
    assert (event.detail or {})["name"] == "d3"
    assert await registry.ask(Sweep()) == []  # lost once


async def test_workers_lost_at_one_sweep_are_written_together_after_their_events(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    a, b = await register(registry, "d1", "a"), await register(registry, "d2", "b")
    await beat(registry, a, age_s=60)
    await beat(registry, b, age_s=60)
    writes: list[tuple[str, tuple[object, ...]]] = []
    statuses = record_calls(store, "update_liveness", writes)
    record_calls(store, "append_queue_event", writes)
    assert {w.name for w in await registry.ask(Sweep())} == {"d1", "d2"}
    assert [sorted((w.name, w.status) for w in batch) for (batch,) in statuses] == [
        [("d1", LOST), ("d2", LOST)]
    ]
    assert [name for name, _ in writes] == ["append_queue_event"] * 2 + ["update_liveness"]
    assert {w.name: w.status for w in await store.list_workers(NS)} == {"d1": LOST, "d2": LOST}


async def test_a_lost_worker_that_beats_again_is_back(registry: ActorRef[WorkerMsg]) -> None:
    w = await register(registry, "d1", "a")
    await beat(registry, w, age_s=60)
    await registry.ask(Sweep())
    assert (await row(registry, w.id)).status is LOST
    assert (await beat(registry, w, IDLE)).queues == ["a"]
    assert (await row(registry, w.id)).status is IDLE


async def test_a_launch_that_never_registers_is_lost_after_the_launch_timeout(
    runtime: Runtime, store: InMemoryStore
) -> None:
    registry = await runtime.spawn(WorkerRegistry(store, launch_timeout_s=120.0, clock=WALL))
    slow = starting("slow", "a", started_s_ago=121)
    young = starting("young", "a", started_s_ago=119)
    await registry.ask(Prepare(NS, [slow, young]))
    assert [w.id for w in await registry.ask(Sweep())] == [slow.id]
    assert (await row(registry, young.id)).status is STARTING


async def test_a_launch_its_provider_holds_in_a_queue_is_timed_from_when_it_leaves_it(
    runtime: Runtime, store: InMemoryStore
) -> None:
    clock = Wall()
    registry = await runtime.spawn(WorkerRegistry(store, launch_timeout_s=120.0, clock=clock))
    pending = starting("pending", "a", started_s_ago=600)
    await registry.ask(Prepare(NS, [pending]))
    await registry.ask(Placed(NS, pending.id, {"slurm_job": "7", QUEUED: "true"}))
    assert await registry.ask(Sweep()) == []
    await registry.ask(Placed(NS, pending.id, {"slurm_job": "7", "node": "n1"}))
    clock.offset_s = 119
    assert await registry.ask(Sweep()) == []
    clock.offset_s = 121
    assert [w.id for w in await registry.ask(Sweep())] == [pending.id]


async def test_a_launch_retired_before_it_registered_is_judged_by_the_launch_timeout(
    runtime: Runtime, store: InMemoryStore
) -> None:
    registry = await runtime.spawn(
        WorkerRegistry(store, lost_after_s=10.0, launch_timeout_s=120.0, clock=WALL)
    )
    [young] = await registry.ask(Prepare(NS, [starting("young", "a", started_s_ago=60)]))
    assert (await registry.ask(RetireWorker(NS, "young"))).status is RETIRING
    assert await registry.ask(Sweep()) == []  # silent for 60 s, but it never registered
    [old] = await registry.ask(Prepare(NS, [starting("old", "a", started_s_ago=121)]))
    await registry.ask(RetireWorker(NS, "old"))
    assert [w.id for w in await registry.ask(Sweep())] == [old.id]
    assert (await row(registry, young.id)).status is RETIRING


async def test_mark_worker_lost_judges_again_by_the_registrys_clock(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    overdue = await register(registry, "d1", "a")
    fine = await register(registry, "d2", "a")
    await beat(registry, overdue, age_s=30)
    detail = {"reason": "no heartbeat", "by": "controller"}
    assert await registry.ask(MarkWorkerLost(NS, fine.id, detail)) is None
    assert await registry.ask(MarkWorkerLost("other", overdue.id, detail)) is None
    lost = await registry.ask(MarkWorkerLost(NS, overdue.id, detail))
    assert lost.status is LOST
    [event] = await queue_events(store, "a", "daemon_lost")
    assert event.detail is not None
    assert (event.detail["reason"], event.detail["by"], event.detail["worker"]) == (
        "no heartbeat",
        "controller",
        overdue.id,
    )
    assert await registry.ask(MarkWorkerLost(NS, overdue.id, detail)) is None  # idempotent


# ---- launches and exits ----------------------------------------------------------------


async def test_prepare_writes_starting_rows(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    rows = [starting("d1", "a"), starting("d2", "a")]
    assert await registry.ask(Prepare(NS, rows)) == rows
    assert [(w.name, w.status) for w in await store.list_workers(NS)] == [
        ("d1", STARTING), ("d2", STARTING)
    ]  # fmt: skip


async def test_prepare_is_all_or_nothing_when_a_name_is_held_by_a_live_worker(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    live = await register(registry, "taken")
    with pytest.raises(AlreadyExists, match="worker 'taken' already exists") as refused:
        await registry.ask(Prepare(NS, [starting("fresh"), starting("taken")]))
    assert refused.value.http_status == 409
    assert [w.id for w in await store.list_workers(NS)] == [live.id]
    assert [w.id for w in await registry.ask(ListWorkers(NS))] == [live.id]


async def test_prepare_replaces_the_row_of_a_dead_worker_of_that_name(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    old = await register(registry, "d1")
    await registry.ask(RetireWorker(NS, "d1"))
    await registry.ask(Exited(NS, old.id, 0, "retired"))
    [new] = await registry.ask(Prepare(NS, [starting("d1")]))
    assert [(w.id, w.status) for w in await store.list_workers(NS)] == [(new.id, STARTING)]
    assert (await beat(registry, old)).unknown is True  # the old id is gone
    assert (await beat(registry, new)).retire is False  # and took no order with it


async def test_an_exit_asked_for_or_clean_stops_the_worker(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    asked = await register(registry, "d1", "a")
    clean = await register(registry, "d2", "a")
    await beat(registry, asked, BUSY, current=["inv-1"])
    stopped = await registry.ask(Exited(NS, asked.id, -15, "stopped on request", requested=True))
    assert (stopped.status, stopped.current) == (STOPPED, None)
    assert (await registry.ask(Exited(NS, clean.id, 0, "exited"))).status is STOPPED
    assert {w.status for w in await store.list_workers(NS)} == {STOPPED}
    assert await queue_events(store, "a") == []


async def test_a_crashed_process_is_lost_with_its_exit_code(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    w = await register(registry, "d1", "a")
    assert (await registry.ask(Exited(NS, w.id, 3, "exited with 3"))).status is LOST
    [event] = await queue_events(store, "a", "daemon_lost")
    assert event.detail is not None
    assert (event.detail["exit_code"], event.detail["reason"]) == (3, "exited with 3")
    again = await registry.ask(Exited(NS, w.id, 3, "reported twice"))
    assert again.status is LOST
    assert len(await queue_events(store, "a", "daemon_lost")) == 1
    assert await registry.ask(Exited(NS, "w-unknown", 1, "?")) is None


async def test_a_process_that_never_started_is_lost(registry: ActorRef[WorkerMsg]) -> None:
    [w] = await registry.ask(Prepare(NS, [starting("d1")]))
    assert (await registry.ask(Exited(NS, w.id, None, "could not start"))).status is LOST


# ---- restart ---------------------------------------------------------------------------


async def test_a_crash_restarts_the_registry_from_the_stored_rows(
    registry: ActorRef[WorkerMsg], store: InMemoryStore
) -> None:
    w = await register(registry, "d1", "a")
    await registry.ask(RetireWorker(NS, "d1"))
    fail_once(store, "upsert_worker", RuntimeError("a bug"))
    with pytest.raises(Internal, match="worker-registry failed"):
        await register(registry, "d2")
    assert registry.restarts == 1
    assert [x.name for x in await registry.ask(ListWorkers(NS))] == ["d1"]
    assert (await beat(registry, w)).retire is True  # the retirement was rebuilt too
    await register(registry, "d2")
