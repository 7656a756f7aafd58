"""Fair share between orgs (fault row 23 of spec/faults.md): one org floods a shared
control plane; how much of it another org feels.

Not a test (fault row 23, ``tests/faults/test_row_23_fair_share.py``, runs the same
scenario at a smaller scale through :func:`run_attack`). Run with ``.venv/bin/python
bench/fair_share.py [--pending 100000] [--http-waits 500] [--nats-waits 1000]
[--nats-conns 4] [--wait-s 10] [--window-s 20]``: about three minutes, bounded by
``--deadline-s``.

It starts ``lakeshore server`` (its embedded nats-server, loopback) with the default
quotas, and two orgs on it:

- **org A**, the victim: namespace ``a``, queue ``q``, two real ``lakeshore daemon run``
  processes on it (their token in ``LAKESHORE_TOKEN``, never in argv), and
  :data:`SIM_DAEMONS` daemons of its own simulated here over the real protocol (joined
  with ``POST …/daemons/join``, their own credential and
  :class:`~lakeshore.bus.work.WorkBus` connection, register, then a heartbeat every
  ``--beat-s``), so that a heartbeat's round trip is timed where it is sent. Half of
  them report the same status every time (the registry's in-memory path), half turn
  ``busy``/``idle`` on every beat (a status change: the registry writes the row before
  it answers). A's probes: ``GET /v1/namespaces/a/workers``, ``GET …/queues/q`` and
  ``GET …/controller``, each sent at a fixed rate (``--rate`` per second, each request on
  its own: a stalled server does not slow the sending, so a stall shows in the figures).
- **org B**, the flooder, in a process of its own (so its event loop does not share
  A's): ``--pending`` invocations submitted to ``b/flood`` (no daemon: they stay
  pending), in batches over HTTP, and, from the first batch on, ``--http-waits`` result
  waits over HTTP (``GET …/jobs/:id/result?wait_s=``, one token) and ``--nats-waits``
  over NATS (the SDK's fast path, :class:`~lakeshore.bus.producer.ProducerBus`, spread
  over ``--nats-conns`` producer connections), each wait sent again as soon as it is
  answered. A wait refused with 429 ``quota_exceeded`` (B's ``result_waits_per_org``,
  ``result_waits_per_asker``) is counted as refused, not as an error, and tried again
  after ``--refused-backoff-s``.

A's figures are measured twice, over ``--window-s`` each: idle (B does nothing), then
under attack (from B's first request until ``--window-s`` after its last submit was
answered). The table: p50 / p99 per request kind, idle and under attack, the ratio
p99(attack) / p99(idle) against the issue's target (≤ 2), A's 5xx and unanswered
requests, B's answered / refused / failed waits and submits.

Everything is bounded: each request times out, the run stops itself after
``--deadline-s``, and every process it started is stopped by its pid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import BENCH_DIR, LAKESHORE, Server, server  # noqa: E402

from lakeshore.bus.producer import ProducerBus  # noqa: E402
from lakeshore.bus.work import WorkBus  # noqa: E402
from lakeshore.errors import LakeshoreError  # noqa: E402
from lakeshore.model import (  # noqa: E402
    DaemonAccess,
    FastResult,
    Heartbeat,
    WorkerRegister,
    WorkerStatus,
    now,
)

ORG_A, NS_A, QUEUE_A = "org-a", "a", "q"
ORG_B, NS_B, QUEUE_B = "org-b", "b", "flood"
#: Real daemons of org A (``lakeshore daemon run``).
REAL_DAEMONS = 2
#: Daemons of org A simulated here over the real protocol (their heartbeats are timed).
SIM_DAEMONS = 4
#: The issue's target: A's p99 under attack at most this many times its idle p99.
TARGET_RATIO = 2.0
#: Bound of one probe request of A's (seconds): a slower answer counts as unanswered.
PROBE_TIMEOUT_S = 10.0
#: Invocations per submit request of B's (at most ``MAX_BATCH``) and how many in flight.
SUBMIT_BATCH, SUBMITS_IN_FLIGHT = 5_000, 2
KINDS = ("workers", "queue", "heartbeat (same status)", "heartbeat (status change)")
#: Also measured, not part of the target: the controller's status (answered at all).
EXTRA = ("controller",)


# ---- A: probes and simulated daemons ------------------------------------------------------


@dataclass
class Samples:
    """Round trips (seconds) of one kind of request, and what went wrong."""

    #: (when it was sent, monotonic seconds; its round trip in seconds)
    sent: list[tuple[float, float]] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    #: not answered within the bound (counted in ``times`` at the bound)
    unanswered: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, t0: float, rtt: float) -> None:
        self.sent.append((t0, rtt))

    @property
    def times(self) -> list[float]:
        return [rtt for _, rtt in self.sent]

    def p(self, q: int, start: float = 0.0, end: float = float("inf")) -> float:
        """The ``q``-th percentile in ms of the requests sent in ``[start, end)``."""
        times = [rtt for t, rtt in self.sent if start <= t < end]
        if len(times) < 2:
            return float("nan")
        return statistics.quantiles(times, n=100)[q - 1] * 1000

    @property
    def five_xx(self) -> int:
        return sum(n for s, n in self.statuses.items() if s >= 500)


class Probes:
    """A's requests, sent at a fixed rate each, until :meth:`stop`."""

    def __init__(self, api: str, token: str, rate: float) -> None:
        self.api, self.token, self.rate = api, token, rate
        self.samples: dict[str, Samples] = {}
        self._stop = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        self.samples = {k: Samples() for k in ("workers", "queue", "controller")}
        paths = {
            "workers": f"/v1/namespaces/{NS_A}/workers",
            "queue": f"/v1/namespaces/{NS_A}/queues/{QUEUE_A}",
            "controller": f"/v1/namespaces/{NS_A}/controller",
        }
        self._stop.clear()
        connector = aiohttp.TCPConnector(limit=0)
        headers = {"Authorization": f"Bearer {self.token}"}
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            self._session = session
            await asyncio.gather(*(self._every(k, p) for k, p in paths.items()))
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=PROBE_TIMEOUT_S + 5)

    def stop(self) -> None:
        self._stop.set()

    async def _every(self, kind: str, path: str) -> None:
        period = 1.0 / self.rate
        next_at = time.monotonic() + random.uniform(0, period)
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), max(0.0, next_at - time.monotonic()))
            if self._stop.is_set():
                return
            next_at += period
            task = asyncio.create_task(self._one(kind, path))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _one(self, kind: str, path: str) -> None:
        assert self._session is not None
        s = self.samples[kind]
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                async with self._session.get(self.api + path) as r:
                    await r.read()
                    status = r.status
        except TimeoutError:
            s.unanswered += 1
            s.add(t0, PROBE_TIMEOUT_S)
            return
        except aiohttp.ClientError as e:
            s.errors.append(repr(e))
            s.unanswered += 1
            return
        s.add(t0, time.monotonic() - t0)
        s.statuses[status] += 1


