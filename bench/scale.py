"""How cost grows with work: the "Scale" rows of spec/bench.md against a real server.

Not a test. Run ``python bench/scale.py [--queues 10000] [--pending 200000]
[--history 1000000] [--rows queues,pending,history]`` (``--quick`` for sizes ten times
smaller). Every row starts its own ``lakeshore server`` (with its embedded nats-server) in
a fresh data dir, then prints ``figure | target | measured | met?``:

* **queues** — create N queues one after the other over HTTP (time per create, RSS of the
  server and of nats-server from ``/proc/<pid>/status``), ``queues ls`` pages of 100
  (p95), ``lakeshore queues ls -o json`` of all (the CLI process, start-up included), then
  a restart on the same data dir: launch → "ready".
* **pending** — N invocations submitted in batches of 10,000 to one queue no daemon pulls
  from (first and last batch's time), then ``jobs ls`` of the queue, ``stats``, and
  ``jobs show`` of the oldest and the newest pending invocation.
* **history** — N finished invocations (submitted, claimed, started, succeeded) are
  *seeded*: written through the store layer (``Store.append_invocation_events``, the real
  schema) into the DuckDB file while the server is stopped, since running them through
  daemons would take too long. Then restart → ready, ``stats`` of that queue and of an
  empty one, ``jobs ls``.

Latencies are of the SDK call (HTTP on loopback), median and p95 of ``--repeat`` calls.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _harness import LAKESHORE, Server, rss_mib, server

from lakeshore.model import InvocationSubmit, QueueCreate
from lakeshore.sdk import Client
from lakeshore.store import open_store

NS = "default"
BATCH = 10_000
PAGE = 100
Row = tuple[str, str, str, str]


def _ms(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 10 else f"{s:.1f} s"


async def _latency_rows(checks, where: str, bound_s: float, repeat: int) -> list[tuple]:
    """One row per ``(figure, call)``: its p50 and p95 against ``bound_s`` (met on p50)."""
    rows = []
    for figure, call in checks:
        p50, p95 = await _timed(call, repeat)
        bound = f"≤ {bound_s * 1000:g} ms"
        rows.append((f"{figure} {where}", bound, f"p50 {_ms(p50)}, p95 {_ms(p95)}",
                     _met(p50 <= bound_s)))  # fmt: skip
    return rows


async def _timed(call: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, float]:
    """Median and p95 (seconds) of ``repeat`` calls, after one warm-up call."""
    await call()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await call()
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.95))]


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def _client(srv: Server) -> Client:
    return Client(srv.api, srv.token, NS, timeout_s=600)


async def _ls_page(client: Client, after: str | None) -> tuple[list[Any], str | None]:
    """One page of the queue list; ``(all, None)`` from a server without pages."""
    params: dict[str, str | int] = {"limit": PAGE}
    if after:
        params["after"] = after
    body = await client.request("GET", f"/v1/namespaces/{NS}/queues", params=params)
    return body["queues"], body.get("next")


async def queues_row(n: int, repeat: int) -> list[Row]:
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ls-scale-") as tmp:
        data = Path(tmp) / "data"
        async with server(data) as srv, _client(srv) as client:
            times = []
            t_all = time.perf_counter()
            for i in range(n):
                t0 = time.perf_counter()
                await client.queue_add(QueueCreate(name=f"q-{i:05}"))
                times.append(time.perf_counter() - t0)
                if (i + 1) % max(1, n // 10) == 0:
                    print(f"  created {i + 1:,} queues, last ms/create {times[-1] * 1000:.1f}")
            total = time.perf_counter() - t_all
            tenth = max(1, n // 10)
            first, last = statistics.median(times[:tenth]), statistics.median(times[-tenth:])
            await asyncio.sleep(1)
            nats_rss, srv_rss = rss_mib(srv.nats_pid()), rss_mib(srv.pid)
            out.append((
                f"create {n:,} queues",
                "≤ 120 s (10k)",
                f"{total:.1f} s; {first * 1000:.1f} → {last * 1000:.1f} ms per create",
                _met(total <= 120 * n / 10_000),
            ))  # fmt: skip
            out.append((
                f"RSS at {n:,} queues",
                "nats ≤ 1024 MiB, server ≤ 500 MiB",
                f"nats {nats_rss:.0f} MiB, server {srv_rss:.0f} MiB",
                _met((nats_rss or 0) <= 1024 and (srv_rss or 0) <= 500),
            ))  # fmt: skip
            # Pages: the first, one in the middle, the last (each cursor from the page before).
            cursors: list[str | None] = [None]
            seen = 0
            while True:
                rows, nxt = await _ls_page(client, cursors[-1])
                seen += len(rows)
                if not nxt:
                    break
                cursors.append(nxt)
            paged = len(cursors) > 1 or seen <= PAGE
            picks = [cursors[0], cursors[len(cursors) // 2], cursors[-1]]
            samples = []
            for c in picks:
                samples += [await _timed(lambda c=c: _ls_page(client, c), repeat)]
            p95 = max(s[1] for s in samples)
            out.append((
                f"`queues ls` page of {PAGE} at {n:,} queues",
                "p95 ≤ 200 ms",
                f"p95 {_ms(p95)}" + ("" if paged else f" (no pages: all {seen:,} rows)"),
                _met(p95 <= 0.2 and paged),
            ))  # fmt: skip
            env = {**os.environ, "NO_COLOR": "1"}
            cmd = [LAKESHORE, "queues", "ls", "-o", "json", "--api", srv.api, "--token", srv.token]
            t0 = time.perf_counter()
            done = await asyncio.to_thread(subprocess.run, cmd, env=env, capture_output=True)
            cli_s = time.perf_counter() - t0
            size = len(done.stdout)
            out.append((
                f"`queues ls -o json` of all {n:,}",
                "≤ 5 s",
                f"{_ms(cli_s)} ({size / 1e6:.1f} MB, exit {done.returncode})",
                _met(cli_s <= 5 and done.returncode == 0),
            ))  # fmt: skip
        async with server(data, start_timeout_s=600) as srv:
            for at, line in srv.startup:
                if "nats-server" in line and "ready at" in line or "directory rebuilt" in line:
                    print(f"  restart +{at:.1f} s: {line.strip()[-70:]}")
            out.append((
                f"restart with {n:,} queues",
                "≤ 10 s to ready",
                _ms(srv.ready_s),
                _met(srv.ready_s <= 10),
            ))  # fmt: skip
    return out


async def pending_row(n: int, repeat: int) -> list[Row]:
    out: list[Row] = []
    async with server() as srv, _client(srv) as client:
        await client.queue_add(QueueCreate(name="backlog"))
        spec = InvocationSubmit(fn="noop:noop", args=[0])
        times, ids = [], []
        for b in range(0, n, BATCH):
            t0 = time.perf_counter()
            answer = await client.submit("backlog", [spec] * min(BATCH, n - b))
            times.append(time.perf_counter() - t0)
            ids += answer.ids
        print(f"  submitted {n:,}: {[round(t, 2) for t in times]} s per batch")
        # The Recorder writes the submits' events behind the answers: wait for the last.
        async with asyncio.timeout(300):
            while (await client.job_show(ids[-1])).state.value != "pending":
                await asyncio.sleep(0.5)
        out.append((
            f"submit of {BATCH:,} at 0 → {n:,} pending",
            "stays flat",
            f"{times[0]:.2f} → {times[-1]:.2f} s per batch",
            _met(times[-1] <= 1.5 * times[0]),
        ))  # fmt: skip
        checks: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("`jobs ls -q backlog`", lambda: client.jobs_ls("backlog")),
            ("`jobs ls --state pending`", lambda: client.jobs_ls(state="pending")),
            ("`queues stats backlog`", lambda: client.queue_stats("backlog")),
            ("`jobs show` of the oldest pending", lambda: client.job_show(ids[0])),
            ("`jobs show` of the newest pending", lambda: client.job_show(ids[-1])),
        ]
        out += await _latency_rows(checks, f"at {n:,} pending", 0.05, repeat)
        oldest = await client.job_show(ids[0])
        newest = await client.job_show(ids[-1])
        print(f"  positions: oldest {oldest.position}, newest {newest.position} (of {n:,})")
    return out


def _uuid7(ms: int, counter: int) -> str:
    """A UUIDv7 of millisecond ``ms`` (the layout of :func:`lakeshore.ids.new_id`)."""
    rand_b = int.from_bytes(os.urandom(8)) & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (counter & 0xFFF) << 64 | 0b10 << 62
    return str(uuid.UUID(int=value | rand_b))


async def _seed_history(path: Path, n: int, queue: str) -> float:
    """Append ``n`` finished invocations of ``queue`` (4 events each), spread over the
    last 6 days; returns the seconds it took."""
    start = datetime.now(UTC) - timedelta(days=6)
    step_ms = 6 * 86_400_000 // n
    worker = "w-" + uuid.uuid4().hex[:12]
    t0 = time.perf_counter()
    async with await open_store(path) as store:
        chunk = 50_000
        for base in range(0, n, chunk):
            rows: list[tuple[Any, ...]] = []
            for i in range(base, min(n, base + chunk)):
                ts = start + timedelta(milliseconds=i * step_ms)
                inv = _uuid7(int(ts.timestamp() * 1000), i)
                sub = {"seq": i + 1, "priority": 0, "fn": "noop:noop", "command": None,
                       "max_attempts": 1, "timeout_s": None, "idempotency_key": None}  # fmt: skip
                rows += [
                    (NS, queue, inv, ts, "submitted", 0, None, None, sub),
                    (NS, queue, inv, ts + timedelta(milliseconds=2), "claimed", 1, worker, 1,
                     {"seq": i + 1, "level": 0}),
                    (NS, queue, inv, ts + timedelta(milliseconds=3), "started", 1, worker, 1,
                     {"seq": i + 1}),
                    (NS, queue, inv, ts + timedelta(milliseconds=5), "succeeded", 1, worker, 1,
                     {"seq": i + 1}),
                ]  # fmt: skip
            await store.append_invocation_events(rows)
            print(f"  seeded {min(n, base + chunk):,} invocations")
    return time.perf_counter() - t0


async def history_row(n: int, repeat: int) -> list[Row]:
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ls-scale-") as tmp:
        data = Path(tmp) / "data"
        async with server(data) as srv, _client(srv) as client:
            await client.queue_add(QueueCreate(name="history"))
            await client.queue_add(QueueCreate(name="empty"))
        seeded_s = await _seed_history(data / "lakeshore.duckdb", n, "history")
        mb = (data / "lakeshore.duckdb").stat().st_size / 1e6
        print(f"  seeded {n:,} invocations in {seeded_s:.0f} s (store layer, server stopped)")
        async with server(data, start_timeout_s=600) as srv, _client(srv) as client:
            out.append((
                f"restart with {n:,} history (seeded)",
                "≤ 10 s to ready",
                f"{_ms(srv.ready_s)} (DuckDB file {mb:.0f} MB)",
                _met(srv.ready_s <= 10),
            ))  # fmt: skip
            checks: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                ("`queues stats history`", lambda: client.queue_stats("history")),
                ("`queues stats` of an empty queue", lambda: client.queue_stats("empty")),
                ("`jobs ls -q history`", lambda: client.jobs_ls("history")),
                ("`jobs ls`", lambda: client.jobs_ls()),
                ("`jobs ls --state succeeded`", lambda: client.jobs_ls(state="succeeded")),
            ]
            out += await _latency_rows(checks, f"at {n:,} history", 0.1, repeat)
    return out


def _table(rows: list[Row]) -> str:
    head = ("figure", "target", "measured", "met?")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    line = "| " + " | ".join(f"{{:{w}}}" for w in widths) + " |"
    sep = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line.format(*head), sep, *(line.format(*r) for r in rows)])


async def main(args: argparse.Namespace) -> None:
    rows: list[Row] = []
    wanted = args.rows.split(",")
    if "queues" in wanted:
        print(f"queues: creating {args.queues:,}")
        rows += await queues_row(args.queues, args.repeat)
    if "pending" in wanted:
        print(f"pending: submitting {args.pending:,}")
        rows += await pending_row(args.pending, args.repeat)
    if "history" in wanted:
        print(f"history: seeding {args.history:,}")
        rows += await history_row(args.history, args.repeat)
    print()
    print(_table(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--pending", type=int, default=200_000)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--rows", default="queues,pending,history", help="comma-separated")
    parser.add_argument("--repeat", type=int, default=20, help="calls per latency figure")
    parser.add_argument("--quick", action="store_true", help="sizes ten times smaller")
    ns = parser.parse_args()
    if ns.quick:
        ns.queues, ns.pending, ns.history = ns.queues // 10, ns.pending // 10, ns.history // 10
        ns.repeat = min(ns.repeat, 10)
    assert shutil.which(LAKESHORE) or Path(LAKESHORE).exists(), LAKESHORE
    asyncio.run(main(ns))
