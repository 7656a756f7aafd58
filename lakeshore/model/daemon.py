"""Messages between a daemon and the control plane over NATS."""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct

from lakeshore.model.workers import WorkerStatus


class Heartbeat(Struct, frozen=True, kw_only=True):
    """Daemon → WorkerRegistry on ``ls.<ns>.hb.<worker-id>``, every ``heartbeat_s``."""

    worker_id: str
    namespace: str
    status: WorkerStatus
    #: ids of the invocations running now
    current: list[str] = []
    ts: datetime


class StealGrant(Struct, frozen=True, kw_only=True):
    """A lease to pull from another queue after the daemon's own (the controller's)."""

    queue: str
    until: datetime


class HeartbeatReply(Struct, frozen=True, kw_only=True):
    """The daemon's queues (``Worker.queues``: ``[]`` is the default queue) and orders."""

    queues: list[str]
    retire: bool = False
    steal: list[StealGrant] = []
    #: the registry did not know this worker (e.g. deleted): the daemon re-registers
    unknown: bool = False


class DaemonControl(Struct, frozen=True, kw_only=True):
    """Control plane → daemon on ``ls.<ns>.daemon.<worker-id>.ctl``."""

    #: stop this invocation if it runs here
    cancel: str | None = None
    #: finish the current invocations, then exit
    retire: bool = False
