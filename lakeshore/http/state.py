"""Typed application state: one key per service, so a route module reads only what it uses."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from lakeshore.access import Access
from lakeshore.services import FleetService, JobService, QueueService
from lakeshore.services.backup import BackupService
from lakeshore.services.code import CodeService
from lakeshore.services.history import HistoryService
from lakeshore.services.logs import LogService

ACCESS: web.AppKey[Access] = web.AppKey("access", Access)
JOBS: web.AppKey[JobService] = web.AppKey("jobs", JobService)
QUEUES: web.AppKey[QueueService] = web.AppKey("queues", QueueService)
FLEET: web.AppKey[FleetService] = web.AppKey("fleet", FleetService)
HISTORY: web.AppKey[HistoryService] = web.AppKey("history", HistoryService)
BACKUP: web.AppKey[BackupService] = web.AppKey("backup", BackupService)
#: what is wrong with the control plane now (empty: healthy)
PROBLEMS: web.AppKey[Callable[[], list[str]]] = web.AppKey("problems")
#: the leader's epoch and the state stream's sequence its file has applied
REPLICA: web.AppKey[Callable[[], tuple[int, int]]] = web.AppKey("replica")
#: jobs' live logs
LOGS: web.AppKey[LogService] = web.AppKey("logs", LogService)
#: an org's code snapshots
CODE: web.AppKey[CodeService] = web.AppKey("code", CodeService)
