"""``lakeshore history``: the invocation history as data, for your own notebooks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from lakeshore.cli.context import LakeshoreGroup, settings
from lakeshore.cli.params import DURATION, QUEUE_NAME
from lakeshore.sdk import Client


@click.group(cls=LakeshoreGroup)
def history() -> None:
    """Invocation history as data: export it as Parquet."""


@history.command("export")
@click.option("--since", type=DURATION, default="1d", show_default=True, help="How far back.")
@click.option("--queue", type=QUEUE_NAME, help="Only this queue's events.")
@click.option(
    "--to",
    "dest",
    required=True,
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="The Parquet file to write (replaced if it exists).",
)
def export(since: str, queue: str | None, dest: Path) -> None:
    """Save the namespace's invocation events (every column) as a Parquet file.

    Read it with DuckDB, pandas or polars: SELECT * FROM 'FILE.parquet'.
    """
    conf = settings()

    async def fetch() -> tuple[int, int]:
        async with Client(conf.api, conf.token, conf.namespace) as client:
            return await client.history_export(dest, since, queue)

    rows, size = asyncio.run(fetch())
    click.echo(f"wrote {rows} row(s), {size} bytes to {dest}")