@dataclass
class SimDaemon:
    access: DaemonAccess
    bus: WorkBus
    name: str
    #: turns busy/idle on every beat (each beat is a status change the registry writes)
    flips: bool


class Fleet:
    """A's simulated daemons: register, then beat every ``beat_s`` until :meth:`stop`."""

    def __init__(self, daemons: list[SimDaemon], beat_s: float) -> None:
        self.daemons, self.beat_s = daemons, beat_s
        self.samples: dict[str, Samples] = {}
        self.unknown = 0
        self._stop = asyncio.Event()

    @classmethod
    async def join(cls, api: str, token: str, count: int, beat_s: float) -> Fleet:
        daemons = []
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            for i in range(count):
                url = f"{api}/v1/namespaces/{NS_A}/daemons/join"
                async with session.post(url, json={}) as r:
                    assert r.status == 200, await r.text()
                    access = msgspec.json.decode(await r.read(), type=DaemonAccess)
                name = f"sim-{i}"
                bus = await WorkBus.connect(access, name, password=lambda a=access: a.credential)
                reg = WorkerRegister(
                    id=access.worker_id, namespace=NS_A, name=name, queues=[QUEUE_A]
                )
                await bus.register(reg)
                daemons.append(SimDaemon(access, bus, name, flips=i % 2 == 1))
        return cls(daemons, beat_s)

    async def run(self) -> None:
        self.samples = {k: Samples() for k in KINDS[2:]}
        self._stop.clear()
        await asyncio.gather(*(self._beats(i, d) for i, d in enumerate(self.daemons)))

    def stop(self) -> None:
        self._stop.set()

    async def _beats(self, i: int, d: SimDaemon) -> None:
        kind = KINDS[3] if d.flips else KINDS[2]
        s = self.samples[kind]
        next_at = time.monotonic() + self.beat_s * i / len(self.daemons)
        busy = False
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), max(0.0, next_at - time.monotonic()))
            if self._stop.is_set():
                return
            # As a daemon does: sleep, then beat (the next one waits for this one's answer).
            busy = not busy if d.flips else False
            status = WorkerStatus.BUSY if busy else WorkerStatus.IDLE
            hb = Heartbeat(worker_id=d.access.worker_id, namespace=NS_A, status=status, ts=now())
            t0 = time.monotonic()
            try:
                reply = await d.bus.heartbeat(hb)
            except LakeshoreError as e:
                s.unanswered += 1
                s.add(t0, time.monotonic() - t0)
                s.errors.append(repr(e))
            else:
                s.add(t0, time.monotonic() - t0)
                s.statuses[200] += 1
                self.unknown += reply.unknown
            next_at = max(next_at + self.beat_s, time.monotonic())

    async def close(self) -> None:
        for d in self.daemons:
            with contextlib.suppress(LakeshoreError):
                hb = Heartbeat(worker_id=d.access.worker_id, namespace=NS_A,
                               status=WorkerStatus.STOPPED, ts=now())  # fmt: skip
                await d.bus.heartbeat(hb)
            await d.bus.close()


