"""Row images through a real ``LS_STATE``: a leader's writes, its replicas' files, rebuilds.

Every test runs on a nats-server of its own (a fresh JetStream: the stream's sequences are
the test's alone) and DuckDB files in ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import natsauth
import pytest
from msgspec.structs import replace
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from polling import eventually

from lakeshore.bus.state import StateLog, StateTail, ensure_state_stream, last_sequence, subject_of
from lakeshore.errors import LakeshoreError
from lakeshore.model import (
    Namespace,
    Provider,
    ProviderKind,
    Queue,
    QueueState,
    Token,
    Worker,
    WorkerStatus,
)
from lakeshore.model.images import Image, decode
from lakeshore.replica.projector import LeaderWrites, Projector, seed
from lakeshore.store import Store, open_store
from lakeshore.store.images import STATE_LOG, TABLES, tombstone
from lakeshore.store.port import StoredKey

T0 = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)
WAIT_S = 15.0

Rows = dict[str, list[tuple[Any, ...]]]
Step = Callable[[Store], Awaitable[object]]


@dataclass
class Plane:
    """One test's NATS, and the stores and projectors it opened (closed at teardown)."""

    nc: NatsClient
    js: JetStreamContext
    tmp: Path
    stack: contextlib.AsyncExitStack

    async def store(self, name: str) -> Store:
        store = await open_store(self.tmp / f"{name}.duckdb")
        self.stack.push_async_callback(store.close)
        return store

    async def project(self, store: Any) -> Projector:
        projector = Projector(store, StateTail(self.nc), self.js)
        await projector.start()
        self.stack.push_async_callback(projector.stop)
        return projector

    async def leader(self, name: str, epoch: int = 1) -> tuple[Store, StateLog, Projector]:
        store = await self.store(name)
        state = StateLog(self.js)
        projector = await self.project(store)
        await projector.applied(await state.begin(epoch))
        # As a new leader does: its own commits write the file from here.
        await projector.stop()
        store.write_through(LeaderWrites(state, projector))
        return store, state, projector


@pytest.fixture
async def plane(nats_server_factory, tmp_path: Path) -> AsyncIterator[Plane]:
    server = await nats_server_factory()
    nc = await natsauth.plane_nats(server.url)
    try:
        js = nc.jetstream(timeout=5)
        await ensure_state_stream(js)
        async with contextlib.AsyncExitStack() as stack:
            yield Plane(nc, js, tmp_path, stack)
    finally:
        await nc.close()


async def logged_rows(store: Store) -> Rows:
    """``SELECT *`` of every logged table, sorted."""

    def read(con: Any) -> Rows:
        return {
            t.name: con.execute(f"SELECT * FROM {t.name} ORDER BY ALL").fetchall()
            for t in TABLES.values()
        }

    return await store._run(read)


async def caught_up(plane: Plane, *stores: Store) -> int:
    """Wait until every store applied the whole stream; its last sequence."""
    last = await last_sequence(plane.js)
    for store in stores:
        await eventually(
            lambda s=store: s.log_position(STATE_LOG),
            until=lambda p: p == last,
            timeout_s=WAIT_S,
            what=f"the file to apply the state stream up to {last}",
        )
    return last


def _queue(name: str, **kw: Any) -> Queue:
    return Queue(**{"name": name, "namespace": "team", "created_at": T0, "updated_at": T0, **kw})


def _worker(id: str, name: str, queues: list[str]) -> Worker:
    return Worker(id=id, name=name, namespace="team", queues=queues, started_at=T0)


def _provider(name: str, **kw: Any) -> Provider:
    return Provider(name=name, namespace="team", kind=ProviderKind.SSH, created_at=T0, **kw)


KEYS = {
    "a.b c*": StoredKey(invocation_id="inv-1", digest="d1"),
    "a.b c>": StoredKey(invocation_id="inv-2", digest="d2"),
    "plain-key": StoredKey(invocation_id="inv-3", digest="d3"),
}

