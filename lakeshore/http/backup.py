"""The backup route: the store's rows as a tar of Parquet files and a manifest. Admin only.
Thin — authorise, call the BackupService, stream the file."""

from __future__ import annotations

from aiohttp import web

from lakeshore.errors import Forbidden
from lakeshore.http.auth import caller
from lakeshore.http.routes import Routes, stream_file
from lakeshore.http.state import BACKUP

routes = Routes()
#: The media type of the answer.
TAR = "application/x-tar"
#: The headers that tell a client what the backup holds.
TABLES_HEADER = "X-Lakeshore-Tables"
ROWS_HEADER = "X-Lakeshore-Rows"
SCHEMA_HEADER = "X-Lakeshore-Schema-Version"


@routes.route(
    "POST",
    "/v1/backup",
    "A consistent backup of every table (admin only): a tar of backup.json and the "
    f"Parquet files of DuckDB's EXPORT DATABASE ({TABLES_HEADER}, {ROWS_HEADER} tell the size)",
)
async def backup(request: web.Request) -> web.StreamResponse:
    if caller(request).org is not None:
        raise Forbidden(
            "only an admin token may take a backup: it holds every org's rows (and token "
            "hashes). Ask an admin (the token `lakeshore server` printed)"
        )
    done = await request.app[BACKUP].backup()
    try:
        tables = done.manifest.tables
        headers = {
            "Content-Type": TAR,
            "Content-Disposition": 'attachment; filename="lakeshore-backup.tar"',
            TABLES_HEADER: str(len(tables)),
            ROWS_HEADER: str(sum(tables.values())),
            SCHEMA_HEADER: str(done.manifest.schema_version),
        }
        return await stream_file(request, done.path, headers)
    finally:
        done.remove()