# ---- B: the flood (its own process) -------------------------------------------------------


@dataclass
class Flood:
    """What B's process counts (sent back as JSON)."""

    submitted: int = 0
    submit_statuses: Counter[str] = field(default_factory=Counter)
    submit_s: float = 0.0
    #: per door ("http", "nats"): answered, refused (429), failed (anything else)
    waits: dict[str, Counter[str]] = field(default_factory=dict)
    refusals: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)


async def flood(spec: dict[str, Any]) -> None:
    """B's process: submit, open the waits, say ``submitted`` when the last submit was
    answered, stop on ``stop`` (stdin), print the counts as JSON."""
    api, token, nats_url = spec["api"], spec["token"], spec["nats_url"]
    wait_s, backoff_s = spec["wait_s"], spec["refused_backoff_s"]
    f = Flood(waits={"http": Counter(), "nats": Counter()})
    ids: list[str] = []
    have_ids = asyncio.Event()
    stop = asyncio.Event()
    headers = {"Authorization": f"Bearer {token}"}
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), headers=headers)
    buses = [await ProducerBus.connect(nats_url, token, None) for _ in range(spec["nats_conns"])]

    async def submit_all() -> None:
        t0 = time.perf_counter()
        url = f"{api}/v1/namespaces/{NS_B}/queues/{QUEUE_B}/invocations"
        sizes = [min(SUBMIT_BATCH, spec["pending"] - s)
                 for s in range(0, spec["pending"], SUBMIT_BATCH)]  # fmt: skip
        gate = asyncio.Semaphore(SUBMITS_IN_FLIGHT)

        async def one(n: int) -> None:
            body = {"invocations": [{"fn": "noop:noop", "args": [i]} for i in range(n)]}
            async with gate:
                try:
                    async with session.post(url, json=body, timeout=_timeout(120)) as r:
                        raw = await r.read()
                        f.submit_statuses[str(r.status)] += 1
                        if r.status == 202:
                            got = msgspec.json.decode(raw)["ids"]
                            ids.extend(got)
                            f.submitted += len(got)
                            have_ids.set()
                except (TimeoutError, aiohttp.ClientError) as e:
                    f.submit_statuses[type(e).__name__] += 1

        await asyncio.gather(*(one(n) for n in sizes))
        f.submit_s = time.perf_counter() - t0
        print("submitted", flush=True)

    def judge(door: str, status: int, code: str | None, detail: str) -> bool:
        """Count one answer; whether it was a refusal."""
        if status == 429 and code == "quota_exceeded":
            f.waits[door]["refused"] += 1
            f.refusals[detail.split(" (")[0].removeprefix("over quota ")] += 1
            return True
        if status in (200, 202):
            f.waits[door]["answered"] += 1
        else:
            f.waits[door]["failed"] += 1
            f.failures[f"{door} {status} {code}"] += 1
        return False

    async def http_wait() -> None:
        await have_ids.wait()
        while not stop.is_set():
            f.waits["http"]["sent"] += 1
            job = random.choice(ids)
            url = f"{api}/v1/namespaces/{NS_B}/jobs/{job}/result?wait_s={wait_s:g}"
            try:
                async with session.get(url, timeout=_timeout(wait_s + 30)) as r:
                    body = msgspec.json.decode(await r.read() or b"null")
                    code, message = _error_of(body)
                    refused = judge("http", r.status, code, message)
            except (TimeoutError, aiohttp.ClientError) as e:
                refused = judge("http", 0, type(e).__name__, "")
            if refused:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff_s)

    async def nats_wait(bus: ProducerBus) -> None:
        await have_ids.wait()
        payload = msgspec.json.encode(FastResult(token=token, wait_s=wait_s))
        while not stop.is_set():
            f.waits["nats"]["sent"] += 1
            job = random.choice(ids)
            try:
                raw = await bus.result(NS_B, job, payload, wait_s + 30)
                code, message = _error_of(msgspec.json.decode(raw))
                status = 200 if code is None else 429 if code == "quota_exceeded" else 500
                refused = judge("nats", status, code, message)
            except LakeshoreError as e:
                refused = judge("nats", 0, e.code, str(e))
            if refused:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff_s)

    async def until_stopped() -> None:
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while (line := (await reader.readline()).decode().strip()) != "stop" and line:
            pass
        stop.set()

    print("started", flush=True)
    waits = [asyncio.create_task(http_wait()) for _ in range(spec["http_waits"])]
    waits += [
        asyncio.create_task(nats_wait(buses[i % len(buses)])) for i in range(spec["nats_waits"])
    ]
    submitting = asyncio.create_task(submit_all())
    await until_stopped()
    # The waits in flight end within their wait_s; cut short, they count for nothing.
    submitting.cancel()
    for t in waits:
        t.cancel()
    await asyncio.gather(submitting, *waits, return_exceptions=True)
    await session.close()
    for bus in buses:
        await bus.close()
    print("counts " + json.dumps({
        "submitted": f.submitted, "submit_statuses": f.submit_statuses, "submit_s": f.submit_s,
        "waits": f.waits, "refusals": f.refusals, "failures": f.failures,
    }), flush=True)  # fmt: skip


