"""Revoking a token cuts the NATS access of everything that used it, within two heartbeats;
a queue created after a daemon connected is granted to it without a restart, and only
the connections that lack it are cut."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator

import msgspec
import nats
import nats.errors
import pytest
from nats.aio.client import Client as NatsClient
from polling import eventually

from lakeshore.bus.subjects import daemon_inbox, producer_inbox
from lakeshore.cli import daemon_run
from lakeshore.daemon import DaemonSettings, Running, refusal, run_daemon
from lakeshore.errors import Unauthorized
from lakeshore.model import DaemonAccess
from lakeshore.security.grants import DAEMON_USER, PRODUCER_USER, inbox_tag

from . import running

# nats-py leaves a socket unclosed when the server refuses a reconnect (a revoked client
# retries a few times here), which pytest reports when the socket is collected.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

WAIT_S = 15.0
NS = "default"
#: The bound spec/security.md states: two heartbeats (the daemons' default is 1 s).
BOUND_S = 2.0
#: How long a daemon that stopped is watched for a reconnect it must not try (two of its
#: reconnect waits).
REFUSED_S = 1.0


async def _join(api, token: str) -> DaemonAccess:
    status, body = await api.request(
        "POST", f"/v1/namespaces/{NS}/daemons/join", json={}, token=token
    )
    assert status == 200, body
    return msgspec.convert(body, DaemonAccess)


async def test_a_revoked_tokens_connections_are_cut_and_refused_within_the_bound(
    control_plane, api
) -> None:
    created = (await api.post(f"/v1/namespaces/{NS}/tokens", {"description": "gpu box"}))[1]
    token, token_id = created["token"], created["id"]
    access = await _join(api, token)

    # A running daemon with that token, and a producer connection with it.
    stop = asyncio.Event()
    ready: asyncio.Future[Running] = asyncio.get_running_loop().create_future()
    settings = DaemonSettings(access=access, name="doomed", heartbeat_s=1.0)
    task = asyncio.create_task(run_daemon(settings, stop, environ={}, on_ready=ready.set_result))
    await asyncio.wait_for(ready, WAIT_S)
    cut: dict[str, float] = {}

    def watch(who: str):
        async def disconnected() -> None:
            cut.setdefault(who, time.monotonic())

        return disconnected

    nonce = secrets.token_urlsafe(16)
    producer = await nats.connect(
        control_plane.plane.nats_url,
        user=f"{PRODUCER_USER}/{nonce}",
        password=token,
        inbox_prefix=producer_inbox(inbox_tag(token), nonce),
        disconnected_cb=watch("producer"),
        max_reconnect_attempts=3,
        reconnect_time_wait=0.1,
    )
    daemon_like = await nats.connect(
        control_plane.plane.nats_url,
        user=DAEMON_USER,
        password=access.credential,
        inbox_prefix=daemon_inbox(NS, access.worker_id),
        disconnected_cb=watch("daemon"),
        max_reconnect_attempts=3,
        reconnect_time_wait=0.1,
    )
    try:
        revoked_at = time.monotonic()
        status, _ = await api.delete(f"/v1/namespaces/{NS}/tokens/{token_id}")
        assert status in (200, 204)
        await eventually(
            lambda: len(cut), until=lambda n: n == 2, timeout_s=WAIT_S, what="both cut off"
        )
        for who, at in cut.items():
            assert at - revoked_at <= BOUND_S, f"{who} cut after {at - revoked_at:.2f} s"
        # Their reconnects are refused: they end closed, never connected again.
        await eventually(
            lambda: producer.is_closed and daemon_like.is_closed,
            until=bool,
            timeout_s=WAIT_S,
            what="reconnects refused",
        )
        # And a new connection with the revoked credential or token is refused at once.
        for options in (
            {"user": DAEMON_USER, "password": access.credential},
            {"user": f"{PRODUCER_USER}/{nonce}", "password": token},
        ):
            nc = NatsClient()
            try:
                with pytest.raises(nats.errors.Error, match="Authorization Violation"):
                    await nc.connect(control_plane.plane.nats_url, allow_reconnect=False, **options)
            finally:
                await nc.close()
        # The daemon's own connection is gone too: no connection acts for the token.
        sessions = control_plane.plane.parts.sessions
        assert await sessions.kick(lambda name: name[3] == token_id) == 0
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), WAIT_S)
        for nc in (producer, daemon_like):
            if not nc.is_closed:
                await nc.close()


async def test_a_queue_created_after_a_daemon_connected_is_served_by_it(control_plane, api) -> None:
    access = await _join(api, control_plane.admin_secret)
    settings = DaemonSettings(access=access, name="early", queues=["later"], heartbeat_s=0.2)
    async with running.daemon(settings):
        # The queue exists only now: its stream was not in the daemon's grant.
        assert (await api.post(f"/v1/namespaces/{NS}/queues", {"name": "later"}))[0] == 201
        job = await running.submit(api, "later", {"command": ["true"]})
        await running.reaches(api, job, "succeeded")
        # Granted anew, it is not cut again: a re-grant cuts only connections that lack a
        # queue (one that connects while its namespace gains queues keeps its settling).
        sessions = control_plane.plane.parts.sessions
        assert await sessions.regrant_now({NS}) == 0


async def test_a_revoked_daemon_stops_with_one_line_and_tries_no_more(
    control_plane, api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    created = (await api.post(f"/v1/namespaces/{NS}/tokens", {"description": "gpu box"}))[1]
    token, token_id = created["token"], created["id"]
    settings = DaemonSettings(
        access=await _join(api, token), name="revoked", heartbeat_s=0.2, request_timeout_s=1.0
    )
    async with _checked(settings, control_plane.api, token) as (task, _):
        assert (await api.delete(f"/v1/namespaces/{NS}/tokens/{token_id}"))[0] == 200
        with pytest.raises(Unauthorized) as info:
            await asyncio.wait_for(asyncio.shield(task), WAIT_S)
        said = info.value.message
        assert said.startswith("token revoked: ") and "this daemon stops" in said, said
        assert "\n" not in said
        # It stopped trying: its connection is closed, so the callout hears no more of it.
        tries = _refusals(caplog)
        assert tries >= refusal.IN_A_ROW
        await asyncio.sleep(REFUSED_S)  # a window for a retry that must not come
        assert _refusals(caplog) == tries


async def test_a_daemon_refused_while_its_control_plane_is_away_waits_for_it(
    nats_server_factory, plane_factory, caplog: pytest.LogCaptureFixture
) -> None:
    """NATS says "Authorization Violation" too when no control plane answers its auth
    callout: a daemon whose token is live keeps reconnecting until one does."""
    caplog.set_level(logging.INFO)
    server = await nats_server_factory()
    first = await plane_factory(nats_url=server.url)
    async with first.client() as api:
        token = (await api.post(f"/v1/namespaces/{NS}/tokens", {"description": "box"}))[1]
        access = await _join(api, token["token"])
    settings = DaemonSettings(access=access, name="patient", heartbeat_s=0.2, request_timeout_s=1.0)
    async with _checked(settings, first.api, token["token"]) as (task, stop):
        # No callout and no API; then NATS restarts and the daemon reconnects to it.
        await first.stop()
        await server.stop()
        server = await nats_server_factory(store_dir=server.store_dir, port=server.port)
        await eventually(
            lambda: _violations(caplog),
            until=lambda n: n > refusal.IN_A_ROW,
            timeout_s=WAIT_S * 2,
            what="the daemon refused more often than it needs to look closer",
        )
        assert not task.done()
        await plane_factory(data_dir=first.data_dir, nats_url=server.url)
        await eventually(
            lambda: [r for r in caplog.records if r.getMessage() == "heartbeat answered again"],
            timeout_s=WAIT_S * 2,
            what="the daemon back on NATS",
        )
        stop.set()
        assert await asyncio.wait_for(task, WAIT_S) == 0


@contextlib.asynccontextmanager
async def _checked(
    settings: DaemonSettings, api_url: str, token: str
) -> AsyncIterator[tuple[asyncio.Task[int], asyncio.Event]]:
    """An in-process daemon that checks its token with the API when NATS refuses it (as
    ``lakeshore daemon run`` does), once registered; stopped (within a bound) on exit."""
    stop = asyncio.Event()
    ready: asyncio.Future[Running] = asyncio.get_running_loop().create_future()
    live = daemon_run.token_check(api_url, token, NS)
    task = asyncio.create_task(
        run_daemon(settings, stop, environ={}, on_ready=ready.set_result, token_live=live)
    )
    try:
        await asyncio.wait_for(ready, WAIT_S)
        yield task, stop
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), WAIT_S)


def _refusals(caplog: pytest.LogCaptureFixture) -> int:
    """How often the control plane's callout refused a daemon."""
    return sum(r.getMessage().startswith("nats: refused a daemon ") for r in caplog.records)


def _violations(caplog: pytest.LogCaptureFixture) -> int:
    """How often a daemon's connection heard "Authorization Violation"."""
    return sum(
        r.name == "lakeshore.bus.connection" and "authorization violation" in r.getMessage().lower()
        for r in caplog.records
    )
