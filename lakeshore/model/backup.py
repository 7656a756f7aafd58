"""What a backup holds besides its Parquet files: the ``backup.json`` manifest."""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct

#: The manifest's name inside a backup (next to the ``db/`` directory of the export).
MANIFEST = "backup.json"
#: The directory of DuckDB's ``EXPORT DATABASE`` inside a backup.
DATABASE_DIR = "db"


class StreamCoverage(Struct, frozen=True, kw_only=True):
    """How far into a JetStream stream the rows of a backup reach."""

    stream: str
    #: every message at or below this sequence is in the backup's rows (the Recorder's
    #: ack floor, read before the export began)
    covered_seq: int
    #: the stream's last sequence when the backup began (messages above ``covered_seq`` are
    #: replayed from the stream by the Recorder of a restored plane, while kept)
    last_seq: int


class BackupManifest(Struct, frozen=True, kw_only=True):
    """``backup.json``: what wrote the backup, when, and what it covers."""

    lakeshore_version: str
    #: the store's schema version (:mod:`lakeshore.store.migrations`); a restore refuses a
    #: backup newer than the Lakeshore restoring it
    schema_version: int
    created_at: datetime
    #: rows per table, as exported
    tables: dict[str, int]
    streams: list[StreamCoverage] = []