#: A write of every kind and every write method, each as ``(name, write)``; the deleted
#: rows (queue ``gone``, worker ``w-2``, provider ``old``, key ``a.b c>``) leave tombstones.
STEPS: list[tuple[str, Step]] = [
    ("insert_namespace", lambda s: s.insert_namespace(Namespace(name="team", org="acme", created_at=T0))),  # noqa: E501
    ("insert_namespace again", lambda s: s.insert_namespace(Namespace(name="team", org="x", created_at=T1))),  # noqa: E501
    ("insert_token", lambda s: s.insert_token(Token(id="t-1", namespace="team", created_at=T0), "h1")),  # noqa: E501
    ("insert_token admin", lambda s: s.insert_token(Token(id="t-2", namespace=None, admin=True, created_at=T0), "h2")),  # noqa: E501
    ("insert_token reused secret", lambda s: s.insert_token(Token(id="t-3", namespace="team", created_at=T0), "h1")),  # noqa: E501
    ("revoke_token", lambda s: s.revoke_token("team", "t-1", at=T1)),
    ("revoke_token again", lambda s: s.revoke_token("team", "t-1", at=T1)),
    ("insert_queue jobs", lambda s: s.insert_queue(_queue("jobs", labels={"a": "b"}))),
    ("insert_queue gone", lambda s: s.insert_queue(_queue("gone"))),
    ("update_queue", lambda s: s.update_queue(_queue("jobs", state=QueueState.PAUSED, description="held", max_depth=7, updated_at=T1))),  # noqa: E501
    ("update_queue missing", lambda s: s.update_queue(_queue("nope"))),
    ("delete_queue", lambda s: s.delete_queue("team", "gone")),
    ("delete_queue again", lambda s: s.delete_queue("team", "gone")),
    ("upsert_worker w-1", lambda s: s.upsert_worker(_worker("w-1", "gpu-1", ["jobs", "gone"]))),
    ("upsert_worker w-2", lambda s: s.upsert_worker(_worker("w-2", "gpu-2", ["gone"]))),
    ("upsert_worker name taken", lambda s: s.upsert_worker(_worker("w-3", "gpu-1", []))),
    ("update_liveness", lambda s: s.update_liveness([replace(_worker("w-1", "gpu-1", []), status=WorkerStatus.BUSY, current="inv-1", last_heartbeat=T1)])),  # noqa: E501
    ("scrub_queue_from_workers", lambda s: s.scrub_queue_from_workers("team", "gone")),
    ("delete_worker", lambda s: s.delete_worker("w-2")),
    ("delete_worker again", lambda s: s.delete_worker("w-2")),
    ("insert_provider", lambda s: s.insert_provider(_provider("ssh", config={"hosts": ["a"]}))),
    ("insert_provider old", lambda s: s.insert_provider(_provider("old"))),
    ("update_provider", lambda s: s.update_provider(_provider("ssh", config={"hosts": ["a", "b"]}, labels={"x": "y"}))),  # noqa: E501
    ("delete_provider", lambda s: s.delete_provider("team", "old")),
    ("append_queue_event", lambda s: s.append_queue_event("team", "jobs", "created", "t-2", {"n": 1}, ts=T0)),  # noqa: E501
    ("append_queue_event no detail", lambda s: s.append_queue_event("team", "jobs", "paused", None, None, ts=T1)),  # noqa: E501
    ("put_keys", lambda s: s.put_keys("team", "jobs", KEYS, T1)),
    ("forget_keys", lambda s: s.forget_keys("team", "jobs", ["a.b c>"])),
]  # fmt: skip


async def answer(step: Step, store: Store) -> object:
    """What the write returned, or the refusal it raised (type and message)."""
    try:
        return await step(store)
    except LakeshoreError as e:
        return (type(e).__name__, str(e))


async def run_steps(store: Store, steps: Sequence[tuple[str, Step]] = STEPS) -> None:
    for _, step in steps:
        await answer(step, store)


async def test_a_leaders_writes_answer_as_a_lone_store_and_replicas_get_the_same_rows(
    plane: Plane,
) -> None:
    alone = await plane.store("alone")
    leader, _, _ = await plane.leader("leader")
    for name, step in STEPS:
        expected = await answer(step, alone)
        assert await answer(step, leader) == expected, name
        assert await logged_rows(leader) == await logged_rows(alone), name
    replica = await plane.store("replica")
    await plane.project(replica)
    last = await caught_up(plane, leader, replica)
    assert last > len(STEPS) // 2
    assert await logged_rows(replica) == await logged_rows(leader)
    assert await logged_rows(replica) == await logged_rows(alone)
    assert await leader.log_position(STATE_LOG) == last


async def test_a_refused_write_publishes_nothing(plane: Plane) -> None:
    leader, _, _ = await plane.leader("leader")
    await leader.insert_namespace(Namespace(name="team", org="acme", created_at=T0))
    await leader.insert_queue(_queue("jobs"))
    last = await last_sequence(plane.js)
    refusals: list[tuple[str, Step]] = [
        ("namespace taken", STEPS[1][1]),
        ("queue missing", lambda s: s.update_queue(_queue("nope"))),
        ("no such queue", lambda s: s.delete_queue("team", "nope")),
        ("no such worker", lambda s: s.delete_worker("nope")),
        ("no such token", lambda s: s.revoke_token("team", "nope")),
        ("no such provider", lambda s: s.delete_provider("team", "nope")),
        ("no such key", lambda s: s.forget_keys("team", "jobs", ["nope"])),
        ("no worker serves it", lambda s: s.scrub_queue_from_workers("team", "jobs")),
        ("no key", lambda s: s.put_keys("team", "jobs", {}, T0)),
    ]
    for name, step in refusals:
        outcome = await answer(step, leader)
        assert isinstance(outcome, tuple) or outcome in (None, False, []), name
        assert await last_sequence(plane.js) == last, name


