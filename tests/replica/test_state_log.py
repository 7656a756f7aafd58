"""The state log's writer on a real ``LS_STATE``: fencing, subjects, headers, TTLs.

Every test that needs NATS runs on a nats-server of its own (a fresh JetStream).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import natsauth
import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js import errors as jse
from nats_cluster import Cluster, start_cluster
from polling import eventually

from lakeshore.bus.state import (
    EPOCH_HEADER,
    StateLog,
    StateTail,
    ensure_state_stream,
    last_sequence,
    subject_of,
)
from lakeshore.errors import NotLeader
from lakeshore.model import Namespace
from lakeshore.model.images import Image
from lakeshore.replica.projector import LeaderWrites, Projector, StandbyWrites
from lakeshore.store import open_store
from lakeshore.store.images import STATE_LOG, TABLES, of_row, tombstone
from lakeshore.store.port import StoredKey

T0 = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
STREAM = "LS_STATE"
DIGEST = re.compile(r"~[0-9a-f]{40}")


@pytest.fixture
async def nc(nats_server_factory) -> AsyncIterator[NatsClient]:
    server = await nats_server_factory()
    nc = await natsauth.plane_nats(server.url)
    try:
        await ensure_state_stream(nc.jetstream(timeout=5))
        yield nc
    finally:
        await nc.close()


@pytest.fixture
def js(nc: NatsClient) -> JetStreamContext:
    return nc.jetstream(timeout=5)


def _ns(name: str) -> Image:
    return of_row("ns", {"name": name, "org": "acme", "created_at": T0})


async def _rows(store: Any) -> dict[str, list[tuple[Any, ...]]]:
    def read(con: Any) -> dict[str, list[tuple[Any, ...]]]:
        return {
            t.name: con.execute(f"SELECT * FROM {t.name} ORDER BY ALL").fetchall()
            for t in TABLES.values()
        }

    return await store._run(read)


async def test_a_deposed_state_log_is_refused_and_stores_nothing(js) -> None:
    old, new = StateLog(js), StateLog(js)
    await old.begin(1)
    await old.publish([_ns("before")])
    await new.begin(2)
    last = await last_sequence(js)
    with pytest.raises(NotLeader):
        await old.publish([_ns("late"), _ns("later")])
    with pytest.raises(NotLeader):
        await old.publish([_ns("again")])
    assert await last_sequence(js) == last
    for name in ("late", "later", "again"):
        with pytest.raises(jse.NotFoundError):
            await js.get_last_msg(STREAM, subject_of(_ns(name)))
    seq = await new.publish([_ns("on-time")])
    assert seq == last + 1
    stored = await js.get_last_msg(STREAM, subject_of(_ns("on-time")))
    assert stored.headers[EPOCH_HEADER] == "2"


async def test_a_deposed_leaders_store_refuses_a_write_and_keeps_its_file(
    nc, js, tmp_path: Path
) -> None:
    store = await open_store(tmp_path / "old.duckdb")
    projector = Projector(store, StateTail(nc), js)
    await projector.start()
    try:
        old = StateLog(js)
        await projector.applied(await old.begin(1))
        await projector.stop()
        store.write_through(LeaderWrites(old, projector))
        await store.insert_namespace(Namespace(name="team", org="acme", created_at=T0))
        await StateLog(js).begin(2)
        rows, last = await _rows(store), await last_sequence(js)
        with pytest.raises(NotLeader):
            await store.insert_namespace(Namespace(name="other", org="acme", created_at=T0))
        assert await last_sequence(js) == last
        assert await _rows(store) == rows
        assert await store.get_namespace("other") is None
    finally:
        await projector.stop()
        await store.close()


async def test_a_standby_store_refuses_writes_naming_the_leader(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "standby.duckdb")
    try:
        await store.insert_namespace(Namespace(name="team", org="acme", created_at=T0))
        store.write_through(StandbyWrites("http://x"))
        rows = await _rows(store)
        with pytest.raises(NotLeader) as refused:
            await store.insert_namespace(Namespace(name="other", org="acme", created_at=T0))
        assert refused.value.leader_url == "http://x"
        assert "http://x" in str(refused.value)
        with pytest.raises(NotLeader):
            key = {"k": StoredKey(invocation_id="i", digest="d")}
            await store.put_keys("team", "jobs", key, T0)
        assert await _rows(store) == rows
        assert await store.log_position(STATE_LOG) is None
    finally:
        await store.close()


def test_a_key_unsafe_in_a_subject_is_one_digest_token() -> None:
    unsafe = ["a.b c*", "a.b c>", "a b", "x.y", "*", ">", "", "é", "~abc", "k" * 65]
    subjects = [subject_of(tombstone("idem", "team", "jobs", key)) for key in unsafe]
    for key, subject in zip(unsafe, subjects, strict=True):
        tokens = subject.split(".")
        assert tokens[:4] == ["lsstate", "idem", "team", "jobs"], key
        assert len(tokens) == 5 and DIGEST.fullmatch(tokens[4]), (key, subject)
        assert not re.search(r"[\s*>]", subject), key
    assert len(set(subjects)) == len(unsafe)


def test_a_plain_key_stays_readable() -> None:
    assert subject_of(tombstone("queue", "team", "jobs")) == "lsstate.queue.team.jobs"
    assert subject_of(tombstone("qevent", 42)) == "lsstate.qevent.42"
    assert subject_of(tombstone("idem", "team", "jobs", "Key_1-x")) == "lsstate.idem.team.jobs.Key_1-x"  # fmt: skip  # noqa: E501


def _queue_row(name: str) -> Image:
    return of_row("queue", {"namespace": "team", "name": name, "kind": "fifo",
                            "state": "active", "description": "", "max_depth": None,
                            "on_full": "reject", "elasticity": "{}", "created_at": T0,
                            "updated_at": T0, "labels": "{}"})  # fmt: skip


def _key(key: str) -> Image:
    return of_row("idem", {"namespace": "team", "queue": "jobs", "key": key,
                           "invocation_id": "inv", "digest": "d", "created_at": T0})  # fmt: skip


async def test_idempotency_key_images_carry_the_ttl_and_nothing_else_does(js) -> None:
    state = StateLog(js, key_ttl_s=3600)
    await state.begin(1)
    kept, forgotten = _key("a.b c*"), tombstone("idem", "team", "jobs", "a.b c>")
    others = [_ns("team"), _queue_row("jobs"), tombstone("queue", "team", "gone"),
              tombstone("worker", "w-1"), tombstone("provider", "team", "old")]  # fmt: skip
    await state.publish([kept, forgotten, *others])
    for image in (kept, forgotten):
        stored = await js.get_last_msg(STREAM, subject_of(image))
        assert stored.headers["Nats-TTL"] == "3600", image
        assert stored.headers[EPOCH_HEADER] == "1"
    for image in others:
        stored = await js.get_last_msg(STREAM, subject_of(image))
        assert "Nats-TTL" not in (stored.headers or {}), image
        assert stored.headers[EPOCH_HEADER] == "1"


async def test_without_a_key_ttl_key_images_are_kept(js) -> None:
    state = StateLog(js)
    await state.begin(1)
    await state.publish([_key("k")])
    stored = await js.get_last_msg(STREAM, subject_of(_key("k")))
    assert "Nats-TTL" not in stored.headers


async def test_an_expired_key_image_leaves_the_stream_and_a_tombstone_stays(js) -> None:
    state = StateLog(js, key_ttl_s=1)
    await state.begin(1)
    gone = tombstone("queue", "team", "gone")
    await state.publish([_key("short"), gone])

    async def key_left() -> bool:
        try:
            await js.get_last_msg(STREAM, subject_of(_key("short")))
        except jse.NotFoundError:
            return True
        return False

    await eventually(key_left, timeout_s=15.0, what="the key image to expire")
    assert (await js.get_last_msg(STREAM, subject_of(gone))).data


async def test_a_write_of_many_rows_lands_whole_on_a_replicated_stream(
    nats_server_factory, tmp_path: Path
) -> None:
    # A replicated stream refuses a fenced write while another fenced on the same epoch
    # subject is being replicated ("wrong last sequence", 10164): a write of many rows
    # must not refuse itself.
    async with _replicated_state(nats_server_factory, tmp_path) as (_, nc):
        js = nc.jetstream(timeout=5)
        log = StateLog(js)
        await log.begin(1)
        rows = [_ns(f"ns-{i}") for i in range(64)]
        seq = await log.publish(rows)
        assert seq == await last_sequence(js)
        for image in rows:
            stored = await js.get_last_msg(STREAM, subject_of(image))
            assert stored.headers[EPOCH_HEADER] == "1"


@contextlib.asynccontextmanager
async def _replicated_state(
    nats_server_factory: Any, tmp_path: Path
) -> AsyncIterator[tuple[Cluster, NatsClient]]:
    """A 3-node cluster with an R3 ``LS_STATE``, and the control plane's connection to it."""
    cluster = await start_cluster(nats_server_factory, tmp_path)
    nc = await natsauth.plane_nats(cluster.url, ca_pem=cluster.files.ca.read_text())
    try:
        await eventually(
            lambda: ensure_state_stream(nc.jetstream(timeout=5), replicas=3),
            retry_on=(jse.APIError, TimeoutError),
            timeout_s=30,
            what="a replicated state stream",
        )
        yield cluster, nc
    finally:
        await nc.close()


