"""What shipping code costs (spec/code.md): the first run of a new snapshot (pack, upload,
fetch to the host, unpack, a worker started in it), a run of a cached one against a plain
run, and the submit rate with ``code=`` set against without.

A fresh ``lakeshore server`` and one daemon (concurrency 1, its own code cache). Sizes are a
snapshot's files: a module and random (incompressible) data. Each latency is
``f.submit(...).result()`` from this process, the median of ``--runs``; the plain run is the
same no-op imported from the daemon's own path (``bench/noop.py``).

Run::

    .venv/bin/python bench/code_cost.py [--runs 20] [--submits 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from _harness import daemons, server, wait_registered
from noop import noop

import lakeshore
from lakeshore.model import QueueCreate
from lakeshore.sdk import Client, configure
from lakeshore.sdk.code import Shipper

QUEUE = "code"
MIB = 1024 * 1024


def _project(root: Path, size: int) -> Path:
    root.mkdir(parents=True)
    (root / "shipped_noop.py").write_text("def noop(i=0):\n    return i\n")
    (root / "weights.bin").write_bytes(os.urandom(size))
    return root


def _latency(f, runs: int) -> float:
    """Median seconds of ``f.submit(i).result()``."""
    took = []
    for i in range(runs):
        began = time.perf_counter()
        f.submit(i).result(timeout=120)
        took.append(time.perf_counter() - began)
    return statistics.median(took)


def _first(root: Path) -> tuple[float, float]:
    """A new snapshot: (pack s, submit → result s of its first run: pack, upload, fetch,
    unpack, a worker started in it)."""
    began = time.perf_counter()
    Shipper().snapshot(root)
    packed = time.perf_counter() - began
    f = lakeshore.udf(queue=QUEUE, code=root)(_shipped)
    began = time.perf_counter()
    f.submit(0).result(timeout=300)
    return packed, time.perf_counter() - began


def _shipped(i: int = 0) -> int:
    return i


# Named as the shipped module's function (``shipped_noop:noop``): the daemon imports that one,
# from the snapshot; this process never imports it.
_shipped.__module__, _shipped.__qualname__, _shipped.__name__ = "shipped_noop", "noop", "noop"


def _rate(f, n: int) -> float:
    began = time.perf_counter()
    for i in range(n):
        f.submit(i)
    return n / (time.perf_counter() - began)


async def main_async(runs: int, submits: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ls-code-") as tmp:
        cache = Path(tmp) / "cache"
        async with server() as srv, Client(srv.api, srv.token) as client:
            await client.queue_add(QueueCreate(name=QUEUE))
            extra = ("--code-cache", str(cache))
            async with daemons(srv, QUEUE, 1, 1, extra):
                await wait_registered(client, ["bench-0"])
                configure(Client(srv.api, srv.token))
                try:
                    plain = lakeshore.udf(queue=QUEUE)(noop)
                    await asyncio.to_thread(_latency, plain, 3)  # the worker is warm
                    rows = []
                    for size in (1 * MIB, 50 * MIB):
                        root = _project(Path(tmp) / f"p{size}", size)
                        pack_s, first_s = await asyncio.to_thread(_first, root)
                        shipped = lakeshore.udf(queue=QUEUE, code=root)(_shipped)
                        cached = await asyncio.to_thread(_latency, shipped, runs)
                        bare = await asyncio.to_thread(_latency, plain, runs)
                        rows.append((size, pack_s, first_s, cached, bare))
                    small = lakeshore.udf(queue=QUEUE, code=Path(tmp) / f"p{MIB}")(_shipped)
                    rates: dict[bool, list[float]] = {True: [], False: []}
                    for _ in range(2):  # interleaved: the machine's drift hits both alike
                        for shipped_code, f in ((True, small), (False, plain)):
                            rates[shipped_code].append(await asyncio.to_thread(_rate, f, submits))
                    rate_code, rate_plain = max(rates[True]), max(rates[False])
                finally:
                    configure()
    print(f"Code shipping, {time.strftime('%Y-%m-%d %H:%M %Z')}: 1 daemon x 1, median of {runs}")
    print("| snapshot | pack s | first run s (pack+upload+fetch+unpack+worker) | cached run ms "
          "| plain run ms | cached − plain ms |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, pack_s, first_s, cached, bare in rows:
        print(f"| {size // MIB} MiB | {pack_s:.3f} | {first_s:.3f} | {1000 * cached:.1f} | "
              f"{1000 * bare:.1f} | {1000 * (cached - bare):+.1f} |")  # fmt: skip
    print(
        f"submit rate, {submits:,} f.submit one after another, best of 2 interleaved: "
        f"with code= {rate_code:,.0f}/s, "
        f"without {rate_plain:,.0f}/s ({rate_code / rate_plain:.2f}x)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20, help="runs per latency median [20]")
    p.add_argument("--submits", type=int, default=2000, help="submits per rate [2000]")
    args = p.parse_args()
    asyncio.run(main_async(args.runs, args.submits))


if __name__ == "__main__":
    main()
