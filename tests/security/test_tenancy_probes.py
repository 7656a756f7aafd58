"""The tenancy probes, generated: what one org can make the control plane do to another.

Generated from the gateway's routes (:data:`lakeshore.gateway.ROUTES`), the subjects module
(every ``*_subject`` function of :mod:`lakeshore.bus.subjects`, filled in with the victim's
names) and the grants (:mod:`lakeshore.security.grants`: every subject a tenant may
publish), so a new route, subject or grant is probed without a new test — and a parameter
these tables cannot fill in fails the test until it is taught here.

- Steered replies: every request the plane answers, sent by the other org (as it may send
  it) with its reply set to each subject of the victim the plane could publish on: nothing
  arrives there, every one is dropped and counted, and nothing of the victim changes.
- Rollup and purge: a tenant's publish with ``Nats-Rollup`` or a KV purge on every subject
  it may publish to is refused, and the victim's results, events and logs stay.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec
import nats.errors
from natsauth import plane_nats
from polling import eventually

from lakeshore.bus import codec, subjects
from lakeshore.gateway import DAEMON, ROUTES
from lakeshore.model import (
    FastResult,
    FastSubmit,
    Heartbeat,
    HeldAsk,
    WorkerRegister,
    WorkerStatus,
    now,
)
from lakeshore.security import grants

from . import running
from .world import NS, RIVAL_NS, RIVAL_ORG, WAIT_S, Client, World

OWN_QUEUE = "own"


def _victim_values(world: World) -> dict[str, Any]:
    """What each parameter of a subject function is, for the victim."""
    return {
        "namespace": NS,
        "queue": "busy",
        "worker_id": world.a.worker.id,
        "publisher": world.a.worker.id,
        "invocation_id": world.busy_job,
        "epoch": 1,
        "attempt": 1,
        "level": 0,
        "org": NS,  # the victim's org is named as its namespace: default
    }


def victim_subjects(world: World) -> dict[str, str]:
    """Every subject of the victim the control plane could publish on, by its function."""
    values = _victim_values(world)
    found: dict[str, str] = {}
    for name, fn in inspect.getmembers(subjects, inspect.isfunction):
        if not name.endswith("_subject") or fn.__module__ != subjects.__name__:
            continue
        args = {}
        for param in inspect.signature(fn).parameters.values():
            if param.name in values:
                args[param.name] = values[param.name]
            else:
                assert param.default is not inspect.Parameter.empty, (
                    f"subjects.{name}: teach the tenancy probes its parameter {param.name!r}"
                )
        found[name] = fn(**args)
    stream = subjects.queue_stream(NS, "busy")
    found |= {
        # The JetStream API, where a body that parsed would purge or delete the victim's.
        "stream purge": f"$JS.API.STREAM.PURGE.{stream}",
        "stream delete": f"$JS.API.STREAM.DELETE.{stream}",
        "consumer delete": f"$JS.API.CONSUMER.DELETE.{stream}.p0",
        "message delete": f"$JS.API.STREAM.MSG.DELETE.{stream}",
        "results purge": f"$JS.API.STREAM.PURGE.{subjects.RESULTS_STREAM}",
        "logs purge": f"$JS.API.STREAM.PURGE.{subjects.LOGS_STREAM}",
        "logs message delete": f"$JS.API.STREAM.MSG.DELETE.{subjects.LOGS_STREAM}",
        "code purge": f"$JS.API.STREAM.PURGE.{subjects.code_stream(NS)}",
        "code delete": f"$JS.API.STREAM.DELETE.{subjects.code_stream(NS)}",
        "code chunk": f"$O.{subjects.code_bucket(NS)}.C.forged",
        # Where a draining or archived queue's stream is bound instead of its subjects.
        "closed queue": subjects.closed_subjects(NS, "busy").replace("*", "p0"),
        # The rows' log.
        "state epoch": subjects.STATE_EPOCH_SUBJECT,
        "state row": f"{subjects.STATE_PREFIX}.token.forged",
    }
    return found


def _bodies(world: World, rival_worker: str, rival_job: str) -> dict[str, tuple[str, Any]]:
    """For each gateway route: the subject and body the other org may send it with."""
    return {
        "register": (
            subjects.register_subject(RIVAL_NS, rival_worker),
            WorkerRegister(namespace=RIVAL_NS, name="steerer", id=rival_worker),
        ),
        "heartbeat": (
            subjects.heartbeat_subject(RIVAL_NS, rival_worker),
            Heartbeat(
                worker_id=rival_worker, namespace=RIVAL_NS, status=WorkerStatus.IDLE, ts=now()
            ),
        ),
        "held": (
            subjects.held_subject(RIVAL_NS, rival_worker),
            HeldAsk(namespace=RIVAL_NS, invocation_id=rival_job, epoch=2),
        ),
        "submit": (
            subjects.submit_subject(RIVAL_NS, OWN_QUEUE),
            FastSubmit(token=world.rival_token, invocations=[{"command": ["true"]}]),
        ),
        "result": (
            subjects.result_wait_subject(RIVAL_NS, rival_job),
            FastResult(token=world.rival_token, wait_s=0),
        ),
    }


async def _dropped(world: World) -> dict[str, float]:
    """``lakeshore_gateway_replies_dropped_total`` by route, from ``GET /metrics``."""
    headers = {"Authorization": f"Bearer {world.api.token}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(world.api.base + "/metrics", headers=headers) as r:
            assert r.status == 200, await r.text()
            text = await r.text()
    found = {}
    for m in re.finditer(r'lakeshore_gateway_replies_dropped_total\{route="(\w+)"\} (\S+)', text):
        found[m.group(1)] = float(m.group(2))
    return found


async def _rival(world: World) -> tuple[Client, str, Client, str]:
    """The other org's daemon connection and its worker id, its producer connection, and a
    pending job of its own."""
    status, body = await world.api.request(
        "POST", f"/v1/namespaces/{RIVAL_NS}/queues", json={"name": OWN_QUEUE},
        token=world.rival_token,
    )  # fmt: skip
    assert status == 201, body
    job = await running.submit(world.api, OWN_QUEUE, {"command": ["true"]}, namespace=RIVAL_NS)
    access = await world.join(world.rival_token, RIVAL_NS)
    daemon = await world.as_daemon(access, "rival daemon")
    producer = await world.as_producer(world.rival_token, "rival producer")
    return daemon, access.worker_id, producer, job


async def test_no_answer_is_steered_onto_another_orgs_subjects(world: World) -> None:
    daemon, worker, producer, rival_job = await _rival(world)
    bodies = _bodies(world, worker, rival_job)
    assert set(bodies) == {r.name for r in ROUTES}, "teach the probes the gateway's new route"
    targets = victim_subjects(world)

    spy = await plane_nats(world.url)
    heard: list[str] = []

    async def hear(msg: Any) -> None:
        # An answer is published with no reply of its own; the victim daemon's own requests
        # on these subjects (its heartbeats, every 0.2 s) carry its inbox.
        if not msg.reply:
            heard.append(msg.subject)

    try:
        for subject in set(targets.values()):
            await spy.subscribe(subject, cb=hear)
        await spy.flush()
        before = await world.snapshot()
        dropped_before = await _dropped(world)

        for route in ROUTES:
            sender = daemon if route.asker == DAEMON else producer
            subject, body = bodies[route.name]
            for target in targets.values():
                await sender.nc.publish(subject, codec.encode(body), reply=target)
        await asyncio.gather(daemon.nc.flush(), producer.nc.flush())

        want = {r.name: dropped_before.get(r.name, 0) + len(targets) for r in ROUTES}
        await eventually(
            lambda: _dropped(world), until=lambda d: d == want, timeout_s=WAIT_S,
            what="every steered request dropped and counted",
        )  # fmt: skip
        await spy.flush()
        assert heard == []
        assert await world.snapshot() == before
    finally:
        await spy.close()

    # The same requests, with their replies on the asker's own inbox, are answered.
    for route in ROUTES:
        sender = daemon if route.asker == DAEMON else producer
        subject, body = bodies[route.name]
        reply = await sender.nc.request(subject, codec.encode(body), timeout=WAIT_S)
        assert reply.data, route.name


def _instances(pattern: str) -> list[str]:
    """Concrete subjects a grant's pattern allows (its wildcards filled in)."""
    return [pattern.replace(".*", ".x").replace(".>", ".x.1")]