async def test_a_stored_read_gives_what_follows_a_sequence_in_order_and_in_batches(nc, js) -> None:
    log = StateLog(js)
    epoch_seq = await log.begin(1)
    await log.publish([_ns("renamed")])
    await log.publish([_ns(f"ns-{i}") for i in range(600)])
    last = await log.publish([_ns("renamed")])  # its first image leaves the stream
    tail = StateTail(nc)
    read: list[tuple[int, bytes]] = []
    batches = 0
    while batch := await tail.read_stored(read[-1][0] if read else 0):
        batches += 1
        read += batch
    seqs = [seq for seq, _ in read]
    assert seqs == sorted(seqs) and seqs[-1] == last and batches >= 2
    assert read[0] == (epoch_seq, b"")  # an epoch record comes as empty data
    assert epoch_seq + 1 not in seqs  # replaced by the later image of the same row
    assert len(read) == 1 + 600 + 1
    assert await tail.read_stored(last) == []


async def test_a_catch_up_reads_a_replica_of_a_stream_without_quorum(
    nats_server_factory, tmp_path: Path
) -> None:
    # A new leader catches up to its epoch record while the cluster may still be electing:
    # its reads are answered by any replica, with no stream leader and no consumer.
    store = await open_store(tmp_path / "replica.duckdb")
    try:
        async with _replicated_state(nats_server_factory, tmp_path) as (cluster, nc):
            js = nc.jetstream(timeout=5)
            log = StateLog(js)
            await log.begin(1)
            last = await log.publish([_ns(f"ns-{i}") for i in range(20)])
            info = await eventually(
                lambda: js.stream_info(STREAM),
                until=lambda si: all(r.current for r in si.cluster.replicas or []),
                timeout_s=30,
                what="every replica current",
            )
            # A follower is left alone (the client reconnects to it).
            survivor = cluster.node_named(info.cluster.replicas[0].name)
            for node in cluster.nodes:
                if node is not survivor:
                    await node.kill()
            projector = Projector(store, StateTail(nc), js)
            await projector.catch_up(last, timeout_s=30)
            assert projector.position == last
            assert await store.log_position(STATE_LOG) == last
            assert {n.name for n in await store.list_namespaces()} == {f"ns-{i}" for i in range(20)}
    finally:
        await store.close()


