"""Ingest rate of ``Store.append_invocation_events`` in batches of 1,000 rows.

Not a test. Run with ``python bench/store_ingest.py [--batches N]``; it prints rows/s over a
fresh DuckDB file in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lakeshore.store import open_store

BATCH = 1_000


def _batch(n: int, start: datetime) -> list[tuple[Any, ...]]:
    return [
        (
            "bench",
            "jobs",
            f"inv-{n:06}-{i:04}",
            start + timedelta(microseconds=i),
            ("claimed", "running", "succeeded")[i % 3],
            1,
            f"w-{i % 16}",
            1,
            {"duration_ms": i} if i % 3 == 2 else None,
        )
        for i in range(BATCH)
    ]


async def main(batches: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with await open_store(Path(tmp) / "bench.duckdb") as store:
            start = datetime.now(UTC)
            data = [_batch(n, start) for n in range(batches)]
            await store.append_invocation_events(data[0])
            t0 = time.perf_counter()
            for rows in data[1:]:
                await store.append_invocation_events(rows)
            elapsed = time.perf_counter() - t0
    rows_done = (batches - 1) * BATCH
    print(
        f"append_invocation_events: {rows_done:,} rows in {batches - 1} batches of {BATCH:,}: "
        f"{rows_done / elapsed:,.0f} rows/s ({elapsed / (batches - 1) * 1000:.1f} ms/batch)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=101, help="batches (the first warms up)")
    asyncio.run(main(parser.parse_args().batches))
