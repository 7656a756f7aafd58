"""Hostile connections at the API's door: slow headers are cut at their deadline, a stalled
body is answered 408, a client that hangs up mid-body is one log line; none a traceback."""

from __future__ import annotations

import asyncio
import io
import logging
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web
from polling import eventually

from lakeshore.config import load_server_settings
from lakeshore.errors import Invalid
from lakeshore.http.deadlines import GuardedRunner, ReadTimeouts
from lakeshore.http.errors import error_middleware

DEADLINE_S = 0.5
#: How long past its deadline a connection may still be open (a loaded CI machine).
SLACK_S = 5.0
SUBMIT = "/v1/namespaces/default/queues/default/invocations"


@pytest.fixture
async def door(plane_factory):
    return await plane_factory(http_header_timeout_s=DEADLINE_S, http_body_timeout_s=DEADLINE_S)


async def _connect(handle) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = urlsplit(handle.api)
    return await asyncio.open_connection(url.hostname, url.port)


def _head(handle, method: str, path: str, **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: lakeshore"]
    lines += [f"Authorization: Bearer {handle.admin_token}"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _until_closed(reader: asyncio.StreamReader) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and how long that took (seconds)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(DEADLINE_S + SLACK_S):
        data = await reader.read()
    return data, loop.time() - started


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


async def test_half_a_header_line_is_closed_at_the_header_deadline(door, caplog):
    reader, writer = await _connect(door)
    try:
        writer.write(b"GET /v1/healthz HTT")
        await writer.drain()
        data, took_s = await _until_closed(reader)
    finally:
        writer.close()
    assert data == b""
    assert took_s >= DEADLINE_S * 0.8
    assert not _tracebacks(caplog)


async def test_headers_that_keep_trickling_in_are_cut_at_the_deadline(door):
    reader, writer = await _connect(door)
    loop = asyncio.get_running_loop()
    started = loop.time()
    closed = False
    try:
        writer.write(b"GET /v1/healthz HTTP/1.1\r\n")
        async with asyncio.timeout(DEADLINE_S + SLACK_S):
            while not closed:  # a slowloris: one more header line every 50 ms, forever
                writer.write(b"X-Pad: 1\r\n")
                await writer.drain()
                try:
                    async with asyncio.timeout(0.05):
                        closed = await reader.read(1) == b""
                except TimeoutError:
                    pass
    except ConnectionError:
        closed = True  # the server closed as this wrote
    finally:
        writer.close()
    assert closed
    assert loop.time() - started >= DEADLINE_S * 0.8


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes
) -> bytes:
    """Send one request on a kept-alive connection; its answer's status line."""
    writer.write(head)
    await writer.drain()
    async with asyncio.timeout(SLACK_S):
        answer = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in answer.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
    return answer.split(b"\r\n", 1)[0]


async def test_a_kept_alive_connection_idle_past_the_deadline_is_still_served(door):
    kept_reader, kept = await _connect(door)
    try:
        healthz = _head(door, "GET", "/v1/healthz")
        assert await _exchange(kept_reader, kept, healthz) == b"HTTP/1.1 200 OK"
        # A second connection that never finishes its headers: once it is cut, the kept-alive
        # one has been idle longer than the deadline too.
        reader, writer = await _connect(door)
        try:
            writer.write(b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\n")
            await writer.drain()
            assert (await _until_closed(reader))[0] == b""
        finally:
            writer.close()
        assert await _exchange(kept_reader, kept, healthz) == b"HTTP/1.1 200 OK"
    finally:
        kept.close()


async def test_a_stalled_body_is_answered_408_and_closed(door, caplog):
    caplog.set_level(logging.INFO, logger="lakeshore.http")
    reader, writer = await _connect(door)
    try:
        writer.write(_head(door, "POST", SUBMIT, Content_Length="100") + b'{"invocations":')
        await writer.drain()
        data, took_s = await _until_closed(reader)
    finally:
        writer.close()
    assert data.startswith(b"HTTP/1.1 408"), data
    assert b'"request_timeout"' in data
    assert took_s >= DEADLINE_S * 0.8
    assert not _tracebacks(caplog)
    assert [r.levelno for r in caplog.records if "answered 408" in r.getMessage()] == [logging.INFO]


async def test_a_client_that_hangs_up_mid_body_is_one_line_without_a_traceback(
    control_plane, caplog
):
    caplog.set_level(logging.DEBUG)
    clients = 5
    for _ in range(clients):
        reader, writer = await _connect(control_plane)
        writer.write(_head(control_plane, "POST", SUBMIT, Content_Length="100000") + b'{"inv')
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    def http_lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name.startswith(("lakeshore.http", "aiohttp"))]

    lines = await eventually(
        http_lines,
        until=lambda lines: len(lines) >= clients,
        timeout_s=10.0,
        what=f"{clients} log lines of the server's HTTP side",
    )
    async with control_plane.client() as api:
        assert (await api.get("/v1/healthz"))[0] == 200  # and nothing more was logged
    lines = http_lines()
    assert len(lines) == clients, [r.getMessage() for r in lines]
    assert all(r.levelno <= logging.INFO and r.exc_info is None for r in lines)
    assert all(SUBMIT in r.getMessage() for r in lines)
    assert not _tracebacks(caplog)


def test_the_read_deadlines_are_server_settings_in_seconds(tmp_path):
    assert load_server_settings({"data_dir": str(tmp_path)}, env={}).http_header_timeout_s == 10
    (tmp_path / "server.toml").write_text("http_header_timeout_s = 2.5\n")
    settings = load_server_settings({"data_dir": str(tmp_path)}, env={})
    assert (settings.http_header_timeout_s, settings.http_body_timeout_s) == (2.5, 30.0)
    with pytest.raises(Invalid, match="http_body_timeout_s"):
        load_server_settings({"data_dir": str(tmp_path), "http_body_timeout_s": 0}, env={})


async def test_a_body_the_handler_has_not_read_yet_is_not_a_stalled_one():
    gate = asyncio.Event()

    async def late_reader(request: web.Request) -> web.Response:
        await gate.wait()
        return web.Response(text=str(len(await request.read())))

    app = web.Application(middlewares=[error_middleware], client_max_size=8 * 1024 * 1024)
    app.router.add_post("/late", late_reader)
    timeouts = ReadTimeouts(header_s=DEADLINE_S, body_s=DEADLINE_S)
    runner = GuardedRunner(app, timeouts=timeouts, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        body = b"x" * (4 * 1024 * 1024)  # far more than the server buffers before it pauses
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{port}/late"
            post = asyncio.create_task(http.post(url, data=io.BytesIO(body)))
            # Two connections cut at their deadline one after the other: the body has waited
            # twice as long as its own.
            for _ in range(2):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                try:
                    writer.write(b"POST /late HTTP/1.1\r\n")
                    assert (await _until_closed(reader))[0] == b""
                finally:
                    writer.close()
            gate.set()
            async with asyncio.timeout(SLACK_S):
                resp = await post
            assert (resp.status, await resp.text()) == (200, str(len(body)))
    finally:
        await runner.cleanup()
