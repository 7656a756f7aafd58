"""The backup route: every table of the control plane as a tar (admin tokens only)."""

from __future__ import annotations

from pathlib import Path

from msgspec import Struct

from lakeshore.sdk.transport import Transport


class BackupSaved(Struct, frozen=True, kw_only=True):
    """What :meth:`BackupRoutes.backup` wrote."""

    path: Path
    #: tables in the backup
    tables: int
    #: rows of every table together
    rows: int
    #: size of the tar, in bytes
    bytes: int
    schema_version: int


class BackupRoutes(Transport):
    """A consistent backup of the control plane's rows."""

    async def backup(self, dest: Path) -> BackupSaved:
        """Save a backup of every table (Parquet files and ``backup.json``, as a tar) to
        ``dest``; ``lakeshore restore`` reads it.

        Raises:
            Forbidden: the token is not an admin token; ``dest`` is not created then.
            LakeshoreError: as :meth:`~lakeshore.sdk.transport.Transport.request`.
        """
        headers = await self.download("/v1/backup", dest, method="POST")
        return BackupSaved(
            path=dest,
            tables=int(headers.get("X-Lakeshore-Tables", "0")),
            rows=int(headers.get("X-Lakeshore-Rows", "0")),
            bytes=dest.stat().st_size,
            schema_version=int(headers.get("X-Lakeshore-Schema-Version", "0")),
        )


__all__ = ["BackupRoutes", "BackupSaved"]
