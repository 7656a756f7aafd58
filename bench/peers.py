"""The peers bench: Drain and W2 of spec/bench.md for dramatiq, Celery and Lakeshore, all in
one run on this machine, so that the ratios of spec/dataplane.md's Targets are same-run.

- **Drain**: ``--n`` no-ops (10,000) enqueued while no worker runs, then the workers start;
  runs/s = n / (the first run's start → the last run's end). Lakeshore: ``f.map`` and 2
  daemons on a fresh ``lakeshore server``, timed by the daemons' own run events (what
  ``bench/drain.py`` measures). dramatiq, Celery: each worker process keeps its count and
  its first start / last end in memory and a background thread flushes them to Redis
  (``peers_tasks/tally.py``), so counting adds no round trip to a run.
- **W2**: workers idle and warm; ``--latency-n`` times (500), one after the other, submit
  one no-op and wait for its result; p50 / p99 in ms, after 20 of warm-up. Lakeshore:
  ``bench/latency.py``'s ``f.submit(i).result()``; dramatiq: ``send`` +
  ``get_result(block=True)`` (``Results`` middleware, Redis backend); Celery:
  ``delay(i).get()`` (Redis result backend).

Set-ups, each its default on the same machine: dramatiq's CLI with 2 processes x 8 threads
(``RedisBroker``); Celery's worker with the prefork pool, concurrency 2 (prefetch
multiplier 4); Lakeshore with 2 daemons x concurrency 64, once with the default
``process`` isolation (runs in warm worker processes) and once ``inline``, each workload on
a fresh ``lakeshore server``. The peers share one private ``redis-server`` that the bench
starts on a free loopback port (``--save '' --appendonly no``), flushed before each
workload, and stops at the end.

Install the peers (once), in a venv of their own (the suite's ``.venv`` holds exactly the
lock, which ``tests/test_lock.py`` checks)::

    apt-get install -y redis-server
    python3 -m venv .venv-peers && .venv-peers/bin/pip install -r requirements/lock.txt \
        && .venv-peers/bin/pip install --no-deps -e . \
        && .venv-peers/bin/pip install 'dramatiq[redis]' 'celery[redis]'

Run::

    .venv-peers/bin/python bench/peers.py [--n 10000] [--latency-n 500] [--quick]
        [--only dramatiq,celery,lakeshore-process,lakeshore-inline] [--concurrency 64]
        [--markdown] [--rounds 1]

On this 2-core machine one run's drain figures spread by about ±15 % from one run to the
next; ``--rounds K`` runs everything K times and ends with each target judged on the median
of the K same-run figures (and how many rounds met it).

A peer that cannot run (not installed, no ``redis-server``, a failure) is left out with its
reason in the table; the others still run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType

import _workload
import latency
from _harness import BENCH_DIR
from _report import Row, percentile_ms, table
from _workload import CONCURRENCY, DAEMONS, queue_run, submit_map

PEERS = ("dramatiq", "celery", "lakeshore-process", "lakeshore-inline")
#: ``--quick`` sizes: a check that everything runs, not a measurement.
QUICK_N, QUICK_LATENCY_N = 500, 50
#: Bounds: the first warm-up round trip waits for the workers to start.
START_TIMEOUT_S, ROUND_TRIP_TIMEOUT_S, DRAIN_TIMEOUT_S, STOP_GRACE_S = 60, 30, 600, 15
_BIN = Path(sys.executable).parent
_INSTALL = ".venv-peers/bin/pip install 'dramatiq[redis]' 'celery[redis]' (see bench/peers.py)"


@dataclass(frozen=True)
class Peer:
    """A Redis-backed scheduler: its task module under ``peers_tasks`` and its worker command."""

    name: str
    module: str
    argv: tuple[str, ...]
    setup: str


PEER_SETUPS = {
    "dramatiq": Peer(
        "dramatiq",
        "peers_tasks.dramatiq_app",
        (str(_BIN / "dramatiq"), "peers_tasks.dramatiq_app", "--processes", "2", "--threads", "8"),
        "dramatiq CLI, 2 processes x 8 threads, RedisBroker; W2: Results + RedisBackend",
    ),
    "celery": Peer(
        "celery",
        "peers_tasks.celery_app",
        (
            *(str(_BIN / "celery"), "-A", "peers_tasks.celery_app", "worker"),
            *("--pool=prefork", "--concurrency=2", "--loglevel=WARNING"),
        ),
        "celery worker --pool=prefork --concurrency=2 (prefetch x4), Redis broker + backend",
    ),
}


@dataclass
class Figures:
    """One scheduler's Drain and W2, or why either is missing."""

    name: str
    setup: str
    drain_rate: float | None = None
    drain_s: float | None = None
    w2: list[float] | None = None
    problems: list[str] | None = None

    def note(self, problem: str) -> None:
        self.problems = [*(self.problems or []), problem]

    @property
    def p50(self) -> float | None:
        return percentile_ms(self.w2, 50) if self.w2 else None

    @property
    def p99(self) -> float | None:
        return percentile_ms(self.w2, 99) if self.w2 else None


