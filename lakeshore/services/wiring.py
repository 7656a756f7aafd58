"""The typed set of services the control plane's front doors are handed.

Built once, fully, by the composition root (:mod:`lakeshore.plane`); the HTTP app and the
NATS gateway each take only the services they use from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lakeshore.access import Access
from lakeshore.services.backup import BackupService
from lakeshore.services.code import CodeService
from lakeshore.services.fleet import FleetService
from lakeshore.services.history import HistoryService
from lakeshore.services.jobs import JobService
from lakeshore.services.logs import LogService
from lakeshore.services.queues import QueueService


@dataclass(frozen=True, slots=True)
class Services:
    #: namespaces, tokens and who may act on what
    access: Access
    jobs: JobService
    queues: QueueService
    fleet: FleetService
    #: what is wrong now, one line each (empty: healthy) — NATS disconnected, actors down
    problems: Callable[[], list[str]]
    #: a queue's points per interval, the Parquet export
    history: HistoryService
    #: consistent backups of the store (``POST /v1/backup``)
    backup: BackupService
    #: this leader's epoch and how far its file has applied the state stream
    replica: Callable[[], tuple[int, int]] = lambda: (0, 0)
    #: jobs' live logs (``None``: not served)
    logs: LogService | None = None
    #: an org's code snapshots (``None``: not stored)
    code: CodeService | None = None
