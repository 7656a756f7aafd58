"""Runs' live logs end to end: a real daemon publishes, the control plane serves them.

Waits are on conditions (a line read, a job's state), each bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from daemon_support import HERE, WAIT_S, J, command, wait_gone, wait_pid

from lakeshore.bus.memory import InMemoryBus
from lakeshore.daemon import DaemonSettings
from lakeshore.daemon.runlog import RunLogs
from lakeshore.model import Invocation, now

PRINT_EVERY = (
    "import sys, time\n"
    "for i in range({n}):\n"
    "    print(f'line {{i}}', flush=True)\n"
    "    time.sleep({every})\n"
)


async def log_lines(api: Any, job: str, **params: Any) -> list[dict[str, Any]]:
    """The whole NDJSON answer of the logs route, one dict per line."""
    query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()}
    headers = {"Authorization": f"Bearer {api.token}"}
    async with aiohttp.ClientSession() as http, asyncio.timeout(WAIT_S * 2):
        async with http.get(f"{api.base}{J}/{job}/logs", params=query, headers=headers) as r:
            assert r.status == 200, await r.text()
            assert r.headers["Content-Type"].startswith("application/x-ndjson")
            return [msgspec.json.decode(line) async for line in r.content if line.strip()]


def text_of(lines: list[dict[str, Any]], stream: str | None = None) -> str:
    return "".join(
        x["text"] for x in lines if x["kind"] == "chunk" and stream in (None, x["stream"])
    )


async def test_a_commands_output_is_in_its_log_in_order_with_an_end_line(bench, daemons):
    q = await bench.queue("logs-basic")
    await daemons.start("solo", queues=[q])
    script = "import sys; print('to out'); print('to err', file=sys.stderr)"
    [job] = await bench.submit(q, command(sys.executable, "-c", script))
    await bench.job_state(job, "succeeded")
    lines = await log_lines(bench.api, job, follow=True)
    assert lines[-1] == {"kind": "end", "state": "succeeded", "attempt": 1}
    chunks = [x for x in lines if x["kind"] == "chunk"]
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert text_of(lines, "out") == "to out\n" and text_of(lines, "err") == "to err\n"


async def stream_until(api: Any, job: str, chunks: int, **params: Any) -> list[dict[str, Any]]:
    """Read a follow's first ``chunks`` chunk lines, then drop the connection."""
    query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()}
    headers = {"Authorization": f"Bearer {api.token}"}
    got: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http, asyncio.timeout(WAIT_S):
        async with http.get(f"{api.base}{J}/{job}/logs", params=query, headers=headers) as r:
            assert r.status == 200, await r.text()
            async for line in r.content:
                got.append(msgspec.json.decode(line))
                if sum(x["kind"] == "chunk" for x in got) >= chunks:
                    return got
    raise AssertionError(f"the answer ended after {got}")


async def test_a_follow_resumed_after_a_seq_has_no_gap_and_no_repeat(bench, daemons):
    q = await bench.queue("logs-resume")
    await daemons.start("solo", queues=[q])
    script = PRINT_EVERY.format(n=8, every=0.25)
    [job] = await bench.submit(q, command(sys.executable, "-c", script))
    first = await stream_until(bench.api, job, 2, follow=True)
    last_seq = [x for x in first if x["kind"] == "chunk"][-1]["seq"]
    rest = await log_lines(bench.api, job, follow=True, attempt=1, after=last_seq)
    whole = await log_lines(bench.api, job)
    assert rest[-1]["state"] == "succeeded"
    seqs = [x["seq"] for x in first + rest if x["kind"] == "chunk"]
    assert seqs == list(range(1, len(seqs) + 1))
    assert (
        text_of(first) + text_of(rest) == text_of(whole) == "".join(f"line {i}\n" for i in range(8))
    )
    # A trickle goes out in several chunks, each soon after it was written.
    assert len(seqs) >= 4


async def test_a_follow_goes_on_into_the_retry_and_ends_with_the_job(bench, daemons):
    q = await bench.queue("logs-retry")
    await daemons.start("solo", queues=[q])
    script = 'echo "try $LAKESHORE_ATTEMPT"; [ "$LAKESHORE_ATTEMPT" -ge 2 ]'
    [job] = await bench.submit(q, command("sh", "-c", script, max_attempts=2))
    lines = await log_lines(bench.api, job, follow=True, attempt=1)
    kinds = [(x["kind"], x.get("attempt"), x.get("text")) for x in lines]
    assert kinds == [
        ("chunk", 1, "try 1\n"),
        ("attempt", 2, None),
        ("chunk", 2, "try 2\n"),
        ("end", 2, None),
    ]
    assert lines[-1]["state"] == "succeeded"
    # Each attempt's log is kept on its own.
    assert text_of(await log_lines(bench.api, job, attempt=1)) == "try 1\n"
    assert text_of(await log_lines(bench.api, job)) == "try 2\n"  # the latest


