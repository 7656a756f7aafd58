"""Worker (daemon) rows and membership edits. ``queues == []`` is the default queue."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from msgspec import Meta, Struct

from lakeshore.model.names import DEFAULT_QUEUE, MAX_ENTRIES, Labels
from lakeshore.model.resources import Capacity, DaemonResources, WorkerResources

#: The placement key of a daemon its provider still holds in a queue (a pending Slurm
#: job), set to ``"true"``: the registry does not time its launch until it is gone.
QUEUED = "queued"


def is_queued(placement: dict[str, str]) -> bool:
    """Whether a placement says the provider still holds the daemon in a queue."""
    return placement.get(QUEUED) == "true"


class WorkerStatus(StrEnum):
    #: launched, not yet heartbeating
    STARTING = "starting"
    #: heartbeating, nothing running
    IDLE = "idle"
    #: running an invocation
    BUSY = "busy"
    #: no heartbeat for lost_after_s
    LOST = "lost"
    #: finishing its current invocation, then exiting
    RETIRING = "retiring"
    #: exited
    STOPPED = "stopped"


class Member(Struct, frozen=True, kw_only=True):
    """A worker pulling from a queue right now, as shown by ``queues show``."""

    id: str
    name: str
    status: WorkerStatus
    queues: list[str]
    current: str | None = None
    last_heartbeat: datetime | None = None


class Worker(Struct, frozen=True, kw_only=True):
    """A daemon's row. ``queues == []`` is the default queue."""

    id: str
    name: str
    namespace: str
    queues: list[str] = []
    labels: dict[str, str] = {}
    provider: str = "external"
    managed: bool = False
    status: WorkerStatus = WorkerStatus.STARTING
    current: str | None = None
    last_heartbeat: datetime | None = None
    started_at: datetime
    #: where its provider runs it, e.g. ``{"host": "gpu1", "pid": "4242"}`` (ssh) or
    #: ``{"slurm_job": "17"}`` (slurm); how the provider finds it again to stop it.
    #: ``"queued": "true"`` (:data:`QUEUED`): its provider still holds it in a queue, so its
    #: launch timeout has not started
    placement: dict[str, str] = {}
    #: what its daemon has (detected at its start, or declared by ``--gpus/--cpus/--memory``)
    #: and what is free now; ``None``: a daemon from before resources were reported
    resources: WorkerResources | None = None
    #: the invocations it runs now (``current`` is the first of them)
    running: list[str] = []
    #: what its launch told it it has (``daemon launch --gpus/--cpus/--memory``), passed
    #: to its ``daemon run``; ``None``: it detects everything
    launched_with: DaemonResources | None = None


class WorkerEdited(Worker, frozen=True, kw_only=True):
    """The answer to a membership edit: the worker row, then what the edit warns of.

    A worker may be made a member of a queue that does not exist yet (it pulls from it once
    it is created), so that edit succeeds with a ``queue_not_found: …`` warning.
    """

    warnings: list[str] = []


class MembershipEdit(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    add: Annotated[list[str], Meta(max_length=MAX_ENTRIES)] = []
    remove: Annotated[list[str], Meta(max_length=MAX_ENTRIES)] = []


class WorkerPatch(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A change of a running worker's row (``None``: left as it is)."""

    #: its labels from now on (replaced whole: compose adopts a daemon by labelling it)
    labels: Labels | None = None


class WorkerRegister(Struct, frozen=True, kw_only=True):
    """A daemon announcing itself (launched daemons carry the id they were given)."""

    namespace: str
    name: str
    id: str | None = None
    queues: list[str] = []
    labels: dict[str, str] = {}
    provider: str = "external"
    managed: bool = False
    #: what the daemon has (its free resources are all of it at registration)
    resources: Capacity | None = None


def serves(worker: Worker, queue: str) -> bool:
    """Whether ``worker`` pulls from ``queue`` by its membership array.

    ``[]`` is the default queue; a literal ``default`` entry is accepted too.
    """
    if queue == DEFAULT_QUEUE:
        return not worker.queues or DEFAULT_QUEUE in worker.queues
    return queue in worker.queues