@contextlib.contextmanager
def process_group(argv: list[str], log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """``argv`` as the leader of a new process group (its output in ``log``); on the way out
    the whole group gets SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`, and any member
    left behind by the leader is killed too."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, cwd=BENCH_DIR, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def redis_server(directory: Path, timeout_s: float = 10) -> Iterator[str]:
    """A private ``redis-server`` on a free loopback port, without persistence; its URL."""
    import redis

    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("no redis-server: apt-get install -y redis-server")
    port = free_port()
    argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(directory)]
    argv += ["--save", "", "--appendonly", "no"]
    log = directory / "redis.log"
    with process_group(argv, log, dict(os.environ)) as proc:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start:\n" + log.read_text()[-2000:])
            time.sleep(0.02)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"


class PeerRun:
    """One peer's workloads on the bench's Redis: workers started and stopped per workload."""

    def __init__(self, peer: Peer, url: str, logs: Path) -> None:
        import redis

        self.peer, self.logs = peer, logs
        self.env = {**os.environ, "PEERS_REDIS_URL": url, "PYTHONPATH": str(BENCH_DIR)}
        os.environ["PEERS_REDIS_URL"] = url
        self.tasks: ModuleType = importlib.import_module(peer.module)
        self.redis = redis.Redis.from_url(url)

    def workers(self, workload: str) -> contextlib.AbstractContextManager[subprocess.Popen]:
        return process_group(
            list(self.peer.argv), self.logs / f"{self.peer.name}-{workload}.log", self.env
        )

    def _check(self, proc: subprocess.Popen, workload: str) -> None:
        if proc.poll() is not None:
            log = (self.logs / f"{self.peer.name}-{workload}.log").read_text()
            raise RuntimeError(f"workers exited {proc.returncode}:\n{log[-2000:]}")

    def drain(self, n: int) -> tuple[float, float]:
        """``n`` enqueued with no worker running, then the workers start: ``(runs/s, s)``."""
        from peers_tasks.tally import read

        self.redis.flushall()
        self.tasks.enqueue(n)
        with self.workers("drain") as proc:
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while (got := read(self.redis))[0] < n:
                self._check(proc, "drain")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{got[0]} of {n} ran in {DRAIN_TIMEOUT_S} s")
                time.sleep(0.02)
        count, first, last = got
        if count != n:
            raise RuntimeError(f"{count} runs of {n} tasks")
        return n / (last - first), last - first

    def w2(self, n: int, warmup: int = latency.WARMUP) -> list[float]:
        """``n`` submit → result round trips (seconds) after ``warmup`` untimed ones."""
        self.redis.flushall()
        out: list[float] = []
        with self.workers("w2") as proc:
            for i in range(n + warmup):
                timeout_s = START_TIMEOUT_S if i == 0 else ROUND_TRIP_TIMEOUT_S
                start = time.perf_counter()
                value = self.tasks.round_trip(i, timeout_s)
                elapsed = time.perf_counter() - start
                if value != i:
                    raise RuntimeError(f"noop({i}) answered {value!r}")
                if i >= warmup:
                    out.append(elapsed)
            self._check(proc, "w2")
        return out


def measure_peer(peer: Peer, url: str | None, logs: Path, n: int, latency_n: int) -> Figures:
    figures = Figures(peer.name, peer.setup)
    if url is None:
        figures.note("not run: no redis-server (apt-get install -y redis-server)")
        return figures
    try:
        run = PeerRun(peer, url, logs)
    except ImportError as e:
        figures.note(f"not installed ({e.name}): {_INSTALL}")
        return figures
    _attempt(figures, "drain", lambda: _set_drain(figures, run.drain(n)))
    _attempt(figures, "W2", lambda: setattr(figures, "w2", run.w2(latency_n)))
    return figures


def _set_drain(figures: Figures, drain: tuple[float, float]) -> None:
    figures.drain_rate, figures.drain_s = drain


def _attempt(figures: Figures, workload: str, do: Callable[[], None]) -> None:
    try:
        do()
    except Exception as e:  # a peer's failure is reported in its row; the others still run
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        figures.note(f"{workload} failed: {type(e).__name__}: {first}"[:160])


def measure_lakeshore(isolation: str, n: int, latency_n: int, concurrency: int) -> Figures:
    """Drain and W2 as ``bench/drain.py`` and ``bench/latency.py`` run them, with
    ``bench/_workload.py``'s isolation set to ``isolation`` for both."""
    setup = f"{DAEMONS} daemons x concurrency {concurrency}, isolation {isolation}"
    figures = Figures(f"lakeshore-{isolation}", setup)
    if not hasattr(_workload, "ISOLATION"):
        figures.note("not run: bench/_workload.py has no ISOLATION")
        return figures
    before, _workload.ISOLATION = _workload.ISOLATION, isolation
    try:
        _attempt(figures, "drain", lambda: _set_drain(figures, _lakeshore_drain(n, concurrency)))
        _attempt(
            figures, "W2", lambda: setattr(figures, "w2", _lakeshore_w2(latency_n, concurrency))
        )
    finally:
        _workload.ISOLATION = before
    return figures


def _lakeshore_drain(n: int, concurrency: int) -> tuple[float, float]:
    run = asyncio.run(queue_run(n, submit_map, concurrency))
    return run.drain_rate, run.drain_s


def _lakeshore_w2(n: int, concurrency: int) -> list[float]:
    return asyncio.run(latency.round_trips(n, concurrency))


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def results_table(all_figures: list[Figures], markdown: bool) -> str:
    """One row per scheduler: Drain runs/s and seconds, W2 p50 / p99, problems."""
    header = ("scheduler", "drain runs/s", "drain s", "W2 p50 ms", "W2 p99 ms", "note")
    rows = [header] + [
        (
            f.name,
            _cell(f.drain_rate, "{:,.0f}"),
            _cell(f.drain_s, "{:.2f}"),
            _cell(f.p50, "{:.2f}"),
            _cell(f.p99, "{:.2f}"),
            "; ".join(f.problems or []),
        )
        for f in all_figures
    ]
    numbers = {1, 2, 3, 4}
    if markdown:
        align = ["---:" if i in numbers else "---" for i in range(len(header))]
        lines = [rows[0], tuple(align), *rows[1:]]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    out = []
    for k, cells in enumerate(rows):
        out.append(
            "  ".join(
                c.rjust(w) if i in numbers else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def target_rows(by_name: dict[str, Figures]) -> tuple[list[Row], list[str]]:
    """spec/dataplane.md's same-run targets, and why any of them could not be computed."""
    rows: list[Row] = []
    missing: list[str] = []

    def lacking(figure: str, names: tuple[str, ...], value: Callable[[Figures], float | None]):
        gone = [
            f"{n} (see its row)" if n in by_name else f"{n} (not in --only)"
            for n in names
            if n not in by_name or value(by_name[n]) is None
        ]
        if gone:
            missing.append(f"{figure}: no figure from {', '.join(gone)}")
        return bool(gone)

    ours = "lakeshore-process"
    for peer, label, at_least in (("dramatiq", "dramatiq", 1.0), ("celery", "Celery prefork", 2.0)):
        figure = f"Drain runs/s: Lakeshore-process vs {label}"
        if not lacking(figure, (ours, peer), lambda f: f.drain_rate):
            rate, base = by_name[ours].drain_rate, by_name[peer].drain_rate
            rows.append(Row.ratio(figure, rate, base, at_least))  # type: ignore[arg-type]
    figure = "W2 p50 (ms): Lakeshore process - inline"
    if not lacking(figure, (ours, "lakeshore-inline"), lambda f: f.p50):
        diff = by_name[ours].p50 - by_name["lakeshore-inline"].p50  # type: ignore[operator]
        rows.append(Row.bound(figure, diff, None, 0.5, "ms", "{:+.2f}"))
    return rows, missing


def versions() -> str:
    found = []
    for module in ("dramatiq", "celery", "kombu", "redis"):
        with contextlib.suppress(ImportError):
            found.append(f"{module} {importlib.import_module(module).__version__}")
    if binary := shutil.which("redis-server"):
        out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
        found.append(
            "redis-server " + next((w[2:] for w in out.split() if w.startswith("v=")), "?")
        )
    return ", ".join(found)


def run(
    names: list[str], n: int, latency_n: int, concurrency: int, url: str | None, tmp: Path
) -> list[Figures]:
    """Measure ``names`` once, the peers on the Redis at ``url``."""
    out: list[Figures] = []
    for name in names:
        if name in PEER_SETUPS:
            out.append(measure_peer(PEER_SETUPS[name], url, tmp, n, latency_n))
        else:
            out.append(
                measure_lakeshore(name.removeprefix("lakeshore-"), n, latency_n, concurrency)
            )
        print(f"  {name} done", file=sys.stderr, flush=True)
    return out


@contextlib.contextmanager
def bench_redis(names: list[str], tmp: Path) -> Iterator[str | None]:
    """The peers' Redis for every round (a peer's task module reads its URL once, at its
    import); ``None`` when no peer runs or it could not start (said on stderr)."""
    if not any(name in PEER_SETUPS for name in names):
        yield None
        return
    with contextlib.ExitStack() as stack:
        url = None
        try:
            url = stack.enter_context(redis_server(tmp))
        except RuntimeError as e:
            print(f"redis-server: {e}", file=sys.stderr)
        yield url


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, help=f"Drain no-ops [10000; quick {QUICK_N}]")
    p.add_argument("--latency-n", type=int, help=f"W2 round trips [500; quick {QUICK_LATENCY_N}]")
    p.add_argument("--concurrency", type=int, default=CONCURRENCY, help="per Lakeshore daemon")
    p.add_argument("--quick", action="store_true", help="small sizes, a check that it runs")
    p.add_argument("--only", default=",".join(PEERS), help="comma list of " + ",".join(PEERS))
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run everything this many times and judge each target on the median of the "
        "rounds' same-run figures too [1]",
    )
    args = p.parse_args()
    names = [s.strip() for s in args.only.split(",") if s.strip()]
    if unknown := [s for s in names if s not in PEERS]:
        p.error(f"--only: unknown {', '.join(unknown)} (choose from {', '.join(PEERS)})")
    if args.rounds < 1:
        p.error(f"--rounds: at least 1 (got {args.rounds})")
    n = args.n or (QUICK_N if args.quick else 10_000)
    latency_n = args.latency_n or (QUICK_LATENCY_N if args.quick else latency.N)
    # SIGTERM unwinds like Ctrl-C, so every process this bench started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    rounds: list[list[Row]] = []
    with (
        tempfile.TemporaryDirectory(prefix="ls-peers-") as tmp,
        bench_redis(names, Path(tmp)) as url,
    ):
        for i in range(args.rounds):
            of = f", round {i + 1} of {args.rounds}" if args.rounds > 1 else ""
            if i:
                print()
            started = datetime.now().astimezone()
            figures = run(names, n, latency_n, args.concurrency, url, Path(tmp))
            rounds.append(print_round(figures, started, n, latency_n, args.markdown, of))
    if args.rounds > 1:
        print()
        print(f"Over {args.rounds} rounds (each figure same-run within its round):")
        print()
        print(rounds_table(rounds, args.markdown))


def print_round(
    all_figures: list[Figures], started: datetime, n: int, latency_n: int, markdown: bool, of: str
) -> list[Row]:
    """Print one round's tables (it started at ``started``); its target rows."""
    print(
        f"Peers bench, {started:%Y-%m-%d %H:%M %Z}{of}: Drain N={n:,}, W2 {latency_n} round "
        f"trips (+{latency.WARMUP} warm-up), {os.cpu_count()} CPUs; {versions()}"
    )
    print()
    print(results_table(all_figures, markdown))
    rows, missing = target_rows({f.name: f for f in all_figures})
    bullet = "- " if markdown else "  "
    if rows:
        print()
        print(table(rows, markdown=markdown))
    if missing:
        print()
    for line in missing:
        print(bullet + line)
    print()
    print("Set-ups:")
    for f in all_figures:
        print(f"{bullet}{f.name}: {f.setup}")
    return rows


def rounds_table(rounds: list[list[Row]], markdown: bool) -> str:
    """Each target's figure in every round (a ratio for a rate, else the value), their
    median, and whether the median and how many rounds met the target."""
    by_figure: dict[str, list[Row]] = {}
    for rows in rounds:
        for row in rows:
            by_figure.setdefault(row.figure, []).append(row)
    header = ("figure", "per round", "median", "target", "median met?", "rounds met")
    lines = [header]
    for figure, rows in by_figure.items():
        values = [r.figure_value for r in rows]
        unit = " x" if rows[0].is_ratio else ""
        median = statistics.median(values)
        met = rows[0].meets(median)
        lines.append((
            figure, " / ".join(f"{v:.2f}{unit}" for v in values), f"{median:.2f}{unit}",
            rows[0].target, "yes" if met else "NO",
            f"{sum(r.met for r in rows)} of {len(rows)}",
        ))  # fmt: skip
    if markdown:
        lines.insert(1, tuple("---" for _ in header))
        return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    widths = [max(len(cells[i]) for cells in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
                     for cells in lines)  # fmt: skip


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted; every process the bench started is stopped")
