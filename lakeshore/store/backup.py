"""Backups of the store: DuckDB's ``EXPORT DATABASE`` to Parquet, and the offline restore
with ``IMPORT DATABASE`` into a fresh file.

A backup is a tar of ``backup.json`` (:class:`~lakeshore.model.backup.BackupManifest`) and
``db/`` (the export: ``schema.sql``, ``load.sql``, one Parquet file per table). The export
runs on the store's own thread, inside one transaction, so it is one consistent snapshot
of every table, ordered with the writes around it. The restore runs with the server
stopped; it builds the new file beside the old one and swaps them only once the new one
holds every row the manifest counts, so a failure leaves the old file as it was.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import duckdb
import msgspec

from lakeshore import errors
from lakeshore.model.backup import DATABASE_DIR, MANIFEST, BackupManifest
from lakeshore.store import migrations as mig

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")

#: The store's file name inside a data dir.
STORE_FILE = "lakeshore.duckdb"
_TABLES = "SELECT table_name FROM duckdb_tables() WHERE NOT temporary ORDER BY table_name"
_manifest = msgspec.json.Decoder(BackupManifest)


def table_rows(con: Con) -> dict[str, int]:
    """Rows per table of the connected file, by table name."""
    names = [r[0] for r in con.execute(_TABLES).fetchall()]
    out = {}
    for name in names:
        row = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()
        assert row is not None
        out[name] = int(row[0])
    return out


def table_digests(con: Con) -> dict[str, tuple[int, int]]:
    """``(rows, order-free hash of every row)`` per table: equal for equal contents."""
    names = [r[0] for r in con.execute(_TABLES).fetchall()]
    out = {}
    for name in names:
        sql = f'SELECT count(*), coalesce(bit_xor(hash(t)), 0) FROM "{name}" AS t'
        row = con.execute(sql).fetchone()
        assert row is not None
        out[name] = (int(row[0]), int(row[1]))
    return out


def export_database(con: Con, dest: Path) -> tuple[int, dict[str, int]]:
    """Export every table of the connected file to ``dest`` (a new directory) as Parquet.

    Returns:
        The schema version and the rows per table, both read in the export's transaction.
    """
    con.execute("BEGIN TRANSACTION")
    try:
        version = mig.schema_version(con)
        rows = table_rows(con)
        con.execute(f"EXPORT DATABASE '{_quoted(dest)}' (FORMAT parquet)")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return version, rows


class BackupQueries:
    """The coroutine face of this module, mixed into the store."""

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[[Con], T]) -> T: ...

    async def export_database(self, dest: Path) -> tuple[int, dict[str, int]]:
        """:func:`export_database` on the store's thread, in order with its other calls."""
        return await self._run(lambda con: export_database(con, dest))


def pack(directory: Path, archive: Path) -> int:
    """Write ``directory``'s files into the tar ``archive``; returns its size in bytes."""
    with tarfile.open(archive, "w") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(directory)), recursive=False)
    return archive.stat().st_size


@dataclass(frozen=True, slots=True)
class Restored:
    """What :func:`restore` did."""

    manifest: BackupManifest
    #: the new store file
    path: Path
    #: rows per table of the new file
    tables: dict[str, int]
    #: where the previous store file went (``None``: there was none)
    moved_aside: Path | None


def read_manifest(archive: Path) -> BackupManifest:
    """The manifest of the backup tar ``archive``.

    Raises:
        errors.Invalid: not a tar, or no readable ``backup.json`` in it.
    """
    try:
        with tarfile.open(archive, "r") as tar:
            member = tar.extractfile(MANIFEST)
            if member is None:
                raise KeyError(MANIFEST)
            return _manifest.decode(member.read())
    except (OSError, tarfile.TarError, KeyError, msgspec.DecodeError) as e:
        raise errors.Invalid(
            f"{str(archive)!r} is not a lakeshore backup (a tar written by `lakeshore "
            f"backup`, with {MANIFEST}): {e}"
        ) from None


def restore(
    archive: Path,
    data_dir: Path,
    *,
    migrations: Sequence[mig.Migration] = mig.MIGRATIONS,
    at: datetime | None = None,
) -> Restored:
    """Replace the data dir's store with the backup ``archive``. The server must be stopped.

    Args:
        archive: a tar written by ``lakeshore backup``.
        data_dir: the data dir to restore into (created if missing).
        migrations: the known migrations; only tests pass anything but the default.
        at: the time that names the moved-aside file (default: now).

    Returns:
        What was restored, and where the previous file went.

    Raises:
        errors.Invalid: ``archive`` is no backup, or its rows did not all import.
        errors.SchemaTooNew: the backup was written by a newer Lakeshore; nothing changed.
        errors.Unavailable: DuckDB could not build the new file; nothing changed.
    """
    manifest = read_manifest(archive)
    if manifest.schema_version > len(migrations):
        where = f"in the backup {str(archive)!r}"
        raise errors.SchemaTooNew(where, manifest.schema_version, len(migrations))
    # The rows hold token hashes: the data dir and the file are the owner's only.
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = data_dir / STORE_FILE
    fresh = data_dir / f"{STORE_FILE}.restoring"
    work = Path(tempfile.mkdtemp(prefix=".restore-", dir=data_dir))
    try:
        with tarfile.open(archive, "r") as tar:
            tar.extractall(work, filter="data")
        _remove(fresh)
        try:
            tables = _import(work / DATABASE_DIR, fresh)
        except duckdb.Error as e:
            raise errors.Unavailable(f"cannot import the backup {str(archive)!r}: {e}") from e
        if tables != manifest.tables:
            raise errors.Invalid(
                f"the backup {str(archive)!r} imported rows {tables} but its manifest "
                f"counts {manifest.tables}; the backup is damaged"
            )
    except BaseException:
        _remove(fresh)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    moved = None
    if target.exists():
        stamp = (at or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
        moved = target.with_name(f"{STORE_FILE}.before-restore-{stamp}")
        target.rename(moved)
        wal = target.with_name(STORE_FILE + ".wal")
        if wal.exists():
            wal.rename(moved.with_name(moved.name + ".wal"))
    fresh.rename(target)
    return Restored(manifest=manifest, path=target, tables=tables, moved_aside=moved)


def _import(export: Path, path: Path) -> dict[str, int]:
    con = duckdb.connect(str(path))
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"IMPORT DATABASE '{_quoted(export)}'")
        con.execute("CHECKPOINT")
        return table_rows(con)
    finally:
        con.close()
        if path.exists():
            path.chmod(0o600)


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".wal").unlink(missing_ok=True)


def _quoted(path: Path) -> str:
    # EXPORT/IMPORT take no parameters: the path is a literal, its quotes doubled.
    return str(path).replace("'", "''")


__all__ = [
    "STORE_FILE",
    "BackupQueries",
    "Restored",
    "export_database",
    "pack",
    "read_manifest",
    "restore",
    "table_digests",
    "table_rows",
]
