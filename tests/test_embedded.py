from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats
import natsauth
import pytest

from lakeshore import access
from lakeshore.embedded import (
    KNOWN_USERS,
    MIN_NATS_VERSION,
    TOKEN_PREFIX,
    NatsServer,
    check_version,
    find_nats_server,
    parse_version,
    redact,
    server_version,
)
from lakeshore.errors import Invalid, NatsPortInUse, NatsTooOld, Unavailable

NatsServerFactory = Callable[..., Awaitable[NatsServer]]


def _client_version(nc: nats.NATS) -> tuple[int, int, int]:
    # nats-py 2.16 has no public INFO dict; its ServerVersion has no __str__, so str() is
    # the repr "<nats server v2.14.0>", which the bus hands to parse_version.
    version = parse_version(str(nc.connected_server_version))
    v = nc.connected_server_version
    assert version == (v.major, v.minor, v.patch)
    return version


async def _listening_url(output: asyncio.StreamReader) -> str:
    while line := await output.readline():
        if match := re.search(rb"client connections on \S+:(\d+)", line):
            return f"nats://127.0.0.1:{int(match[1])}"
    raise AssertionError("nats-server exited before it listened")


def _assert_pid_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2.14.0", (2, 14, 0)),
        ("v2.9.10", (2, 9, 10)),
        ("nats-server: v2.14.0\n", (2, 14, 0)),
        ("2.12.0-RC.1", (2, 12, 0)),
        ("<nats server v2.10.26>", (2, 10, 26)),
    ],
)
def test_parse_version_reads_plain_prefixed_and_cli_output(
    text: str, expected: tuple[int, int, int]
) -> None:
    assert parse_version(text) == expected


def test_parse_version_rejects_text_without_a_version() -> None:
    with pytest.raises(Invalid, match="no nats-server version"):
        parse_version("nats-server: unknown")


@pytest.mark.parametrize("version", [MIN_NATS_VERSION, (2, 14, 0), (3, 0, 0)])
def test_check_version_accepts_minimum_and_newer(version: tuple[int, int, int]) -> None:
    check_version(version, where="test")


def test_check_version_refuses_older_with_reason_and_fix() -> None:
    with pytest.raises(NatsTooOld) as info:
        check_version((2, 11, 9), where="/opt/nats-server")
    err = info.value
    assert (err.found, err.where, err.required) == ((2, 11, 9), "/opt/nats-server", (2, 12, 0))
    assert err.code == "nats_too_old"
    for part in ("2.11.9", "/opt/nats-server", ">= 2.12.0", "filter_subjects", "max_msgs"):
        assert part in err.message
    assert "pip install -e ." in err.message


def test_find_nats_server_prefers_the_environments_bin_folder() -> None:
    assert find_nats_server() == Path(sys.executable).parent / "nats-server"


def test_find_nats_server_fails_with_a_fix_when_there_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Unavailable, match=r"pip install -e \."):
        find_nats_server()


def test_installed_server_is_accepted() -> None:
    binary = find_nats_server()
    version = server_version(binary)
    assert version >= MIN_NATS_VERSION
    check_version(version, where=str(binary))


def test_old_binary_is_refused_by_check_version(old_nats_server_binary: Path) -> None:
    version = server_version(old_nats_server_binary)
    assert version < MIN_NATS_VERSION
    with pytest.raises(NatsTooOld) as info:
        check_version(version, where=str(old_nats_server_binary))
    assert info.value.message.startswith(
        f"nats-server {'.'.join(map(str, version))} ({old_nats_server_binary}) is too old"
    )


async def test_old_binary_is_refused_before_it_starts(
    old_nats_server_binary: Path, tmp_path: Path
) -> None:
    config = natsauth.server_config(tmp_path / "nats.conf")
    server = NatsServer(tmp_path, config_file=config, port=0, binary=old_nats_server_binary)
    with pytest.raises(NatsTooOld) as info:
        await server.start()
    assert info.value.found == server_version(old_nats_server_binary)
    with pytest.raises(RuntimeError, match="not started"):
        server.pid  # noqa: B018


