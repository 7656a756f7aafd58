"""1,000 daemons over the real protocol: heartbeat round trips, controller ticks, and how
long after a NATS restart every daemon pulls again.

Not a test. Run with ``python bench/fleet_scale.py [--daemons 1000] [--procs 4]
[--queues 200] [--window-s 30]``. It starts its own nats-server (the closed bus, as the
harness writes it) and ``lakeshore server --nats-url`` on it, creates the queues, then
``--procs`` processes each run their share of simulated daemons. A simulated daemon is what
``lakeshore daemon run`` is on NATS, minus running work: its own credential (minted as the
local provider does), its own connection (the real :class:`~lakeshore.bus.work.WorkBus`),
register, the control and nudge subscriptions, a heartbeat every ``heartbeat_s`` (sleep,
then beat, as :class:`~lakeshore.daemon.heartbeat.Heartbeater` does) and a ``no_wait`` pull
of its queue every ``idle_poll_s`` (an idle daemon's scan). Daemon ``i`` pulls from queue
``i mod --queues``.

Measured: heartbeat round trips (request → reply, in the daemon process) over a steady
window; the controller's tick duration, from ``GET …/controller`` (consecutive ``tick_at``
are ``tick_s`` plus one tick apart: ticks never overlap, the next is sent after the last
was answered); then nats-server is stopped (SIGTERM) and started again on its store and
port, and the time from the new server's readiness until every daemon has completed a pull.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec.inspect
from _harness import LAKESHORE, Server, closed_nats_server, daemon_access

from lakeshore.bus.work import WorkBus
from lakeshore.daemon.settings import DaemonSettings
from lakeshore.embedded import NatsServer
from lakeshore.errors import LakeshoreError, Unavailable
from lakeshore.model import Heartbeat, QueueCreate, WorkerRegister, WorkerStatus, now
from lakeshore.sdk import Client
from lakeshore.security import serverauth

NS = "default"
#: the real daemon's periods (``lakeshore daemon run`` defaults)
_DEFAULTS = {f.name: f.default for f in msgspec.inspect.type_info(DaemonSettings).fields}
HEARTBEAT_S: float = _DEFAULTS["heartbeat_s"]
IDLE_POLL_S: float = _DEFAULTS["idle_poll_s"]
TICK_S = 1.0  # the control plane's default ``tick_s``

TARGET_HB_P99_MS = 100.0
TARGET_TICK_S = 1.0
TARGET_REPULL_S = 30.0


# ---- the simulated daemons (one process holds a share of them) --------------------------


@dataclass
class SimDaemon:
    name: str
    queue: str
    bus: WorkBus
    worker_id: str
    #: (wall time sent, round trip in seconds or None when not answered)
    beats: list[tuple[float, float | None]] = field(default_factory=list)
    #: wall times of answered pulls
    pulls: list[float] = field(default_factory=list)
    nudges: int = 0


async def start_daemon(url: str, secrets, name: str, queue: str) -> SimDaemon:
    access = daemon_access(url, secrets, NS)
    bus = await WorkBus.connect(access, name, password=lambda: access.credential)
    reg = WorkerRegister(id=access.worker_id, namespace=NS, name=name, queues=[queue])
    for attempt in range(10):  # the daemon retries an unanswered registration too
        try:
            await bus.register(reg)
            break
        except Unavailable:
            if attempt == 9:
                raise
            await asyncio.sleep(1.0)
    d = SimDaemon(name, queue, bus, access.worker_id)
    await bus.subscribe_control(NS, access.worker_id, lambda order: None)

    def nudged(_: str) -> None:
        d.nudges += 1

    await bus.subscribe_nudges(NS, [queue], nudged)
    return d


async def heartbeats(d: SimDaemon, reg: WorkerRegister, stop: asyncio.Event) -> None:
    await asyncio.sleep(random.uniform(0, HEARTBEAT_S))
    # Not ``while True``: nats-py's request may swallow a cancellation (see Heartbeater.run).
    while not stop.is_set():
        await asyncio.sleep(HEARTBEAT_S)
        hb = Heartbeat(worker_id=d.worker_id, namespace=NS, status=WorkerStatus.IDLE,
                       current=[], ts=now())  # fmt: skip
        sent, t0 = time.time(), time.perf_counter()
        try:
            reply = await d.bus.heartbeat(hb)
        except LakeshoreError:
            d.beats.append((sent, None))
            continue
        d.beats.append((sent, time.perf_counter() - t0))
        if reply.unknown:
            try:
                await d.bus.register(reg)
            except LakeshoreError:
                pass


async def pulls(d: SimDaemon, stop: asyncio.Event) -> None:
    await asyncio.sleep(random.uniform(0, IDLE_POLL_S))
    layout = None
    while not stop.is_set():
        try:
            if layout is None:
                layout = await d.bus.queue_layout(NS, d.queue)
            if layout is not None:
                for level in layout.levels:
                    await d.bus.claim(NS, d.queue, level, 1)
                d.pulls.append(time.time())
        except LakeshoreError:
            pass
        await asyncio.sleep(IDLE_POLL_S)


async def fleet_worker(url: str, secrets_file: Path, names: list[str], queues: list[str],
                       out: Path) -> None:  # fmt: skip
    """One process's share: start them, say ``ready``, run until ``stop`` on stdin."""
    secrets = serverauth.load(secrets_file)
    gate = asyncio.Semaphore(20)

    tasks: list[asyncio.Task[None]] = []
    stop = asyncio.Event()

    async def one(name: str, queue: str) -> SimDaemon:
        async with gate:
            d = await start_daemon(url, secrets, name, queue)
        # As a daemon does: beating and pulling from its registration on.
        reg = WorkerRegister(id=d.worker_id, namespace=NS, name=d.name, queues=[d.queue])
        tasks.append(asyncio.create_task(heartbeats(d, reg, stop)))
        tasks.append(asyncio.create_task(pulls(d, stop)))
        return d

    t0 = time.perf_counter()
    fleet = await asyncio.gather(*(one(n, q) for n, q in zip(names, queues, strict=True)))
    print(f"ready {time.perf_counter() - t0:.2f}", flush=True)
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while (line := (await reader.readline()).decode().strip()) != "stop":
        if not line:
            break
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.wait(tasks, timeout=10)
    out.write_text(json.dumps([{"beats": d.beats, "pulls": d.pulls} for d in fleet]))
    print("done", flush=True)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(10):
            await asyncio.gather(*(d.bus.close() for d in fleet), return_exceptions=True)


