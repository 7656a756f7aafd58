"""The closed bus, probed: every probe of spec/security.md, by a client without credentials,
with another org's credentials and with another daemon's of the same org, against a real
control plane on a real nats-server with the auth callout on.

Each probe must be refused — the connection is refused, NATS reports a permissions
violation, or the Recorder fences the event (recorded ``stale``) — and nothing changes:
the streams' messages, the results, the worker rows and every job's state are compared
before and after.
"""

from __future__ import annotations

from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NatsClient
from polling import eventually

from lakeshore.bus import codec, subjects
from lakeshore.code import bucket, snapshot
from lakeshore.model import (
    DaemonControl,
    EventBatch,
    EventType,
    FastResult,
    FastSubmit,
    Heartbeat,
    InvocationEvent,
    Result,
    WorkerRegister,
    WorkerStatus,
    now,
)

from .world import NS, REFUSED_S, RIVAL_NS, WAIT_S, Client, World


async def _refused(client: Client, subject: str, data: bytes = b"") -> None:
    """A request the server must refuse with a permissions violation (no answer comes)."""
    with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
        await client.nc.request(subject, data, timeout=REFUSED_S)
    await eventually(
        lambda: client.refused(), until=bool, timeout_s=WAIT_S, what=f"{subject} refused"
    )


async def _identities(world: World) -> dict[str, Client]:
    """The three kinds of prober: another org's daemon and producer, a peer daemon."""
    rival = await world.join(world.rival_token, RIVAL_NS)
    peer = await world.join(world.peer_token, NS)
    return {
        "rival daemon": await world.as_daemon(rival, "rival daemon"),
        "rival producer": await world.as_producer(world.rival_token, "rival producer"),
        "peer daemon": await world.as_daemon(peer, "peer daemon"),
    }


def _event(world: World, kind: EventType, worker: str, job: str, epoch: int) -> bytes:
    ev = InvocationEvent(
        namespace=NS, queue="busy", invocation_id=job, ts=now(), type=kind,
        attempt=epoch, worker=worker, epoch=epoch,
        detail={"exit_code": 0} if kind is EventType.SUCCEEDED else {"error": "forged"},
    )  # fmt: skip
    return codec.encode(EventBatch(events=[ev]))


async def test_no_credentials_no_connection(world: World) -> None:
    before = await world.snapshot()
    for options in ({}, {"user": "daemon", "password": "forged"}, {"token": "lsk_guess"}):
        nc = NatsClient()
        try:
            with pytest.raises(nats.errors.Error, match="Authorization Violation"):
                await nc.connect(world.url, allow_reconnect=False, connect_timeout=5, **options)
        finally:
            await nc.close()
    assert await world.snapshot() == before


