"""Control-plane fixtures: a real ControlPlane on a real port, against the session NATS."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import natsauth
import pytest
import pytest_asyncio
from natsauth import plane_nats

from lakeshore.actors.workers import Beat, Register
from lakeshore.bus import subjects
from lakeshore.config import ServerSettings
from lakeshore.model import Heartbeat, Invocation, Worker, WorkerRegister, WorkerStatus, now
from lakeshore.plane import ControlPlane

_DEFAULT = object()


async def stored_invocations(js: Any, namespace: str, queue: str) -> list[Invocation]:
    """The invocations a queue's stream holds now, in their order (none: ``[]``)."""
    stream = subjects.queue_stream(namespace, queue)
    info = await js.stream_info(stream)
    if not info.state.messages:
        return []
    return [
        msgspec.json.decode((await js.get_msg(stream, seq)).data, type=Invocation)
        for seq in range(info.state.first_seq, info.state.last_seq + 1)
    ]


class Api:
    """Raw HTTP for tests: every call answers ``(status, decoded JSON body)``."""

    def __init__(self, base: str, token: str | None) -> None:
        self.base, self.token = base, token
        self._session = aiohttp.ClientSession()

    async def close(self) -> None:
        await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        data: bytes | None = None,
        token: Any = _DEFAULT,
    ) -> tuple[int, Any]:
        token = self.token if token is _DEFAULT else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if json is not None:
            data = msgspec.json.encode(json)
        if data is not None:
            headers["Content-Type"] = "application/json"
        body = io.BytesIO(data) if data is not None else None
        async with self._session.request(method, self.base + path, data=body, headers=headers) as r:
            raw = await r.read()
            if r.content_type == "application/vnd.apache.parquet":  # a file: its bytes
                return r.status, raw
            return r.status, (msgspec.json.decode(raw) if raw else None)

    async def get(self, path: str) -> tuple[int, Any]:
        return await self.request("GET", path)

    async def post(self, path: str, json: Any = None) -> tuple[int, Any]:
        return await self.request("POST", path, json=json)

    async def patch(self, path: str, json: Any) -> tuple[int, Any]:
        return await self.request("PATCH", path, json=json)

    async def delete(self, path: str) -> tuple[int, Any]:
        return await self.request("DELETE", path)


class PlaneHandle:
    """A started control plane serving HTTP on a free port."""

    def __init__(self, plane: ControlPlane, admin_secret: str) -> None:
        self.plane = plane
        self.api = plane.api
        self.admin_token = admin_secret
        self.admin_secret = admin_secret
        self.data_dir = plane.data_dir
        self._stopped = False

    @contextlib.asynccontextmanager
    async def client(self, token: str | None = None) -> AsyncIterator[Api]:
        api = Api(self.api, token or self.admin_secret)
        try:
            yield api
        finally:
            await api.close()

    async def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            await self.plane.stop()


@pytest_asyncio.fixture
async def plane_factory(nats_server, tmp_path: Path):
    """Start control planes on the session NATS; all are stopped, and every queue stream
    deleted, at teardown. ``await plane_factory(data_dir=...)`` restarts on a data dir."""
    started: list[PlaneHandle] = []
    counter = itertools.count()
    secrets: dict[Path, str] = {}

    async def start(data_dir: Path | None = None, **overrides: Any) -> PlaneHandle:
        data_dir = data_dir or tmp_path / f"plane-{next(counter)}"
        settings = ServerSettings(
            data_dir=data_dir,
            host="127.0.0.1",
            port=0,
            **{"nats_url": nats_server.url, "nats_auth_file": natsauth.secrets_file(), **overrides},
        )
        plane = ControlPlane(settings)
        await plane.start()
        await plane.serve()
        if plane.admin_token is not None:
            secrets[data_dir] = plane.admin_token.token
        handle = PlaneHandle(plane, secrets[data_dir])
        started.append(handle)
        return handle

    try:
        yield start
    finally:
        for handle in started:
            await handle.stop()
        await delete_lakeshore_streams(nats_server.url)


async def delete_lakeshore_streams(url: str) -> None:
    nc = await plane_nats(url)
    try:
        js = nc.jetstream()
        for name in await js.streams_info():
            # The queues, the events and the rows (LS_STATE), the leader lease and the code
            # buckets: the next test's control plane starts on a clean slate, and leads at once.
            if name.config.name.startswith(("LS_", "KV_LS_LEASE", "OBJ_LS_CODE_")):
                await js.delete_stream(name.config.name)
    finally:
        await nc.close()


@pytest_asyncio.fixture
async def control_plane(plane_factory) -> PlaneHandle:
    """One control plane: ``.api`` (base URL), ``.admin_token`` (secret), ``.plane``."""
    return await plane_factory()


@pytest_asyncio.fixture
async def api(control_plane: PlaneHandle) -> AsyncIterator[Api]:
    """Raw HTTP to the control plane with the admin token."""
    async with control_plane.client() as client:
        yield client


@pytest_asyncio.fixture
async def plane(control_plane: PlaneHandle) -> ControlPlane:
    return control_plane.plane


@pytest_asyncio.fixture
async def admin_token_id(control_plane: PlaneHandle) -> str:
    assert control_plane.plane.admin_token is not None
    return control_plane.plane.admin_token.id


@pytest_asyncio.fixture
async def js(nats_server):
    """A JetStream context on the session NATS, for looking behind the control plane."""
    nc = await plane_nats(nats_server.url)
    try:
        yield nc.jetstream()
    finally:
        await nc.close()


@pytest_asyncio.fixture
async def register(control_plane: PlaneHandle):
    """Register a worker row as a daemon would: ``await register(name, queues=[...])``."""
    plane = control_plane.plane

    async def make(
        name: str,
        queues: list[str] | None = None,
        namespace: str = "default",
        status: WorkerStatus | None = None,
    ) -> Worker:
        reg = WorkerRegister(namespace=namespace, name=name, queues=queues or [])
        worker: Worker = await plane.parts.workers.ask(Register(reg))
        if status is not None:
            beat = Heartbeat(worker_id=worker.id, namespace=namespace, status=status, ts=now())
            await plane.parts.workers.ask(Beat(beat))
            worker = msgspec.structs.replace(worker, status=status)
        return worker

    return make


@contextlib.asynccontextmanager
async def daemon_process(
    handle: PlaneHandle, queue: str, name: str, pythonpath: Path, log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``lakeshore daemon run --api --token`` on ``queue`` as a subprocess that can import
    from ``pythonpath``; it must stop on SIGTERM within 30 s (else the test fails)."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    argv = [
        "-m",
        "lakeshore",
        "daemon",
        "run",
        "--api",
        handle.api,
        "--token",
        handle.admin_secret,
        "--queue",
        queue,
        "--name",
        name,
    ]
    with open(log, "wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, env=env, stdout=out, stderr=out
        )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            pytest.fail(f"the daemon did not stop on SIGTERM:\n{log.read_text()}")
