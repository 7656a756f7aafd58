"""``lakeshore backup`` and ``lakeshore restore``: the control plane's rows to a file and
back.

``backup`` is a client like every other command (``POST /v1/backup``). ``restore`` runs
with the server stopped, on the data dir itself: like ``server``, it opens DuckDB, and so
imports the store only when it is invoked.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from lakeshore.cli.context import LakeshoreCommand, settings
from lakeshore.sdk import Client
from lakeshore.sdk.backup import BackupSaved


@click.command("backup", cls=LakeshoreCommand)
@click.option(
    "--to",
    "dest",
    required=True,
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="The tar file to write (replaced if it exists).",
)
def backup(dest: Path) -> None:
    """Save a consistent backup of every table (admin token only) as a tar: the Parquet
    files of DuckDB's EXPORT DATABASE and backup.json (versions, time, stream sequences).

    Restore it with `lakeshore restore FILE.tar --data-dir DIR`, the server stopped.
    """
    conf = settings()

    async def fetch() -> BackupSaved:
        async with Client(conf.api, conf.token, conf.namespace) as client:
            return await client.backup(dest)

    saved = asyncio.run(fetch())
    click.echo(
        f"wrote {saved.tables} table(s), {saved.rows} row(s), {saved.bytes} bytes to {dest} "
        f"(schema version {saved.schema_version})"
    )


@click.command("restore", cls=LakeshoreCommand)
@click.argument(
    "archive", type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path)
)
@click.option(
    "--data-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The data dir of the (stopped) server to restore into; created if missing.",
)
def restore(archive: Path, data_dir: Path) -> None:
    """Replace the data dir's store with a backup, the server stopped.

    The current lakeshore.duckdb, if any, is moved aside to
    lakeshore.duckdb.before-restore-<time>; on any failure it stays as it was.
    """
    # Imported here: DuckDB and the store, which no client command needs.
    from lakeshore.cli.server import refuse_a_store_in_use
    from lakeshore.store.backup import restore as restore_store

    refuse_a_store_in_use(data_dir)
    done = restore_store(archive, data_dir)
    m = done.manifest
    click.echo(
        f"restored {len(done.tables)} table(s), {sum(done.tables.values())} row(s) into "
        f"{done.path} (backup of {m.created_at.isoformat()} by lakeshore "
        f"{m.lakeshore_version}, schema version {m.schema_version})"
    )
    for table, rows in sorted(done.tables.items()):
        click.echo(f"  {table}: {rows}")
    for s in m.streams:
        click.echo(f"  stream {s.stream}: covered to sequence {s.covered_seq} of {s.last_seq}")
    if done.moved_aside is not None:
        click.echo(f"the previous store was moved to {done.moved_aside}")