async def test_a_replica_restarted_resumes_from_its_position_and_applies_each_image_once(
    plane: Plane,
) -> None:
    leader, _, _ = await plane.leader("leader")
    await run_steps(leader)
    follower = await plane.store("follower")
    first = await plane.project(follower)
    position = await caught_up(plane, leader, follower)
    await first.stop()
    more: list[tuple[str, Step]] = [
        (f"event {i}", lambda s, i=i: s.append_queue_event("team", "jobs", f"e{i}", None, {"i": i}, ts=T1))  # noqa: E501
        for i in range(5)
    ] + [
        ("insert_queue later", lambda s: s.insert_queue(_queue("later"))),
        ("insert_namespace later", lambda s: s.insert_namespace(Namespace(name="later", org="acme", created_at=T1))),  # noqa: E501
    ]  # fmt: skip
    await run_steps(leader, more)
    assert await follower.log_position(STATE_LOG) == position

    recording = Recording(follower)
    second = await plane.project(recording)
    assert second.position == position
    await caught_up(plane, follower)
    assert await logged_rows(follower) == await logged_rows(leader)
    applied = [image for _, batch in recording.batches for image in batch]
    assert len(applied) == len(more)
    assert len({(i.kind, i.key) for i in applied}) == len(more)
    seqs = [seq for seq, _ in recording.batches]
    assert seqs == sorted(set(seqs)) and seqs[0] > position
    ids = await follower._run(
        lambda con: con.execute("SELECT count(*), count(DISTINCT id) FROM queue_events").fetchone()
    )
    assert ids == (2 + 5, 2 + 5)


class Recording:
    """A store as a projector sees it, recording every batch it applies."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.batches: list[tuple[int | None, list[Image]]] = []

    async def log_position(self, log: str) -> int | None:
        return await self.store.log_position(log)

    async def apply_images(self, batch: Sequence[Image], seq: int | None) -> None:
        await self.store.apply_images(batch, seq)
        self.batches.append((seq, list(batch)))


async def test_a_fresh_file_rebuilt_from_the_stream_equals_the_leaders_deleted_rows_included(
    plane: Plane,
) -> None:
    leader, _, _ = await plane.leader("leader")
    await run_steps(leader)
    rebuilt = await plane.store("rebuilt")
    await plane.project(rebuilt)
    await caught_up(plane, leader, rebuilt)
    rows = await logged_rows(rebuilt)
    assert rows == await logged_rows(leader)
    assert await rebuilt.get_queue("team", "gone") is None
    assert [w.id for w in await rebuilt.list_workers("team")] == ["w-1"]
    assert [p.name for p in await rebuilt.list_providers("team")] == ["ssh"]
    assert await rebuilt.token_by_id("t-1") is None
    assert set(await rebuilt.get_keys("team", "jobs", list(KEYS), T0)) == {"a.b c*", "plain-key"}
    for gone in (
        tombstone("queue", "team", "gone"),
        tombstone("worker", "w-2"),
        tombstone("provider", "team", "old"),
        tombstone("idem", "team", "jobs", "a.b c>"),
    ):
        stored = await plane.js.get_last_msg("LS_STATE", subject_of(gone))
        assert decode(stored.data) == gone


async def test_seed_publishes_a_files_rows_to_an_empty_stream_once(plane: Plane) -> None:
    store = await plane.store("before-the-stream")
    await run_steps(store)
    assert await store.log_position(STATE_LOG) is None
    state = StateLog(plane.js)
    projector = await plane.project(store)
    await projector.applied(await state.begin(1))
    await projector.stop()
    store.write_through(LeaderWrites(state, projector))
    rows = await logged_rows(store)
    images = await store.all_images()
    assert await seed(store, state) == len(images) > 0
    assert store.state_position == await last_sequence(plane.js)
    assert await logged_rows(store) == rows
    fresh = await plane.store("fresh")
    await plane.project(fresh)
    last = await caught_up(plane, store, fresh)
    assert await logged_rows(fresh) == rows
    assert await seed(store, state) == 0
    assert await last_sequence(plane.js) == last


async def test_a_lagging_replica_applies_compacted_renames_of_unique_names(
    plane: Plane,
) -> None:
    leader, state, _ = await plane.leader("leader")
    await leader.insert_namespace(Namespace(name="team", org="acme", created_at=T0))
    await leader.upsert_worker(_worker("w-a", "x", []))
    lagging = await plane.store("lagging")
    projector = await plane.project(lagging)
    await caught_up(plane, leader, lagging)
    await projector.stop()
    await leader.upsert_worker(_worker("w-a", "y", []))
    await leader.upsert_worker(_worker("w-b", "x", []))
    # More than a tail's batch between them, so the lagging replica reads w-b's image in
    # a batch before the one with w-a's last (its rename to "y" was compacted away).
    await asyncio.gather(
        *(leader.insert_namespace(Namespace(name=f"ns-{i}", org="acme", created_at=T0))
          for i in range(600))
    )  # fmt: skip
    await leader.upsert_worker(_worker("w-a", "z", []))
    await plane.project(lagging)
    await caught_up(plane, leader, lagging)
    assert await logged_rows(lagging) == await logged_rows(leader)