def _timeout(total: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=total)


def _error_of(body: Any) -> tuple[str | None, str]:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"].get("code"), body["error"].get("message", "")
    return None, ""


class Flooder:
    """B's process, seen from the conductor."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def spawn(cls, spec: dict[str, Any], tmp: Path, nice: int) -> Flooder:
        path = tmp / "flood.json"
        path.write_text(json.dumps(spec))
        with (tmp / "flood.log").open("w") as log:  # the child keeps its own copy
            proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--flood", str(path),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
                preexec_fn=(lambda: os.nice(nice)) if nice else None,
            )  # fmt: skip
        return cls(proc)

    async def said(self, word: str, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout_s):
            while True:
                line = (await self.proc.stdout.readline()).decode().strip()
                if not line:
                    raise RuntimeError(f"the flood process ended before saying {word!r}")
                if line.startswith(word):
                    return line

    async def stop(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()
        line = await self.said("counts", 120)
        await asyncio.wait_for(self.proc.wait(), 30)
        return json.loads(line.removeprefix("counts "))

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


# ---- the conductor ------------------------------------------------------------------------


async def _call(session: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> Any:
    async with session.request(method, url, json=body) as r:
        raw = await r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {url}: {r.status} {raw[:300]!r}")
        return msgspec.json.decode(raw)


async def set_up(srv: Server) -> tuple[str, str]:
    """Orgs A and B, each a namespace, a token and a queue: ``(A's token, B's token)``."""
    headers = {"Authorization": f"Bearer {srv.token}"}
    async with aiohttp.ClientSession(headers=headers) as admin:
        tokens = []
        for ns, org, queue in ((NS_A, ORG_A, QUEUE_A), (NS_B, ORG_B, QUEUE_B)):
            await _call(admin, "POST", f"{srv.api}/v1/namespaces", {"name": ns, "org": org})
            made = await _call(admin, "POST", f"{srv.api}/v1/namespaces/{ns}/tokens",
                               {"description": f"bench {org}"})  # fmt: skip
            tokens.append(made["token"])
            await _call(admin, "POST", f"{srv.api}/v1/namespaces/{ns}/queues", {"name": queue})
    return tokens[0], tokens[1]


@contextlib.asynccontextmanager
async def real_daemons(srv: Server, token: str, tmp: Path):
    # The token in the environment, never in argv (where every user of the host sees it).
    path = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "LAKESHORE_TOKEN": token}
    procs = []
    for i in range(REAL_DAEMONS):
        with (tmp / f"daemon-{i}.log").open("w") as log:  # the child keeps its own copy
            procs.append(
                await asyncio.create_subprocess_exec(
                    LAKESHORE,
                    "daemon",
                    "run",
                    "--api",
                    srv.api,
                    "-n",
                    NS_A,
                    "--queue",
                    QUEUE_A,
                    "--name",
                    f"real-{i}",
                    "--log-level",
                    "WARNING",
                    env=env,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=log,
                )  # fmt: skip
            )
    try:
        yield procs
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                await asyncio.wait_for(p.wait(), 30)
            except TimeoutError:
                p.kill()
                await p.wait()


async def wait_live(srv: Server, token: str, names: set[str], timeout_s: float = 60) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with asyncio.timeout(timeout_s):
            while True:
                body = await _call(session, "GET", f"{srv.api}/v1/namespaces/{NS_A}/workers")
                live = {w["name"] for w in body["workers"] if w["status"] in ("idle", "busy")}
                if names <= live:
                    return
                await asyncio.sleep(0.2)


async def lost_workers(srv: Server, token: str) -> list[str]:
    """A's workers the registry calls lost (or why they could not be listed)."""
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with aiohttp.ClientSession(headers=headers) as session:
            body = await _call(session, "GET", f"{srv.api}/v1/namespaces/{NS_A}/workers")
    except (RuntimeError, aiohttp.ClientError) as e:
        return [f"(not listed: {str(e)[:160]})"]
    return [w["name"] for w in body["workers"] if w["status"] == "lost"]


