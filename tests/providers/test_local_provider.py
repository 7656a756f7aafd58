"""LocalProvider against real subprocesses (a stand-in daemon that reports its flags)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from lakeshore.model import DaemonAccess, Provider, ProviderKind, Worker, now
from lakeshore.providers import LocalProvider, daemon_argv
from lakeshore.providers.local import CA_ENV, CREDENTIAL_ENV, daemon_flags

FAKE = Path(__file__).with_name("fake_daemon.py")
WAIT_S = 20.0
NATS = "nats://127.0.0.1:4222"
CA = "-----BEGIN CERTIFICATE-----\nnot a real one\n-----END CERTIFICATE-----\n"


@dataclass
class Exit:
    worker: Worker
    code: int | None
    reason: str
    requested: bool


@dataclass
class Report:
    """What a stand-in daemon sends once it runs: its flags and its NATS environment."""

    argv: list[str]
    env: dict[str, str]


@dataclass
class Bench:
    """A readiness server the stand-in daemons report to, and the exits reported."""

    port: int
    ready: asyncio.Queue[Report] = field(default_factory=asyncio.Queue)
    exits: asyncio.Queue[Exit] = field(default_factory=asyncio.Queue)

    def command(self, mode: str) -> list[str]:
        return [sys.executable, str(FAKE), str(self.port), mode]

    def on_exit(self, worker: Worker, code: int | None, reason: str, requested: bool) -> None:
        self.exits.put_nowait(Exit(worker, code, reason, requested))

    async def next_ready(self) -> Report:
        async with asyncio.timeout(WAIT_S):
            return await self.ready.get()

    async def next_exit(self) -> Exit:
        async with asyncio.timeout(WAIT_S):
            return await self.exits.get()


@pytest.fixture
async def bench() -> AsyncIterator[Bench]:
    ready: asyncio.Queue[Report] = asyncio.Queue()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ready.put_nowait(Report(**json.loads(await reader.readline())))
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    try:
        yield Bench(server.sockets[0].getsockname()[1], ready)
    finally:
        server.close()
        await server.wait_closed()


#: The provider row of every launch here (the built-in ``local``).
LOCAL = Provider(name="local", namespace="ns", kind=ProviderKind.LOCAL, created_at=now())


def worker(name: str, queues: list[str] | None = None, **labels: str) -> Worker:
    return Worker(
        id=f"w-{name}",
        name=name,
        namespace="bob",
        queues=queues or [],
        labels=labels,
        provider="local",
        started_at=now(),
    )


def access(worker: Worker, ca_pem: str | None = None) -> DaemonAccess:
    return DaemonAccess(
        worker_id=worker.id,
        namespace=worker.namespace,
        nats_url=NATS,
        credential=f"secret-of-{worker.id}",
        expires_at=now() + timedelta(hours=1),
        ca_pem=ca_pem,
    )


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_one_process_per_worker_with_its_flags_and_its_own_log(bench, tmp_path):
    provider = LocalProvider(tmp_path, bench.on_exit, command=bench.command("drain"))
    rows = [worker("prep-00", ["cpu-prep", "eval"], gpu="a100"), worker("prep-01")]
    await provider.launch(LOCAL, rows, access)
    got = sorted([(await bench.next_ready()).argv, (await bench.next_ready()).argv])
    assert got == sorted(daemon_argv([], w, NATS, orphan_after_s=60) for w in rows)
    assert got[0] == [
        "--id", "w-prep-00", "--name", "prep-00", "--namespace", "bob",
        "--queue", "cpu-prep", "--queue", "eval", "--label", "gpu=a100",
        "--nats-url", NATS, "--provider", "local", "--orphan-after-s", "60",
    ]  # fmt: skip
    assert "--queue" not in got[1]  # the default queue is no --queue at all
    log = (tmp_path / "bob" / "prep-00.log").read_text()
    assert log.startswith("--- ") and "launched: " in log and "--name prep-00" in log
    pids = [provider.pid(w.id) for w in rows]
    await provider.close()
    exits = [await bench.next_exit(), await bench.next_exit()]
    assert {(e.worker.name, e.code, e.requested) for e in exits} == {
        ("prep-00", 0, True),
        ("prep-01", 0, True),
    }
    assert all(pid is not None and gone(pid) for pid in pids)


async def test_each_daemon_is_given_the_planes_flags(bench, tmp_path):
    flags = daemon_flags(heartbeat_s=0.5, log_max_bytes=4096)
    assert flags == ["--heartbeat-s", "0.5", "--log-max-bytes", "4096"]
    provider = LocalProvider(tmp_path, bench.on_exit, command=bench.command("drain"), flags=flags)
    await provider.launch(LOCAL, [worker("flagged")], access)
    argv = (await bench.next_ready()).argv
    assert argv[argv.index("--provider") + 2 :] == [*flags, "--orphan-after-s", "60"]
    await provider.close()
    await bench.next_exit()


async def test_each_daemon_gets_its_credential_in_its_environment_not_its_command_line(
    bench, tmp_path, monkeypatch
):
    # A CA the control plane itself was given must not reach a daemon whose NATS has none.
    monkeypatch.setenv(CA_ENV, "the control plane's own")
    provider = LocalProvider(tmp_path, bench.on_exit, command=bench.command("drain"))
    rows = [worker("tls-00"), worker("plain-00")]
    await provider.launch(LOCAL, rows, lambda w: access(w, CA if w.name == "tls-00" else None))
    reports = [await bench.next_ready(), await bench.next_ready()]
    by_id = {r.argv[r.argv.index("--id") + 1]: r for r in reports}
    assert by_id["w-tls-00"].env == {CREDENTIAL_ENV: "secret-of-w-tls-00", CA_ENV: CA}
    assert by_id["w-plain-00"].env == {CREDENTIAL_ENV: "secret-of-w-plain-00"}
    for report in reports:
        assert not any("secret-of-" in arg for arg in report.argv)
    for w in rows:
        assert "secret-of-" not in provider.log_path(w).read_text()
    await provider.close()


async def test_a_daemon_that_exits_on_its_own_is_reported_with_code_and_output(bench, tmp_path):
    provider = LocalProvider(tmp_path, bench.on_exit, command=bench.command("crash"))
    await provider.launch(LOCAL, [worker("doomed")], access)
    exit_ = await bench.next_exit()
    assert (exit_.worker.name, exit_.code, exit_.requested) == ("doomed", 3, False)
    assert "exited with code 3" in exit_.reason
    assert "boom: cannot reach nats" in exit_.reason
    assert provider.pid("w-doomed") is None
    await provider.close()


async def test_stop_sends_sigterm_then_sigkill_after_the_bound(bench, tmp_path):
    provider = LocalProvider(
        tmp_path, bench.on_exit, command=bench.command("deaf"), stop_timeout_s=0.2
    )
    await provider.launch(LOCAL, [worker("stubborn")], access)
    await bench.next_ready()
    assert await provider.stop(worker("stubborn"), LOCAL) is True
    assert await provider.stop(worker("nobody"), LOCAL) is False
    exit_ = await bench.next_exit()
    assert (exit_.code, exit_.requested) == (-signal.SIGKILL, True)
    assert exit_.reason == "killed by SIGKILL"
    await provider.close()


async def test_close_kills_what_sigterm_did_not_end_within_the_bound(bench, tmp_path):
    provider = LocalProvider(
        tmp_path, bench.on_exit, command=bench.command("deaf"), close_timeout_s=0.2
    )
    await provider.launch(LOCAL, [worker("a"), worker("b")], access)
    await bench.next_ready()
    await bench.next_ready()
    pids = [provider.pid("w-a"), provider.pid("w-b")]
    async with asyncio.timeout(5):
        await provider.close()
    assert all(pid is not None and gone(pid) for pid in pids)
    codes = {(await bench.next_exit()).code, (await bench.next_exit()).code}
    assert codes == {-signal.SIGKILL}


async def test_a_command_that_cannot_start_is_reported_not_raised(bench, tmp_path):
    provider = LocalProvider(tmp_path, bench.on_exit, command=[str(tmp_path / "no-such-binary")])
    await provider.launch(LOCAL, [worker("ghost")], access)
    exit_ = bench.exits.get_nowait()
    assert (exit_.worker.name, exit_.code, exit_.requested) == ("ghost", None, False)
    assert exit_.reason.startswith("could not start:")
    await provider.close()