async def _deposed_part_way(nc, js, write) -> NotLeader:
    """Run ``write`` (it logs many images under an epoch) while a newer epoch begins as
    soon as the first of them lands; the refusal, once one came part way (a run whose
    images all landed first tries again)."""
    for attempt in range(1, 6):
        outcome = await _deposed_run(nc, js, write, attempt)
        if isinstance(outcome, NotLeader) and outcome.landed:
            return outcome
    raise AssertionError("no run was deposed part way in 5 tries")


async def _deposed_run(nc, js, write, attempt: int) -> object:
    old = StateLog(js)
    await old.begin(attempt * 2 - 1)
    landed = asyncio.Event()

    async def seen(_: object) -> None:  # a core view of what the stream takes
        landed.set()

    async def depose() -> None:
        await landed.wait()
        await StateLog(js).begin(attempt * 2)

    sub = await nc.subscribe("lsstate.ns.>", cb=seen)
    try:
        deposing = asyncio.create_task(depose())
        try:
            outcome = await write(old, attempt)
        except NotLeader as e:
            outcome = e
        await deposing
    finally:
        await sub.unsubscribe()
    return outcome


async def _stored(js, image: Image) -> bool:
    try:
        await js.get_last_msg(STREAM, subject_of(image))
    except jse.NotFoundError:
        return False
    return True


async def test_a_log_deposed_part_way_names_the_images_that_landed(nc, js) -> None:
    batches: dict[int, list[Image]] = {}

    async def write(log: StateLog, attempt: int) -> None:
        # The same row twice: its first image is held by its second, which lands later.
        names = [f"n{attempt}-{i}" for i in range(300)] + [f"n{attempt}-0"]
        batches[attempt] = [_ns(n) for n in names]
        await log.publish(batches[attempt])

    refused = await _deposed_part_way(nc, js, write)
    batch = batches[max(batches)]
    stored = [await _stored(js, image) for image in batch]
    assert 0 < sum(stored) < len(batch) - 1
    assert refused.landed == {i for i, held in enumerate(stored) if held}
    assert 0 not in refused.landed  # its image moved behind the cut, with the last one


async def test_a_batch_deposed_part_way_answers_each_write_by_what_the_log_holds(
    nc, js, tmp_path: Path
) -> None:
    store = await open_store(tmp_path / "old.duckdb")
    projector = Projector(store, StateTail(nc), js)
    answers: dict[str, BaseException | None] = {}

    async def write(log: StateLog, attempt: int) -> None:
        await projector.start()
        await projector.applied(await last_sequence(js))
        await projector.stop()
        store.write_through(LeaderWrites(log, projector))
        names = [f"t{attempt}-{i}" for i in range(300)]

        async def insert(name: str) -> None:
            try:
                await store.insert_namespace(Namespace(name=name, org="acme", created_at=T0))
            except NotLeader as e:
                answers[name] = e
                raise
            answers[name] = None

        answers.clear()
        await asyncio.gather(*(insert(n) for n in names), return_exceptions=True)
        taken = frozenset(i for i, n in enumerate(names) if answers[n] is None)
        if 0 < len(taken) < len(names):  # (before the fix every write was refused)
            raise NotLeader("part way", landed=taken)

    try:
        await _deposed_part_way(nc, js, write)
    finally:
        await projector.stop()
        await store.close()
    taken = {n for n, e in answers.items() if e is None}
    assert taken and len(taken) < len(answers)
    for name, error in answers.items():
        assert await _stored(js, _ns(name)) == (error is None), (name, error)