@dataclass
class Phase:
    name: str
    seconds: float
    samples: dict[str, Samples]
    #: monotonic time B's last submit was answered (under attack)
    submitted_at: float = float("nan")


async def measure_a(probes: Probes, fleet: Fleet, name: str, until: asyncio.Future[Any]) -> Phase:
    """A's figures from now until ``until`` is done."""
    t0 = time.monotonic()
    running = [asyncio.create_task(probes.run()), asyncio.create_task(fleet.run())]
    try:
        await until
    finally:
        probes.stop()
        fleet.stop()
        await asyncio.gather(*running)
    return Phase(name, time.monotonic() - t0, {**probes.samples, **fleet.samples})


@dataclass
class Outcome:
    """What one run measured: A's phases, B's counts, A's workers lost at the end."""

    idle: Phase
    attack: Phase
    b: dict[str, Any]
    lost: list[str]

    def ratio(self, kind: str) -> float:
        """A's p99 under attack over its idle p99 (NaN without samples)."""
        idle = self.idle.samples[kind].p(99)
        return self.attack.samples[kind].p(99) / idle if idle == idle and idle > 0 else float("nan")

    def five_xx(self) -> int:
        """A's 5xx answers, idle and under attack."""
        phases = (self.idle, self.attack)
        return sum(s.five_xx for p in phases for s in p.samples.values())

    def unanswered(self) -> int:
        """A's requests not answered within :data:`PROBE_TIMEOUT_S`."""
        phases = (self.idle, self.attack)
        return sum(s.unanswered for p in phases for s in p.samples.values())

    def refused(self) -> int:
        """B's result waits refused with 429 ``quota_exceeded``."""
        return sum(int(c.get("refused", 0)) for c in self.b["waits"].values())