async def test_what_a_cancelled_or_timed_out_command_printed_is_kept(bench, daemons):
    q = await bench.queue("logs-stopped")
    await daemons.start("solo", queues=[q], concurrency=2)
    script = "echo started; echo oops >&2; exec sleep 60"
    [cancelled, timed_out] = await bench.submit(
        q, command("sh", "-c", script, stop_grace_s=1), command("sh", "-c", script, timeout_s=1)
    )
    await stream_until(bench.api, cancelled, 2, follow=True)
    status, body = await bench.api.post(f"{J}/{cancelled}/cancel")
    assert status == 202, body
    for job, state in ((cancelled, "cancelled"), (timed_out, "failed")):
        lines = await log_lines(bench.api, job, follow=True)
        assert lines[-1]["state"] == state
        assert (text_of(lines, "out"), text_of(lines, "err")) == ("started\n", "oops\n")
        only_err = await log_lines(bench.api, job, stream="err")
        assert {x["stream"] for x in only_err if x["kind"] == "chunk"} == {"err"}


async def test_tail_keeps_the_last_lines(bench, daemons):
    q = await bench.queue("logs-tail")
    await daemons.start("solo", queues=[q])
    script = "for i in 1 2 3 4 5; do echo line $i; done; printf 'partial'"
    [job] = await bench.submit(q, command("sh", "-c", script))
    await bench.job_state(job, "succeeded")
    assert text_of(await log_lines(bench.api, job, tail=2)) == "line 5\npartial"
    assert text_of(await log_lines(bench.api, job, tail=0)) == ""
    assert text_of(await log_lines(bench.api, job, tail=100)).startswith("line 1\n")


FLOOD_MIB = 60
#: 60 MiB on stdout as fast as a pipe takes it, in lines of 64 KiB.
FLOOD = (
    "import sys\n"
    "line = b'x' * 65535 + b'\\n'\n"
    f"for _ in range({FLOOD_MIB} * 16):\n"
    "    sys.stdout.buffer.write(line)\n"
)
CAP = 1024 * 1024


def peak_rss(pid: int) -> int:
    """The process's peak resident set so far (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


@contextlib.asynccontextmanager
async def daemon_process(settings: DaemonSettings) -> AsyncIterator[asyncio.subprocess.Process]:
    """``log_daemon.py`` with ``settings``: a daemon in a process of its own."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "log_daemon.py"),
        stdin=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(msgspec.json.encode(settings))
    proc.stdin.close()
    try:
        async with asyncio.timeout(WAIT_S):
            while (line := await proc.stderr.readline()) != b"ready\n":
                assert line, "the daemon exited before it was ready"
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
        async with asyncio.timeout(WAIT_S):
            await proc.communicate()


async def test_daemon_run_takes_its_log_cap_from_its_command_line(bench, processes):
    # What a control plane passes to the daemons it starts (its log_max_bytes), and what a
    # daemon started by hand is told.
    q = await bench.queue("logs-capped-cli")
    await processes.start("capped", "--queue", q, "--log-max-bytes", "1000")
    [job] = await bench.submit(
        q, command("sh", "-c", "for i in $(seq 1 100); do echo 0123456789abcdefghi; done")
    )
    lines = await log_lines(bench.api, job, follow=True)
    assert lines[-1]["state"] == "succeeded"
    assert len(text_of(lines, "out")) == 1000
    [note] = [x["text"] for x in lines if x["kind"] == "chunk" and x["stream"] == "err"]
    assert "1,000 bytes dropped" in note and "log_max_bytes" in note