def _publishable(world: World, access_ns: str, worker: str) -> list[str]:
    """Every subject a tenant's daemon and producer may publish to, outside the JetStream
    API (whose requests carry no stream's headers)."""
    daemon = grants.daemon(access_ns, worker, [OWN_QUEUE], RIVAL_ORG)
    producer = grants.producer([access_ns], "unused")
    return [
        subject
        for pattern in (*daemon.publish, *producer.publish)
        if not pattern.startswith(("$JS.API.", "$JS.ACK."))
        for subject in _instances(pattern)
    ]


ROLLUPS: dict[str, Callable[[], dict[str, str]]] = {
    "rollup all": lambda: {"Nats-Rollup": "all"},
    "rollup subject": lambda: {"Nats-Rollup": "sub"},
    "kv purge": lambda: {"KV-Operation": "PURGE", "Nats-Rollup": "sub"},
}


async def test_no_tenant_publish_can_roll_up_or_purge_what_others_wrote(world: World) -> None:
    daemon, worker, producer, _ = await _rival(world)
    before = await world.snapshot()
    outcomes: dict[tuple[str, str, str], str] = {}
    for subject in _publishable(world, RIVAL_NS, worker):
        for kind, headers in ROLLUPS.items():
            for client in (daemon, producer):
                try:
                    ack = await client.nc.request(
                        subject, msgspec.json.encode({"x": 1}), timeout=0.5, headers=headers()
                    )
                except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                    outcomes[(client.who, subject, kind)] = "no answer"
                    continue
                answer = msgspec.json.decode(ack.data) if ack.data[:1] == b"{" else {}
                stored = "seq" in answer and "error" not in answer
                assert not stored, f"{client.who} rolled up {subject} with {kind}: {answer}"
                error = answer.get("error", {})
                outcomes[(client.who, subject, kind)] = error.get("description", "?")
    # The shared streams refused the rollups (not only the permissions).
    events = subjects.event_subject(RIVAL_NS, "x", worker)
    results = subjects.result_put_subject(RIVAL_NS).replace(".>", ".x.1")
    logs = subjects.log_put_subject(RIVAL_NS).replace(".>", ".x.1")
    for subject in (events, results, logs):
        outcome = outcomes[("rival daemon", subject, "rollup all")]
        assert outcome == "rollup not permitted", outcomes
    assert await world.snapshot() == before