async def run_attack(srv: Any, args: argparse.Namespace, tmp: Path) -> Outcome:
    """The whole scenario on a running server (``srv``: ``api``, ``token`` (the admin's),
    ``nats_url``), with the real daemons' logs and B's spec under ``tmp``."""
    token_a, token_b = await set_up(srv)
    async with real_daemons(srv, token_a, tmp):
        fleet = await Fleet.join(srv.api, token_a, SIM_DAEMONS, args.beat_s)
        try:
            names = {f"real-{i}" for i in range(REAL_DAEMONS)}
            await wait_live(srv, token_a, names | {d.name for d in fleet.daemons})
            idle, attack, counts = await phases(args, srv, tmp, token_a, token_b, fleet)
            return Outcome(idle, attack, counts, await lost_workers(srv, token_a))
        finally:
            await fleet.close()


async def conduct(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ls-fair-") as tmp_:
        tmp = Path(tmp_)
        data = tmp / "data"
        data.mkdir()
        async with server(data) as srv:
            outcome = await run_attack(srv, args, tmp)
        report(outcome, args)


def options(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's options (``argv``: ``None``, the command line's)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--pending", type=int, default=100_000, help="B's pending invocations")
    p.add_argument("--http-waits", type=int, default=500, help="B's result waits over HTTP")
    p.add_argument("--nats-waits", type=int, default=1_000, help="B's result waits over NATS")
    p.add_argument("--nats-conns", type=int, default=4, help="B's producer connections")
    p.add_argument("--wait-s", type=float, default=10.0, help="wait_s of each of B's waits")
    p.add_argument("--refused-backoff-s", type=float, default=1.0,
                   help="B tries a refused wait again after this long")  # fmt: skip
    p.add_argument("--window-s", type=float, default=20.0, help="each measurement window")
    p.add_argument("--rate", type=float, default=20.0, help="A's requests per second per kind")
    p.add_argument("--beat-s", type=float, default=0.25, help="A's simulated heartbeat period")
    p.add_argument("--flood-nice", type=int, default=10,
                   help="B's process runs this much nicer (0: as nice as the plane)")  # fmt: skip
    p.add_argument("--deadline-s", type=float, default=420.0, help="the whole run's bound")
    p.add_argument("--flood", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


async def phases(args, srv: Server, tmp: Path, token_a: str, token_b: str, fleet: Fleet):
    probes = Probes(srv.api, token_a, args.rate)
    await measure_a(probes, fleet, "warm-up", asyncio.ensure_future(asyncio.sleep(3)))
    idle = await measure_a(
        probes, fleet, "idle", asyncio.ensure_future(asyncio.sleep(args.window_s))
    )
    print(f"idle: measured {idle.seconds:.0f}s", flush=True)
    spec = {
        "api": srv.api, "token": token_b, "nats_url": srv.nats_url, "pending": args.pending,
        "http_waits": args.http_waits, "nats_waits": args.nats_waits,
        "nats_conns": args.nats_conns, "wait_s": args.wait_s,
        "refused_backoff_s": args.refused_backoff_s,
    }  # fmt: skip
    flooder = await Flooder.spawn(spec, tmp, args.flood_nice)
    try:
        await flooder.said("started", 60)

        submitted_at: list[float] = []

        async def attack_window() -> None:
            t0 = time.monotonic()
            await flooder.said("submitted", args.deadline_s)
            submitted_at.append(time.monotonic())
            print(f"attack: {args.pending:,} submitted in {time.monotonic() - t0:.0f}s", flush=True)
            await asyncio.sleep(args.window_s)

        attack = await measure_a(probes, fleet, "attack", asyncio.ensure_future(attack_window()))
        attack.submitted_at = submitted_at[0]
        counts = await flooder.stop()
    finally:
        flooder.kill()
    return idle, attack, counts


def _ms(v: float) -> str:
    return "—" if v != v else f"{v:.1f}"


def report(outcome: Outcome, args: argparse.Namespace) -> None:
    """Print the run's table and counts (markdown)."""
    idle, attack, b, lost = outcome.idle, outcome.attack, outcome.b, outcome.lost
    print()
    print(
        f"fair share: org B floods with {args.pending:,} pending + {args.http_waits} HTTP and "
        f"{args.nats_waits} NATS result waits (wait_s {args.wait_s:g}, NATS over "
        f"{args.nats_conns} connections); org A probes at {args.rate:g}/s per kind, "
        f"{SIM_DAEMONS} simulated daemons beating every {args.beat_s:g}s, "
        f"{REAL_DAEMONS} real daemons; B's process at nice {args.flood_nice}; idle "
        f"{idle.seconds:.0f}s, attack {attack.seconds:.0f}s"
    )
    print()
    print("| A's request | idle p50 / p99 (ms) | attack p50 / p99 (ms) | p99 ratio | target | "
          "met? | A 5xx | A unanswered | n idle / attack |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |")
    met_all = True
    for kind in (*KINDS, *EXTRA):
        i, a = idle.samples[kind], attack.samples[kind]
        ratio = outcome.ratio(kind)
        target = kind not in EXTRA
        met = ratio <= TARGET_RATIO and a.five_xx == 0 and a.unanswered == 0
        met_all &= met or not target
        print(
            f"| {kind} | {_ms(i.p(50))} / {_ms(i.p(99))} | {_ms(a.p(50))} / {_ms(a.p(99))} | "
            f"{ratio:.2f} x | {'≤ 2 x, 0 5xx' if target else '(answered)'} | "
            f"{('yes' if met else 'NO') if target else ('yes' if a.unanswered == 0 else 'NO')} | "
            f"{i.five_xx + a.five_xx} | {i.unanswered + a.unanswered} | "
            f"{len(i.times)} / {len(a.times)} |"
        )
    print()
    cut = attack.submitted_at
    print("A's p99 under attack (ms), while B submits / after its last submit: " + "; ".join(
        f"{kind} {_ms(attack.samples[kind].p(99, end=cut))} / "
        f"{_ms(attack.samples[kind].p(99, start=cut))}"
        for kind in (*KINDS, *EXTRA)
    ))  # fmt: skip
    waits = {door: Counter(c) for door, c in b["waits"].items()}
    total = sum(waits.values(), Counter())
    print(
        f"B: {b['submitted']:,} of {args.pending:,} submitted in {b['submit_s']:.1f}s "
        f"(statuses {dict(b['submit_statuses'])}); result waits answered "
        f"{total['answered']:,}, refused (429) {total['refused']:,}, failed "
        f"{total['failed']:,}, cut short at the end "
        f"{total['sent'] - total['answered'] - total['refused'] - total['failed']:,} — "
        f"HTTP {dict(waits['http'])}, NATS {dict(waits['nats'])}"
    )
    if b["refusals"]:
        print(f"B's refusals by quota: {dict(b['refusals'])}")
    if b["failures"]:
        print(f"B's failures: {dict(b['failures'])}")
    odd = {k: dict(s.statuses) for k, s in attack.samples.items() if set(s.statuses) - {200}}
    if odd:
        print(f"A's statuses other than 200 under attack: {odd}")
    errors = [e for s in attack.samples.values() for e in s.errors[:3]]
    if errors:
        print(f"A's first errors under attack: {errors[:6]}")
    print(f"A's workers lost at the end: {lost or 'none'}")
    print(f"target (A's p99 ≤ {TARGET_RATIO:g} x idle, 0 5xx, all answered): "
          f"{'met' if met_all and not lost else 'MISSED'}")  # fmt: skip


def main() -> None:
    args = options()
    if args.flood is not None:
        logging.basicConfig(level=logging.ERROR)
        asyncio.run(flood(json.loads(args.flood.read_text())))
        return
    logging.basicConfig(level=logging.WARNING)

    async def bounded() -> None:
        async with asyncio.timeout(args.deadline_s):
            await conduct(args)

    asyncio.run(bounded())


if __name__ == "__main__":
    main()
