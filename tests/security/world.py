"""The world the tenancy probes run in: a control plane with two orgs, a running daemon of
the victim org (``default``) with a running, a succeeded and a pending job, and the
connections the probers make (another org's daemon and producer, a peer daemon)."""

from __future__ import annotations

import contextlib
import secrets
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
from natsauth import plane_nats

from lakeshore.bus import subjects
from lakeshore.bus.subjects import daemon_inbox, producer_inbox
from lakeshore.code import pack
from lakeshore.daemon import DaemonSettings, Running
from lakeshore.model import DaemonAccess
from lakeshore.security.grants import DAEMON_USER, PRODUCER_USER, inbox_tag

from . import running

WAIT_S = 15.0
#: How long a refused request is given to be answered anyway (it never is).
REFUSED_S = 0.3
NS, RIVAL_NS, RIVAL_ORG = "default", "rival", "rivalorg"
Q = f"/v1/namespaces/{NS}/queues"
SECRET = "AKIA-s3cr3t-value-never-shown"


@dataclass
class Client:
    """One probing connection and the errors NATS sent it."""

    who: str
    nc: Any
    errors: list[str] = field(default_factory=list)

    def refused(self) -> bool:
        return any("permissions violation" in e.lower() for e in self.errors)


@dataclass
class World:
    plane: Any
    api: Any
    url: str
    a: Running  # the daemon whose job runs
    busy_job: str  # claimed by a, running, SECRET in its live log
    done_job: str  # succeeded, its result and its log stored
    pending_job: str  # in queue "secret", with SECRET in its env
    rival_token: str
    peer_token: str
    #: a code snapshot of the victim's org, stored in its bucket
    code_digest: str = ""
    clients: list[Client] = field(default_factory=list)

    async def join(self, token: str, namespace: str) -> DaemonAccess:
        status, body = await self.api.request(
            "POST", f"/v1/namespaces/{namespace}/daemons/join", json={}, token=token
        )
        assert status == 200, body
        return msgspec.convert(body, DaemonAccess)

    async def as_daemon(self, access: DaemonAccess, who: str) -> Client:
        return await self._connect(
            who,
            user=DAEMON_USER,
            password=access.credential,
            inbox_prefix=daemon_inbox(access.namespace, access.worker_id),
        )

    async def as_producer(self, token: str, who: str) -> Client:
        nonce = secrets.token_urlsafe(16)
        return await self._connect(
            who,
            user=f"{PRODUCER_USER}/{nonce}",
            password=token,
            inbox_prefix=producer_inbox(inbox_tag(token), nonce),
        )

    async def _connect(self, who: str, **options: Any) -> Client:
        client = Client(who, None)

        async def on_error(e: Exception) -> None:
            client.errors.append(str(e))

        client.nc = await nats.connect(
            self.url, allow_reconnect=False, error_cb=on_error, **options
        )
        self.clients.append(client)
        return client

    async def snapshot(self) -> dict[str, Any]:
        """Everything a probe must not change."""
        # The API's reads first: a job listing waits for the plane's events to be published.
        workers = (await self.api.get(f"/v1/namespaces/{NS}/workers"))[1]["workers"]
        jobs = (await self.api.get(f"/v1/namespaces/{NS}/jobs?limit=100"))[1]["jobs"]
        nc = await plane_nats(self.url)
        try:
            js = nc.jetstream()
            streams = {}
            for q in ("secret", "busy"):
                info = await js.stream_info(subjects.queue_stream(NS, q))
                streams[q] = (info.state.messages, info.state.last_seq)
            results = (await js.stream_info(subjects.RESULTS_STREAM)).state.messages
            # The victim's own, in the streams every org writes to.
            victim_results = await _messages(js, subjects.RESULTS_STREAM, f"$KV.*.{NS}.>")
            victim_events = await _messages(js, subjects.EVENTS_STREAM, f"ls.{NS}.evt.>")
            victim_logs = await _messages(js, subjects.LOGS_STREAM, subjects.log_put_subject(NS))
            victim_code = await _messages(js, subjects.code_stream(NS), "$O.>")
            reserve = (await js.stream_info(subjects.RESERVE_STREAM)).state
        finally:
            await nc.close()
        return {
            "streams": streams,
            "results": results,
            "victim results": victim_results,
            "victim events": victim_events,
            "victim logs": victim_logs,
            "victim code": victim_code,
            "the plane's reserve": (reserve.messages, reserve.last_seq),
            # a live daemon moves between idle and busy by itself; retired, stopped or lost
            # is what a probe could have caused
            "workers": sorted(
                (w["id"], w["name"], w["status"] in ("idle", "busy")) for w in workers
            ),
            "jobs": sorted((j["id"], j["state"], j.get("worker")) for j in jobs),
        }


async def make_world(control_plane, api) -> AsyncIterator[World]:
    plane = control_plane.plane
    for ns, org in ((RIVAL_NS, RIVAL_ORG),):
        status, body = await api.post("/v1/namespaces", {"name": ns, "org": org})
        assert status == 201, body
    rival_token = (await api.post(f"/v1/namespaces/{RIVAL_NS}/tokens", {}))[1]["token"]
    peer_token = (await api.post(f"/v1/namespaces/{NS}/tokens", {}))[1]["token"]
    for q in ("secret", "busy"):
        assert (await api.post(Q, {"name": q}))[0] == 201

    status, body = await api.post(f"/v1/namespaces/{NS}/daemons/join", {})
    assert status == 200, body
    access = msgspec.convert(body, DaemonAccess)
    settings = DaemonSettings(
        access=access,
        name="probed",
        queues=["busy"],
        concurrency=2,
        heartbeat_s=0.2,
        drain_timeout_s=0.5,
    )
    async with running.daemon(settings) as a:
        done_job = await running.submit(
            api, "busy", {"command": [sys.executable, "-c", "print('done')"]}
        )
        await running.reaches(api, done_job, "succeeded")
        # It prints a secret of its own into its live log before it sleeps.
        busy = {"command": ["sh", "-c", f"echo {SECRET}; exec sleep 60"]}
        busy_job = await running.submit(api, "busy", busy)
        await running.reaches(api, busy_job, "running")
        await running.logged(plane.nats_url, busy_job, SECRET)
        pending_job = await running.submit(
            api, "secret", {"command": ["true"], "env": {"AWS_SECRET_ACCESS_KEY": SECRET}}
        )
        w = World(
            plane, api, plane.nats_url, a, busy_job, done_job, pending_job, rival_token,
            peer_token, code_digest=await _victim_code(api),
        )  # fmt: skip
        try:
            yield w
        finally:
            for client in w.clients:
                with contextlib.suppress(Exception):
                    await client.nc.close()


async def _victim_code(api: Any) -> str:
    """Store a code snapshot in the victim's org (with a secret in a file); its digest."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tasks.py").write_text(f"KEY = {SECRET!r}\n")
        snap = pack(tmp)
    path = f"/v1/namespaces/{NS}/code/{snap.digest}"
    status, body = await api.request("PUT", path, data=snap.data)
    assert status == 201, body
    return snap.digest


async def _messages(js: Any, stream: str, subject: str) -> int:
    """How many messages of ``stream`` are on ``subject`` (a wildcard)."""
    info = await js.stream_info(stream, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())