async def test_a_flood_is_capped_the_daemon_stays_small_and_a_neighbours_log_is_whole(
    bench, daemons
):
    q = await bench.queue("logs-flood")
    settings = await daemons.settings("flooded", queues=[q], concurrency=2, log_max_bytes=CAP)
    async with daemon_process(settings) as proc:
        before = peak_rss(proc.pid)
        neighbour = "for i in $(seq 1 200); do echo n$i; done"
        [flood, quiet] = await bench.submit(
            q, command(sys.executable, "-c", FLOOD), command("sh", "-c", neighbour)
        )
        flooded = await log_lines(bench.api, flood, follow=True)
        calm = await log_lines(bench.api, quiet, follow=True)
        grown = peak_rss(proc.pid) - before
        print(f"daemon peak RSS {before:,} -> +{grown:,} bytes over a {FLOOD_MIB} MiB flood")
    assert flooded[-1]["state"] == calm[-1]["state"] == "succeeded"
    assert text_of(flooded, "out") == ("x" * 65535 + "\n") * (CAP // 65536)
    [note] = [x["text"] for x in flooded if x["kind"] == "chunk" and x["stream"] == "err"]
    dropped = FLOOD_MIB * 1024 * 1024 - CAP
    assert f"{dropped:,} bytes dropped" in note and "log_max_bytes" in note
    assert text_of(calm) == "".join(f"n{i}\n" for i in range(1, 201))
    # 60 MiB went through the daemon: it holds far less than that at any time.
    assert grown < 24 * 1024 * 1024, f"the daemon's peak RSS grew by {grown:,} bytes"


async def test_a_functions_print_and_logging_reach_its_log(bench, daemons):
    q = await bench.queue("logs-fn")
    await daemons.start("solo", queues=[q])
    [job] = await bench.submit(q, {"fn": "log_jobs:chatter", "args": ["bob"], "kwargs": {}})
    lines = await log_lines(bench.api, job, follow=True)
    assert lines[-1]["state"] == "succeeded"
    assert text_of(lines, "out") == "hello bob\n"
    assert text_of(lines, "err").startswith("to stderr\n")
    assert "logged for bob" in text_of(lines, "err")


async def test_a_function_leaving_a_printing_process_ends_and_the_next_run_prints_alone(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("logs-fn-left")
    await daemons.start("solo", queues=[q], concurrency=1)
    pid_path = tmp_path / "printer.pid"
    spec = {"fn": "daemon_jobs:leaves_a_printer", "args": [str(pid_path)], "kwargs": {}}
    [left] = await bench.submit(q, spec)
    lines = await log_lines(bench.api, left, follow=True)
    assert lines[-1]["state"] == "succeeded"
    assert text_of(lines, "out").startswith("started ")
    await wait_gone(await wait_pid(pid_path))  # found by its mark and killed
    # It held the worker's stdout: the next run's output is its own all the same.
    [after] = await bench.submit(q, {"fn": "daemon_jobs:prints", "args": ["mine"], "kwargs": {}})
    lines = await log_lines(bench.api, after, follow=True)
    assert lines[-1]["state"] == "succeeded"
    assert text_of(lines) == "mine\n"


def _inv(invocation_id: str) -> Invocation:
    return Invocation(
        id=invocation_id, namespace="default", queue="q", command=["x"], submitted_at=now()
    )


class _Cut(InMemoryBus):
    """The in-memory twin of the daemon's bus, cut off until :meth:`reconnect`."""

    def __init__(self) -> None:
        super().__init__()
        self.up = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self.up.is_set()


async def test_a_run_cut_from_nats_keeps_a_bounded_buffer_drops_its_middle_and_says_so():
    bus = _Cut()
    logs = RunLogs(bus, "default", buffer_bytes=8 * 1024, flush_s=0.01)
    run_log = logs.open(_inv("job-1"), 1)
    for i in range(40):  # 40 KiB while NATS is away, against a bound of 8 KiB
        run_log.write("out", f"{i:04d}".encode() * 256)
    assert run_log.unpublished <= 8 * 1024
    run_log.end()
    bus.up.set()
    await logs.close(WAIT_S)
    [(subject, published)] = bus.logs.items()
    assert subject == "ls.default.log.job-1.1"
    seqs = [int(h["Ls-Log-Seq"]) for h, _ in published]
    assert seqs == list(range(1, len(seqs) + 1))
    assert published[-1][0]["Ls-Log-End"] == "1"
    text = b"".join(body for _, body in published).decode()
    head, note, tail = text.partition("\n[lakeshore: … ")
    # The oldest half of the bound, the note with what was dropped, the newest output.
    assert head == "".join(f"{i:04d}" * 256 for i in range(4))
    assert tail.startswith(f"{32 * 1024:,} bytes dropped")
    assert tail.endswith("".join(f"{i:04d}" * 256 for i in range(36, 40)))
    assert run_log.shed == 32 * 1024


async def test_a_chunk_never_splits_a_character():
    bus = _Cut()
    bus.up.set()
    logs = RunLogs(bus, "default", flush_s=0.01)
    run_log = logs.open(_inv("job-2"), 1)
    data = "é€😀".encode() * 3
    for i in range(len(data)):  # one byte at a time, each published on its own
        run_log.write("out", data[i : i + 1])
        await asyncio.sleep(0.02)
    run_log.end()
    await logs.close(WAIT_S)
    [published] = bus.logs.values()
    bodies = [body for h, body in published if "Ls-Log-End" not in h]
    assert len(bodies) > 1 and "".join(b.decode() for b in bodies) == "é€😀" * 3


async def test_a_silent_run_publishes_nothing_and_each_log_has_its_own_message_ids():
    bus = _Cut()
    bus.up.set()
    logs = RunLogs(bus, "default", flush_s=0.01)
    silent = logs.open(_inv("job-3"), 1)
    loud = [logs.open(_inv(f"job-{i}"), 1) for i in (4, 5)]
    silent.end()
    for run_log in loud:
        run_log.write("out", b"hello\n")
        run_log.end()
    await logs.close(WAIT_S)
    assert sorted(bus.logs) == ["ls.default.log.job-4.1", "ls.default.log.job-5.1"]
    # Each log's chunks are numbered from 1: only the log's own nonce tells them apart
    # (the server would drop a chunk whose message id another log used as a duplicate).
    ids = [h["Nats-Msg-Id"] for published in bus.logs.values() for h, _ in published]
    assert len(ids) == 4 and len(set(ids)) == 4