async def test_client_side_check_refuses_an_old_server_reached_by_url(
    old_nats_server_binary: Path, tmp_path: Path
) -> None:
    config = natsauth.server_config(tmp_path / "nats.conf")
    proc = await asyncio.create_subprocess_exec(
        old_nats_server_binary,
        *("-c", str(config), "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", str(tmp_path)),
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(15):
            url = await _listening_url(proc.stderr)
        nc = await natsauth.plane_nats(url, allow_reconnect=False)
        try:
            assert _client_version(nc) == server_version(old_nats_server_binary)
            with pytest.raises(NatsTooOld, match=re.escape(url)):
                check_version(_client_version(nc), where=url)
        finally:
            await nc.close()
    finally:
        proc.terminate()
        async with asyncio.timeout(10):
            await proc.communicate()


async def test_session_server_accepts_clients_and_jetstream(nats_server: NatsServer) -> None:
    assert nats_server.url == f"nats://127.0.0.1:{nats_server.port}"
    assert nats_server.version >= MIN_NATS_VERSION
    nc = await natsauth.plane_nats(nats_server.url, allow_reconnect=False)
    try:
        check_version(_client_version(nc), where=nats_server.url)
        js = nc.jetstream(timeout=5)
        name = f"T{uuid.uuid4().hex}"
        await js.add_stream(name=name, subjects=[f"{name}.>"])
        try:
            ack = await js.publish(f"{name}.a", b"hello")
            assert ack.stream == name and ack.seq == 1
            assert (await js.stream_info(name)).state.messages == 1
        finally:
            await js.delete_stream(name)
    finally:
        await nc.close()


async def test_stop_leaves_no_process(tmp_path: Path) -> None:
    config = natsauth.server_config(tmp_path / "nats.conf")
    async with NatsServer(tmp_path, config_file=config, port=0) as server:
        assert server.port > 0
        pid = server.pid
        os.kill(pid, 0)
    _assert_pid_gone(pid)
    await server.stop()


async def test_start_reports_fatal_lines_when_the_server_exits(tmp_path: Path) -> None:
    config = natsauth.server_config(tmp_path / "nats.conf")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = NatsServer(tmp_path, config_file=config, port=taken.getsockname()[1])
        with pytest.raises(Unavailable, match=r"exited with code \d+ before it was ready") as info:
            await server.start()
    assert "[FTL]" in info.value.message
    assert "address already in use" in info.value.message
    _assert_pid_gone(server.pid)


async def test_a_taken_port_says_how_to_pick_another(tmp_path: Path) -> None:
    config = natsauth.server_config(tmp_path / "nats.conf")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = NatsServer(tmp_path, config_file=config, port=port)
        with pytest.raises(NatsPortInUse) as info:
            await server.start()
    err = info.value
    assert isinstance(err, Unavailable) and (err.host, err.port) == ("127.0.0.1", port)
    assert err.code == "nats_port_in_use"
    assert err.message.startswith(
        f"the embedded NATS could not listen on 127.0.0.1:{port} (address in use"
    )
    assert "pass --nats-port 0 for any free port, or --nats-port P" in err.message
    assert "[FTL]" in err.message  # the server's own words follow
    _assert_pid_gone(server.pid)


async def test_restart_on_same_store_and_port_keeps_streams(
    nats_server_factory: NatsServerFactory,
) -> None:
    first = await nats_server_factory()
    nc = await natsauth.plane_nats(first.url, allow_reconnect=False)
    await nc.jetstream().add_stream(name="KEPT", subjects=["kept.>"])
    await nc.close()
    await first.kill()
    _assert_pid_gone(first.pid)

    second = await nats_server_factory(store_dir=first.store_dir, port=first.port)
    assert second.url == first.url
    nc = await natsauth.plane_nats(second.url, allow_reconnect=False)
    try:
        assert (await nc.jetstream().stream_info("KEPT")).config.subjects == ["kept.>"]
    finally:
        await nc.close()


async def test_output_is_drained_after_ready(
    nats_server_factory: NatsServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lakeshore.embedded")
    # -V traces every payload: 4 MB here, more than the pipe (64 KiB) plus what asyncio
    # buffers unread (2 x the 1 MiB line limit), so an undrained server stalls on a write.
    server = await nats_server_factory(extra_args=["-V"])
    nc = await natsauth.plane_nats(server.url, allow_reconnect=False)
    try:
        async with asyncio.timeout(30):
            for _ in range(40):
                await nc.publish("load.x", b"x" * 100_000)
                await nc.flush()
    finally:
        await nc.close()
    traced = [r for r in caplog.records if "[TRC]" in r.getMessage()]
    assert sum(len(r.getMessage()) for r in traced) > 3 * (1 << 20)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
async def test_server_dies_with_its_parent(tmp_path: Path) -> None:
    script = (
        "import asyncio, sys\n"
        "from lakeshore.embedded import NatsServer\n"
        "async def main():\n"
        "    server = NatsServer(sys.argv[1], config_file=sys.argv[2], port=0)\n"
        "    await server.start()\n"
        "    print(server.pid, flush=True)\n"
        "    await asyncio.Event().wait()\n"
        "asyncio.run(main())\n"
    )
    config = natsauth.server_config(tmp_path / "nats.conf")
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(tmp_path), str(config), stdout=asyncio.subprocess.PIPE
    )
    assert parent.stdout is not None
    async with asyncio.timeout(20):
        pid = int(await parent.stdout.readline())
    exited = asyncio.Event()
    pidfd = os.pidfd_open(pid)
    loop = asyncio.get_running_loop()
    loop.add_reader(pidfd, exited.set)
    try:
        parent.kill()
        await parent.wait()
        async with asyncio.timeout(10):
            await exited.wait()
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


def _slow_starter(tmp_path: Path, lines: int, gap_s: float, ready: bool) -> Path:
    """A stand-in nats-server that prints ``lines`` lines ``gap_s`` apart (as one restoring
    many streams does), then, if ``ready``, the lines of a ready server."""
    script = tmp_path / "slow-nats-server"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        "if '--version' in sys.argv:\n"
        "    print('nats-server: v2.12.1'); sys.exit(0)\n"
        f"for i in range({lines}):\n"
        "    print(f'[INF] Restored stream {i}', flush=True)\n"
        f"    time.sleep({gap_s})\n"
        f"if {ready}:\n"
        "    print('[INF] Listening for client connections on 127.0.0.1:4999', flush=True)\n"
        "    print('[INF] Server is ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    script.chmod(0o755)
    return script


async def test_a_server_restoring_a_large_store_is_waited_for_while_it_reports(
    tmp_path: Path,
) -> None:
    binary = _slow_starter(tmp_path, lines=8, gap_s=0.25, ready=True)
    config = natsauth.server_config(tmp_path / "nats.conf")
    server = NatsServer(tmp_path, config_file=config, binary=binary, ready_timeout_s=1.0)
    try:
        await server.start()  # 2 s of output in all, never 1 s without a line
        assert server.port == 4999
    finally:
        await server.stop()


async def test_a_server_silent_for_the_ready_timeout_is_given_up(tmp_path: Path) -> None:
    binary = _slow_starter(tmp_path, lines=1, gap_s=30, ready=True)
    config = natsauth.server_config(tmp_path / "nats.conf")
    server = NatsServer(tmp_path, config_file=config, binary=binary, ready_timeout_s=0.5)
    with pytest.raises(Unavailable, match=r"not ready within 0.5 s of its last output"):
        await server.start()
    _assert_pid_gone(server.pid)


_SECRET = "lsk_Zq3-x_9sEcReT0123456789abcdefABCDEF0123456"


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            f'[ERR] 127.0.0.1:5 - cid:6 - authentication error - User "{_SECRET}"',
            'User "[redacted]"',
        ),
        ('[ERR] 127.0.0.1:5 - cid:6 - authentication error - User "daemon"', 'User "daemon"'),
        (f'authentication error - User "producer/{_SECRET}"', 'User "producer/[redacted]"'),
        (f'authentication error - User "x\\"{_SECRET}\\" y"', 'User "[redacted]"'),
        (f'<<- [CONNECT {{"user":"{_SECRET}","pass":"[REDACTED]"}}]', '"user":"[redacted]"'),
        (f"a token anywhere else: {_SECRET}.", "a token anywhere else: lsk_[redacted]."),
    ],
    ids=["token-as-user", "daemon", "token-as-nonce", "quotes-inside", "trace", "token-alone"],
)
def test_a_servers_line_keeps_no_user_name_but_a_role_and_no_token(line: str, shown: str) -> None:
    redacted = redact(line)
    assert shown in redacted and _SECRET not in redacted and "Zq3" not in redacted


def test_a_line_without_secrets_is_kept_as_it_is() -> None:
    line = "[INF] Listening for client connections on 127.0.0.1:4222"
    assert redact(line) == line


def test_the_redaction_knows_lakeshores_token_prefix_and_user_names() -> None:
    from lakeshore.security.grants import DAEMON_USER, PRODUCER_USER

    assert TOKEN_PREFIX == access.TOKEN_PREFIX
    assert KNOWN_USERS == {DAEMON_USER, PRODUCER_USER}