@contextlib.asynccontextmanager
async def server_on(nats_url: str, secrets_file: Path, data_dir: Path) -> AsyncIterator[Server]:
    """``lakeshore server --nats-url`` on a free API port, on a nats-server this script owns
    (so it can stop and restart NATS under the control plane)."""
    proc = await asyncio.create_subprocess_exec(
        LAKESHORE, "server", "--data-dir", str(data_dir), "--port", "0",
        "--nats-url", nats_url, "--nats-auth-file", str(secrets_file),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    api, said = "", []
    async with asyncio.timeout(30):
        while "press Ctrl-C" not in (line := (await proc.stdout.readline()).decode()):
            if not line:
                raise RuntimeError("lakeshore server exited:\n" + "".join(said))
            said.append(line)
            if m := re.search(r"API (\S+), NATS (\S+)", line):
                api = m.group(1).rstrip(",")
    drain = asyncio.create_task(proc.stdout.read())  # keeps the pipe from filling
    token = tomllib.loads((data_dir / "config.toml").read_text())["token"]
    try:
        yield Server(api, token, nats_url, data_dir)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
        await drain


# ---- the conductor ----------------------------------------------------------------------


@dataclass
class Proc:
    proc: asyncio.subprocess.Process
    out: Path
    log: Path

    def failed(self, said: str) -> RuntimeError:
        tail = self.log.read_text()[-3000:]
        return RuntimeError(f"fleet process said {said!r}; its log ends:\n{tail}")

    async def line(self) -> str:
        assert self.proc.stdout is not None
        return (await self.proc.stdout.readline()).decode().strip()

    async def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        await self.proc.stdin.drain()


async def spawn(url: str, secrets_file: Path, names: list[str], queues: list[str],
                out: Path, log: Path) -> Proc:  # fmt: skip
    spec = out.with_suffix(".spec.json")
    path = [str(Path(__file__).parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    spec.write_text(json.dumps({"names": names, "queues": queues}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--worker", str(spec), "--url", url,
        "--secrets", str(secrets_file), "--out", str(out),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=log.open("w"), env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
    )  # fmt: skip
    return Proc(proc, out, log)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def tick_probe(client: Client, until: float, at: list[float], calls: list[float]) -> None:
    """Poll the controller's status; collect distinct ``tick_at`` and the call's latency."""
    while time.time() < until:
        t0 = time.perf_counter()
        status = await client.controller_status()
        calls.append(time.perf_counter() - t0)
        if status.tick_at is not None and (not at or status.tick_at.timestamp() != at[-1]):
            at.append(status.tick_at.timestamp())
        await asyncio.sleep(0.2)


async def conduct(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ls-fleet-") as tmp_:
        tmp = Path(tmp_)
        nats_server, secrets, secrets_file = closed_nats_server(tmp)
        await nats_server.start()
        servers: list[NatsServer] = [nats_server]
        try:
            await run(args, tmp, nats_server, secrets, secrets_file, servers)
        finally:
            await servers[-1].stop()


async def run(args, tmp: Path, nats_server: NatsServer, secrets, secrets_file: Path,
              servers: list[NatsServer]) -> None:  # fmt: skip
    url = nats_server.url
    async with server_on(url, secrets_file, tmp / "plane") as srv:
        client = Client(srv.api, srv.token, NS)
        async with client:
            t0 = time.perf_counter()
            qnames = [f"q{i:03}" for i in range(args.queues)]
            for q in qnames:
                await client.queue_add(QueueCreate(name=q))
            print(f"{args.queues} queues created in {time.perf_counter() - t0:.1f}s", flush=True)
            names = [f"sim-{i:04}" for i in range(args.daemons)]
            queues = [qnames[i % len(qnames)] for i in range(args.daemons)]
            procs = []
            for p in range(args.procs):
                share = slice(p, None, args.procs)
                out, log = tmp / f"fleet-{p}.json", tmp / f"fleet-{p}.log"
                procs.append(await spawn(url, secrets_file, names[share], queues[share], out, log))
            t0 = time.perf_counter()
            for p in procs:
                line = await asyncio.wait_for(p.line(), 600)
                if not line.startswith("ready"):
                    raise p.failed(line)
            print(f"{args.daemons} daemons connected and registered in "
                  f"{time.perf_counter() - t0:.1f}s", flush=True)  # fmt: skip
            workers = await client.workers_ls()
            print(f"registry: {Counter(w.status.value for w in workers)}", flush=True)
            await asyncio.sleep(args.warmup_s)
            w0 = time.time()
            tick_at: list[float] = []
            status_calls: list[float] = []
            await tick_probe(client, w0 + args.window_s, tick_at, status_calls)
            w1 = time.time()

            # NATS restart: same store dir, same port, same config.
            stopped = time.time()
            await nats_server.stop()
            again = NatsServer(nats_server.store_dir, config_file=nats_server.config_file,
                               port=nats_server.port)  # fmt: skip
            servers.append(again)
            await again.start()
            ready = time.time()
            print(f"nats-server restarted: down {ready - stopped:.2f}s", flush=True)
            await asyncio.sleep(args.recover_s)
            workers, after = await client.workers_ls(), time.time()
            lost = [w for w in workers if w.status.value == "lost"]
            print(f"registry at the end: {Counter(w.status.value for w in workers)}", flush=True)
            for p in procs:
                await p.send("stop")
            for p in procs:
                if (said := await asyncio.wait_for(p.line(), 120)) != "done":
                    raise p.failed(said)
            for p in procs:
                await p.proc.wait()
            data = [d for p in procs for d in json.loads(p.out.read_text())]

    rtts = [r for d in data for s, r in d["beats"] if w0 <= s < w1 and r is not None]
    missed = sum(1 for d in data for s, r in d["beats"] if w0 <= s < w1 and r is None)
    ticks = [b - a - TICK_S for a, b in zip(tick_at, tick_at[1:], strict=False)]
    first = [min((t for t in d["pulls"] if t >= ready), default=None) for d in data]
    repulled = [t - ready for t in first if t is not None]
    all_back = len(repulled) == len(data)
    hb_p50, hb_p99 = pct(rtts, 0.5) * 1e3, pct(rtts, 0.99) * 1e3
    tick_med, tick_max = statistics.median(ticks), max(ticks)
    repull = max(repulled) if all_back else float("inf")

    print()
    print(f"fleet: {len(data)} daemons in {args.procs} processes (one WorkBus connection "
          f"each), {args.queues} queues; heartbeat every {HEARTBEAT_S:g}s, pull every "
          f"{IDLE_POLL_S:g}s; window {w1 - w0:.0f}s")  # fmt: skip
    print(f"heartbeats in the window: {len(rtts):,} answered ({len(rtts) / (w1 - w0):,.0f}/s), "
          f"{missed} unanswered; p50 {hb_p50:.1f} ms, p90 {pct(rtts, 0.9) * 1e3:.1f} ms, "
          f"p99 {hb_p99:.1f} ms, max {max(rtts) * 1e3:.1f} ms")  # fmt: skip
    call_ms = pct(status_calls, 0.5) * 1e3
    slow = Counter(
        int(t - w0) for d in data for t, r in d["beats"] if w0 <= t < w1 and r and r > 0.1
    )
    print(f"heartbeats over 100 ms, by second of the window: {sorted(slow.items())}")
    print(f"controller ticks: {len(ticks)} measured; median {tick_med * 1e3:.0f} ms, max "
          f"{tick_max * 1e3:.0f} ms; status call p50 {call_ms:.1f} ms")  # fmt: skip
    print(f"after the NATS restart: {len(repulled)}/{len(data)} pulled again within "
          f"{args.recover_s:g}s; p50 {pct(repulled, 0.5) if repulled else float('nan'):.2f}s, "
          f"last {max(repulled) if repulled else float('nan'):.2f}s; "
          f"lost after it: {len(lost)} (checked {after - ready:.0f}s after); "
          f"connections refused by nats-server meanwhile (callout not answered): "
          f"{len(REFUSED)}")  # fmt: skip
    print()
    rows = [
        ("heartbeat p99 (1k daemons)", f"≤ {TARGET_HB_P99_MS:.0f} ms", f"{hb_p99:.1f} ms",
         hb_p99 <= TARGET_HB_P99_MS),
        ("heartbeat p50", "—", f"{hb_p50:.1f} ms", None),
        ("controller tick (median / max)", f"≤ {TARGET_TICK_S:g} s",
         f"{tick_med * 1e3:.0f} / {tick_max * 1e3:.0f} ms", tick_max <= TARGET_TICK_S),
        ("all pull again after NATS restart", f"≤ {TARGET_REPULL_S:.0f} s",
         f"{repull:.2f} s" if all_back else f"{len(repulled)}/{len(data)} in {args.recover_s:g} s",
         repull <= TARGET_REPULL_S),
    ]  # fmt: skip
    print("| figure | target | measured | met? |")
    print("| --- | --- | --- | --- |")
    for figure, target, measured, met in rows:
        verdict = "—" if met is None else "yes" if met else "NO"
        print(f"| {figure} | {target} | {measured} | {verdict} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemons", type=int, default=1_000)
    parser.add_argument("--procs", type=int, default=4, help="processes holding the daemons")
    parser.add_argument("--queues", type=int, default=200)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--window-s", type=float, default=30.0, help="steady-state window")
    parser.add_argument("--recover-s", type=float, default=40.0,
                        help="how long to watch the daemons after the NATS restart")  # fmt: skip
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--secrets", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        logging.basicConfig(level=logging.ERROR)
        spec = json.loads(args.worker.read_text())
        asyncio.run(fleet_worker(args.url, args.secrets, spec["names"], spec["queues"], args.out))
        return
    logging.basicConfig(level=logging.WARNING)
    # nats-server's log: its refusals while the control plane's auth callout is not back
    # yet are expected during the restart (the daemons retry); only counted.
    logging.getLogger("lakeshore.embedded").addFilter(_count_refusals)
    asyncio.run(conduct(args))


REFUSED: list[str] = []


def _count_refusals(record: logging.LogRecord) -> bool:
    text = record.getMessage()
    if "authentication error" in text:
        REFUSED.append(text)
    return record.levelno >= logging.ERROR and "authentication error" not in text


if __name__ == "__main__":
    main()