async def test_every_probe_of_another_org_and_of_a_peer_daemon_is_refused(world: World) -> None:
    before = await world.snapshot()
    probers = await _identities(world)
    a_id = world.a.worker.id
    busy_stream = subjects.queue_stream(NS, "busy")
    secret_stream = subjects.queue_stream(NS, "secret")
    result_key = subjects.result_key(NS, world.done_job, 1)

    for who, client in probers.items():
        # list streams
        await _refused(client, "$JS.API.STREAM.NAMES")
        client.errors.clear()
        # retire or cancel another daemon
        await client.nc.publish(
            subjects.daemon_control_subject(NS, a_id), codec.encode(DaemonControl(retire=True))
        )
        await client.nc.flush()
        await eventually(lambda c=client: c.refused(), until=bool, timeout_s=WAIT_S, what=who)
        client.errors.clear()
        # register a worker as another daemon
        reg = WorkerRegister(namespace=NS, name="impostor", id=a_id)
        await _refused(client, subjects.register_subject(NS, a_id), codec.encode(reg))
        client.errors.clear()
        # heartbeat as another daemon
        hb = Heartbeat(worker_id=a_id, namespace=NS, status=WorkerStatus.STOPPED, ts=now())
        await _refused(client, subjects.heartbeat_subject(NS, a_id), codec.encode(hb))
        client.errors.clear()
        # forge a completion as the daemon that claimed the job
        forged = _event(world, EventType.SUCCEEDED, a_id, world.busy_job, 1)
        await _refused(client, subjects.event_subject(NS, "busy", a_id), forged)
        client.errors.clear()
        # read another org's (or, for a peer, the other daemon's) result ... and put one
        await _refused(client, f"$JS.API.DIRECT.GET.KV_{subjects.RESULTS_BUCKET}.$KV."
                       f"{subjects.RESULTS_BUCKET}.{result_key}")  # fmt: skip
        client.errors.clear()
        # write a row of the control plane (a token of its own) or take the leader lease
        await _refused(client, f"{subjects.STATE_PREFIX}.token.forged", b"\x93")
        client.errors.clear()
        await _refused(client, subjects.lease_subject(), b'{"holder_id": "me"}')
        client.errors.clear()
        await _refused(client, f"$JS.API.STREAM.MSG.GET.{subjects.STATE_STREAM}", b'{"seq":1}')
        client.errors.clear()
        # fill the control plane's reserve in JetStream's store, or purge it
        await _refused(client, subjects.reserve_subject(), b"\0" * 1024)
        client.errors.clear()
        await _refused(client, f"$JS.API.STREAM.PURGE.{subjects.RESERVE_STREAM}")
        client.errors.clear()
        # read the victim's live logs: subscribe to them, or read them from the stream
        # through a consumer, a direct get or a message get (a peer daemon of the same
        # namespace may publish logs there, never read any)
        await client.nc.subscribe(subjects.log_put_subject(NS))
        await client.nc.flush()
        await eventually(lambda c=client: c.refused(), until=bool, timeout_s=WAIT_S, what=who)
        client.errors.clear()
        logs, busy_log = subjects.LOGS_STREAM, subjects.log_subject(NS, world.busy_job, 1)
        await _refused(client, f"$JS.API.CONSUMER.CREATE.{logs}", b'{"stream_name":"LS_LOGS"}')
        client.errors.clear()
        await _refused(client, f"$JS.API.DIRECT.GET.{logs}.{busy_log}")
        client.errors.clear()
        await _refused(client, f"$JS.API.STREAM.MSG.GET.{logs}", b'{"seq":1}')
        client.errors.clear()
        await _refused(client, f"$JS.API.STREAM.INFO.{logs}", b'{"subjects_filter":">"}')
        client.errors.clear()

    for who in ("rival daemon", "rival producer"):
        client = probers[who]
        # read a pending invocation of another org (it carries SECRET in its env)
        await _refused(client, f"$JS.API.CONSUMER.MSG.NEXT.{secret_stream}.p0", b'{"batch":1}')
        client.errors.clear()
        await _refused(client, f"$JS.API.STREAM.MSG.GET.{secret_stream}", b'{"seq":1}')
        client.errors.clear()
        # ... or by a batch of direct gets (queue streams allow them, for the control plane)
        await _refused(client, f"$JS.API.DIRECT.GET.{secret_stream}", b'{"seq":1,"batch":8}')
        client.errors.clear()
        # forge a result of another org's job
        fake = codec.encode(Result(id=world.busy_job, ok=True, worker=who, epoch=1))
        await _refused(client, subjects.result_subject(NS, world.busy_job, 1), fake)
        client.errors.clear()
        # ack (delete) another org's claimed message
        await _refused(client, f"$JS.ACK.{busy_stream}.p0.1.2.2.0.0", b"+ACK")
        client.errors.clear()
        # submit to another org's queue through the fast path (with its own token)
        body = FastSubmit(token=world.rival_token, invocations=[{"command": ["true"]}])
        await _refused(client, subjects.submit_subject(NS, "secret"), codec.encode(body))
        client.errors.clear()
        # wait for another org's result through the fast path (with its own token)
        ask = FastResult(token=world.rival_token, wait_s=0)
        await _refused(client, subjects.result_wait_subject(NS, world.done_job), codec.encode(ask))
        client.errors.clear()
        # write into another org's live log
        busy_log = subjects.log_subject(NS, world.busy_job, 1)
        await _refused(client, busy_log, b"forged output")
        client.errors.clear()
        # a forged event of another org as itself
        forged = _event(world, EventType.FAILED, who, world.busy_job, 2)
        await _refused(client, subjects.event_subject(NS, "busy", "rival"), forged)
        client.errors.clear()
        # read another org's code (its meta, a chunk), write into or purge its bucket
        code, bucket = subjects.code_stream(NS), subjects.code_bucket(NS)
        await _refused(client, subjects.code_read_subject(NS), b'{"seq":1}')
        client.errors.clear()
        await _refused(client, f"$JS.API.DIRECT.GET.{code}", b'{"seq":1}')
        client.errors.clear()
        await _refused(client, f"$O.{bucket}.C.forged", b"forged code")
        client.errors.clear()
        await _refused(client, f"$JS.API.STREAM.PURGE.{code}")
        client.errors.clear()

    after = await world.snapshot()
    assert after == before
    assert (await world.api.get(f"/v1/namespaces/{NS}/jobs/{world.busy_job}"))[1]["state"] == (
        "running"
    )


async def test_a_peer_daemon_cannot_complete_a_job_another_daemon_claimed(world: World) -> None:
    peer_access = await world.join(world.peer_token, NS)
    peer = await world.as_daemon(peer_access, "peer daemon")
    a_id = world.a.worker.id
    js = peer.nc.jetstream()
    own = subjects.event_subject(NS, "busy", peer_access.worker_id)
    # As itself, for the attempt daemon a claimed: fenced, recorded as stale.
    await js.publish(own, _event(world, EventType.SUCCEEDED, peer_access.worker_id,
                                 world.busy_job, 1))  # fmt: skip
    # As daemon a, on its own subject: the feed drops it (not its publisher's).
    await js.publish(own, _event(world, EventType.FAILED, a_id, world.busy_job, 1))

    async def job() -> dict[str, Any]:
        return (await world.api.get(f"/v1/namespaces/{NS}/jobs/{world.busy_job}"))[1]

    shown = await eventually(
        job, until=lambda j: j["stale"] >= 1, timeout_s=WAIT_S, what="the forgery fenced"
    )
    assert shown["stale"] == 1  # the second forgery never reached the Recorder
    assert (shown["state"], shown["worker"]) == ("running", a_id)


async def test_a_daemon_reads_its_own_orgs_code_and_only_by_message_gets(world: World) -> None:
    """The grant that refuses another org's daemons lets the org's own read its snapshots
    (a daemon fetching its run's code), and nothing more of the bucket."""
    peer_access = await world.join(world.peer_token, NS)
    peer = await world.as_daemon(peer_access, "peer daemon")
    data = await bucket.read(peer.nc.jetstream(), NS, world.code_digest)
    assert snapshot.digest_of(data) == world.code_digest
    # It can neither list nor write the bucket, nor delete from it.
    await _refused(peer, f"$JS.API.STREAM.INFO.{subjects.code_stream(NS)}")
    peer.errors.clear()
    await _refused(peer, f"$O.{subjects.code_bucket(NS)}.C.forged", b"forged code")
    peer.errors.clear()
    await _refused(peer, f"$JS.API.STREAM.MSG.DELETE.{subjects.code_stream(NS)}", b'{"seq":1}')
