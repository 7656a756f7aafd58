"""The SDK and CLI given several control planes: they follow the leader a standby names,
move on past standbys and unreachable URLs, and send a request again only when it cannot
have been applied. The control planes are real aiohttp servers on port 0 answering the
API's wire format (a standby: ``503 not_leader`` rendered by the API's own middleware)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace

import msgspec
import natsauth
import pytest
from aiohttp import web
from clirunner import cli_for
from nats.aio.client import Client as NatsClient
from polling import eventually

from lakeshore import errors
from lakeshore.bus.denials import Denials
from lakeshore.bus.producer import ProducerBus
from lakeshore.bus.subjects import submit_subject
from lakeshore.config import load_client_settings
from lakeshore.http.errors import render
from lakeshore.model import InvocationSubmit
from lakeshore.sdk import Client
from lakeshore.sdk.invocation import wait_result

Q = "/v1/namespaces/default/queues"
BACKUP = b"a backup's bytes"
NOOP = InvocationSubmit(command=["true"])
#: Bound on a whole request that follows the leader in these tests (seconds).
FAILOVER_S = 1.5


class Plane:
    """One control plane: the leader, or a standby that names ``leader_url`` (or none)."""

    def __init__(self) -> None:
        self.url = ""
        self.leading = False
        self.leader_url: str | None = None
        #: the method and path of every request it received
        self.seen: list[tuple[str, str]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.path))
        if not self.leading:
            return render(errors.NotLeader("this control plane is a standby", self.leader_url))
        if request.path == "/v1/drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if request.path == "/v1/backup":
            return web.Response(body=BACKUP, headers={"X-Lakeshore-Backup": "1"})
        if request.method == "POST":
            return web.json_response(await request.json(), status=201)
        return web.json_response({"queues": []})


Start = Callable[..., Awaitable[Plane]]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """``await start(leading=True)``: a control plane serving on a free port."""
    runners: list[web.AppRunner] = []

    async def started(*, leading: bool = False, leader: Plane | None = None) -> Plane:
        plane = Plane()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", plane.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        plane.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        plane.leading, plane.leader_url = leading, leader.url if leader else None
        return plane

    yield started
    for runner in runners:
        await runner.cleanup()


def _dead_url() -> str:
    """The URL of a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def test_a_comma_separated_api_follows_the_leader_a_standby_names(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    leader = await start(leading=True)
    standby = await start(leader=leader)
    caplog.set_level(logging.INFO, logger="lakeshore.sdk.transport")
    async with Client(f"{standby.url} , {leader.url}/", None) as client:
        assert client.apis == (standby.url, leader.url)
        assert await client.request("GET", Q) == {"queues": []}
        assert client.api == leader.url
        await client.request("GET", Q)
    assert standby.seen == [("GET", Q)]
    assert leader.seen == [("GET", Q)] * 2
    switches = [r.getMessage() for r in caplog.records if r.name == "lakeshore.sdk.transport"]
    assert len(switches) == 1 and switches[0].endswith(f"asking {leader.url}")


async def test_a_leader_not_among_the_given_urls_is_followed(start: Start) -> None:
    leader = await start(leading=True)
    standby = await start(leader=leader)
    async with Client(standby.url, None) as client:
        assert await client.request("GET", Q) == {"queues": []}
        assert (client.api, client.apis) == (leader.url, (standby.url,))


async def test_a_list_of_urls_is_tried_in_turn_when_no_standby_knows_the_leader(
    start: Start,
) -> None:
    first, second = await start(), await start()
    leader = await start(leading=True)
    async with Client([first.url, second.url, leader.url], None) as client:
        assert await client.request("GET", Q) == {"queues": []}
        assert client.api == leader.url
    assert (first.seen, second.seen, leader.seen) == ([("GET", Q)],) * 3


async def test_a_dead_url_is_skipped_when_several_are_given(start: Start) -> None:
    leader = await start(leading=True)
    dead = _dead_url()
    async with Client(f"{dead},{leader.url}", None) as client:
        assert await client.request("GET", Q) == {"queues": []}
        assert client.api == leader.url


async def test_a_single_dead_url_fails_at_once_naming_it_and_the_fix() -> None:
    dead = _dead_url()
    async with Client(dead, None) as client:
        with pytest.raises(errors.Unavailable) as caught:
            await client.request("GET", Q)
    message = caught.value.message
    assert message.startswith(f"cannot reach the lakeshore api at {dead} (connection refused)")
    assert "lakeshore server" in message


class Restarting:
    """One control plane on a fixed port that can be stopped and started again there."""

    def __init__(self, handle: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> None:
        self.url = _dead_url()
        self._port = int(self.url.rsplit(":", 1)[1])
        self._handle = handle
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self._port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@pytest.fixture
async def restarting() -> AsyncIterator[Callable[..., Restarting]]:
    made: list[Restarting] = []

    def make(handle: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Restarting:
        made.append(Restarting(handle))
        return made[-1]

    yield make
    for plane in made:
        await plane.stop()


async def test_a_single_url_that_answered_is_asked_again_while_it_restarts(
    restarting: Callable[..., Restarting], caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append(request.method)
        return web.json_response(await request.json(), status=201)

    plane = restarting(handle)
    await plane.start()
    caplog.set_level(logging.WARNING, logger="lakeshore.sdk.transport")
    async with Client(plane.url, None) as client:
        assert await client.request("POST", Q, json={"n": 1}) == {"n": 1}
        await plane.stop()
        posting = asyncio.ensure_future(client.request("POST", Q, json={"n": 2}))
        await eventually(
            lambda: [r for r in caplog.records if "refuses connections" in r.getMessage()],
            timeout_s=10, what="the refusal said",
        )  # fmt: skip
        assert not posting.done()
        await plane.start()
        async with asyncio.timeout(10):
            assert await posting == {"n": 2}
    assert seen == ["POST", "POST"]  # sent once to the restarted plane: never applied twice


async def test_a_single_url_that_answered_gives_up_after_failover_s(
    restarting: Callable[..., Restarting],
) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.json_response({"queues": []})

    plane = restarting(handle)
    await plane.start()
    async with Client(plane.url, None, failover_s=FAILOVER_S) as client:
        await client.request("GET", Q)
        await plane.stop()
        with pytest.raises(errors.Unavailable) as caught:
            await client.request("GET", Q)
    assert f"within {FAILOVER_S:g}s: {plane.url} (connection refused)" in caught.value.message


async def test_a_result_wait_rides_out_a_plane_that_died_holding_it(
    restarting: Callable[..., Restarting],
) -> None:
    asked: list[str] = []
    died: list[asyncio.Future[None]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        asked.append(request.path)
        if len(asked) == 1:  # the plane dies holding the wait: the connection is cut
            assert request.transport is not None
            request.transport.close()
            died.append(asyncio.ensure_future(plane.stop()))
            return web.Response()
        return web.json_response({"id": "inv-1", "ok": True, "value": 42})

    plane = restarting(handle)
    await plane.start()
    async with Client(plane.url, None) as client:
        waiting = asyncio.ensure_future(wait_result(client, "inv-1", timeout_s=30))
        await eventually(lambda: died, timeout_s=10, what="the plane dead holding the wait")
        await died[0]
        assert not waiting.done()
        await plane.start()
        async with asyncio.timeout(10):
            result = await waiting
    assert (result.ok, result.value) == (True, 42)
    assert len(asked) == 2, asked


async def test_dead_urls_give_up_after_failover_s_naming_each_and_why() -> None:
    dead = [_dead_url(), _dead_url()]
    async with Client(dead, None, failover_s=FAILOVER_S) as client:
        with pytest.raises(errors.Unavailable) as caught:
            await client.request("GET", Q)
    assert not isinstance(caught.value, errors.NotLeader)
    for url in dead:
        assert f"{url} (connection refused)" in caught.value.message


async def test_standbys_without_a_leader_give_up_after_failover_s(start: Start) -> None:
    standbys = [await start(), await start()]
    async with Client([s.url for s in standbys], None, failover_s=FAILOVER_S) as client:
        with pytest.raises(errors.NotLeader) as caught:
            await client.request("GET", Q)
    assert caught.value.leader_url is None
    assert f"within {FAILOVER_S:g}s" in caught.value.message
    for standby in standbys:
        assert f"{standby.url} (not the leader)" in caught.value.message


async def test_a_post_a_standby_refused_is_sent_once_to_the_leader(start: Start) -> None:
    leader = await start(leading=True)
    standby = await start(leader=leader)
    async with Client([standby.url, leader.url], None) as client:
        assert await client.request("POST", Q, json={"name": "q"}) == {"name": "q"}
    assert standby.seen == [("POST", Q)]
    assert leader.seen == [("POST", Q)]


async def test_a_post_whose_connection_dropped_is_not_sent_again(start: Start) -> None:
    first, second = await start(leading=True), await start(leading=True)
    async with Client([first.url, second.url], None) as client:
        with pytest.raises(errors.Unavailable) as caught:
            await client.request("POST", "/v1/drop", json={})
    assert not isinstance(caught.value, errors.NotLeader)
    assert first.seen == [("POST", "/v1/drop")]
    assert second.seen == []


async def test_a_download_follows_the_leader(start: Start, tmp_path: Path) -> None:
    leader = await start(leading=True)
    standby = await start(leader=leader)
    dest = tmp_path / "backup.tar"
    async with Client(standby.url, None) as client:
        headers = await client.download("/v1/backup", dest, method="POST")
    assert dest.read_bytes() == BACKUP and headers["X-Lakeshore-Backup"] == "1"
    assert standby.seen == leader.seen == [("POST", "/v1/backup")]


@pytest.mark.parametrize("api", ["http://a:1,,http://b:2", "http://a:1, ", "", []])
def test_an_empty_url_is_invalid(api: str | list[str]) -> None:
    with pytest.raises(errors.Invalid, match="an empty URL"):
        Client(api, None)


async def test_the_cli_follows_the_leader_among_urls_given_by_flag_or_environment(
    start: Start, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE", "LAKESHORE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    leader = await start(leading=True)
    standby = await start(leader=leader)
    apis = f"{_dead_url()},{standby.url}"
    cli = cli_for(SimpleNamespace(api=apis, admin_token="t"))
    by_env = await cli("queues", "ls", "-o", "json")
    by_flag = await cli("--api", f"{standby.url},{_dead_url()}", "queues", "ls", "-o", "json")
    assert (
        msgspec.json.decode(by_env.stdout) == msgspec.json.decode(by_flag.stdout) == {"queues": []}
    )
    assert len(standby.seen) == len(leader.seen) == 2


def test_the_client_config_file_may_list_the_urls(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('api = ["http://a:1", "http://b:2/"]\n')
    settings = load_client_settings({}, env={"LAKESHORE_CONFIG": str(path)}, cwd=tmp_path)
    assert settings.api == "http://a:1,http://b:2"
    assert Client(settings.api, None).apis == ("http://a:1", "http://b:2")


async def test_a_standby_is_asked_again_until_a_leader_is_elected(start: Start) -> None:
    standby = await start()
    async with Client(standby.url, None) as client:
        asking = asyncio.ensure_future(client.request("GET", Q))
        await eventually(lambda: len(standby.seen) >= 2, timeout_s=10, what="a second ask")
        standby.leading = True
        async with asyncio.timeout(10):
            assert await asking == {"queues": []}


@pytest.fixture
async def gatewayless(nats_server_factory) -> AsyncIterator[NatsClient]:
    """A connection to a NATS no gateway listens on, as during a takeover."""
    server = await nats_server_factory()
    nc = await natsauth.plane_nats(server.url)
    yield nc
    await nc.close()


async def test_a_fast_submit_no_gateway_answers_goes_over_http(
    control_plane, api, gatewayless: NatsClient
) -> None:
    await api.post(Q, {"name": "fast"})
    async with Client(control_plane.api, control_plane.admin_token) as client:
        client.fast._bus = ProducerBus(gatewayless, Denials())
        answer = await client.fast.submit("fast", [NOOP], wait_s=None, namespace=None)

        async def listed() -> list[str]:
            return [job.id for job in await client.jobs_ls()]

        # Jobs are listed once the Recorder has read the submit's event: a moment later.
        await eventually(listed, until=lambda ids: ids == answer.ids, timeout_s=10,
                         what="the submitted job listed")  # fmt: skip


async def test_a_fast_submit_that_timed_out_is_not_sent_again_over_http(
    control_plane, api, gatewayless: NatsClient
) -> None:
    await api.post(Q, {"name": "fast"})
    await gatewayless.subscribe(submit_subject("default", "fast"))  # hears, never answers
    async with Client(control_plane.api, control_plane.admin_token, timeout_s=0.5) as client:
        client.fast._bus = ProducerBus(gatewayless, Denials())
        with pytest.raises(errors.Unavailable, match="no answer"):
            await client.fast.submit("fast", [NOOP], wait_s=None, namespace=None)
        assert await client.jobs_ls() == []
