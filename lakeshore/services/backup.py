"""BackupService: a consistent backup of the store, with the stream sequences it covers."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import msgspec

from lakeshore import __version__
from lakeshore.bus.port import Feed
from lakeshore.model import now
from lakeshore.model.backup import DATABASE_DIR, MANIFEST, BackupManifest, StreamCoverage
from lakeshore.store import Store
from lakeshore.store.backup import pack
from lakeshore.store.images import STATE_LOG


@dataclass(frozen=True, slots=True)
class Backup:
    """A backup tar the caller streams, then removes with :meth:`remove`."""

    path: Path
    manifest: BackupManifest

    def remove(self) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)


class BackupService:
    """Args:
    store: the store to export.
    events: the events feed (its progress tells the sequences the rows cover).
    streams: the names of the events stream and of the state stream, for the manifest.
    """

    def __init__(self, *, store: Store, events: Feed, streams: tuple[str, str]) -> None:
        self._store, self._events = store, events
        self._events_stream, self._state_stream = streams

    async def backup(self) -> Backup:
        """Export every table and write the manifest, as one tar.

        The streams' progress is read before the export: everything at or below the
        Recorder's ack floor then, and at or below the state stream's sequence the file
        had applied then, is in the exported rows.

        Raises:
            Unavailable: NATS did not answer, or the store could not export.
        """
        covered, last = await self._events.progress()
        applied = await self._store.log_position(STATE_LOG) or 0
        # A directory of the server user's alone (0700): the rows hold token hashes.
        work = Path(tempfile.mkdtemp(prefix="lakeshore-backup-"))
        try:
            tree = work / "backup"
            tree.mkdir()
            version, tables = await self._store.export_database(tree / DATABASE_DIR)
            manifest = BackupManifest(
                lakeshore_version=__version__,
                schema_version=version,
                created_at=now(),
                tables=tables,
                streams=[
                    StreamCoverage(stream=self._events_stream, covered_seq=covered, last_seq=last),
                    StreamCoverage(
                        stream=self._state_stream, covered_seq=applied, last_seq=applied
                    ),
                ],
            )
            (tree / MANIFEST).write_bytes(msgspec.json.format(msgspec.json.encode(manifest)))
            archive = work / "lakeshore-backup.tar"
            await asyncio.to_thread(pack, tree, archive)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        return Backup(path=archive, manifest=manifest)


__all__ = ["Backup", "BackupService"]
