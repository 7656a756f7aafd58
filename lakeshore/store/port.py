"""What the control plane's actors need of the row store: small ports, one per table.

:class:`lakeshore.store.duckdb.Store` implements every port against a DuckDB file;
:class:`lakeshore.store.memory.InMemoryStore` implements the same ones in memory for fast
actor tests. Both pass the contract tests of ``tests/store/test_store_contract.py``.

Each actor is typed with the ports it uses, so what it may touch is visible in its
signature: a queue actor cannot write a worker row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import msgspec
from msgspec import Struct

from lakeshore.fencing import Fence, Key
from lakeshore.model import (
    BatchTally,
    Cause,
    InvocationState,
    Job,
    JobDetail,
    Namespace,
    Provider,
    Queue,
    QueueEvent,
    Result,
    Worker,
)


class JobRecord(Struct, frozen=True, kw_only=True):
    """A job as the routes need it: what users see, plus the attempt tokens behind it."""

    job: JobDetail
    #: stream sequence of the invocation's message (from ``submitted``); what a cancel deletes
    seq: int | None = None
    #: epoch of the accepted ``succeeded``/``failed``: the key of its ``Result``
    result_epoch: int | None = None
    #: the detail of its ``submitted`` event: what a retry submits again
    submitted: dict[str, Any] | None = None
    #: its result, when the accepted outcome's event carried it (else in ``LS_RESULTS``)
    result: Result | None = None


class QueueActivity(Struct, frozen=True, kw_only=True):
    """A queue's recorded history over a recent window."""

    submitted: int = 0
    succeeded: int = 0
    failed: int = 0
    #: submitted → first started, over invocations first started in the window (seconds)
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None
    #: ``submitted_at`` of the oldest invocation pending now (at any time, not just the window)
    oldest_pending_at: datetime | None = None
    cancelled: int = 0


class StoredKey(Struct, frozen=True, kw_only=True):
    """What an idempotency key named: its invocation, and a digest of the body it came with."""

    invocation_id: str
    digest: str


class IdempotencyKeys(Protocol):
    """Durable idempotency keys of the queues (their actors are the only writers)."""

    async def get_keys(
        self, namespace: str, queue: str, keys: Sequence[str], since: datetime
    ) -> dict[str, StoredKey]:
        """The keys of ``queue`` stored at or after ``since``, by key."""

    async def put_keys(
        self, namespace: str, queue: str, keys: dict[str, StoredKey], at: datetime
    ) -> None:
        """Store keys, replacing expired ones of the same name, all or none."""

    async def forget_keys(
        self, namespace: str, queue: str, keys: Sequence[str] | None = None
    ) -> None:
        """Forget ``keys`` of a queue (``None``: all of them)."""

    async def prune_keys(self, before: datetime) -> int:
        """Forget keys stored before ``before``; answers how many."""

    async def recorded_ids(self, namespace: str, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` have a recorded event."""


class NamespaceRows(Protocol):
    async def get_namespace(self, name: str) -> Namespace | None: ...


class QueueRows(Protocol):
    async def insert_queue(self, q: Queue) -> None:
        """Raises ``AlreadyExists`` when the namespace has a queue of that name."""

    async def update_queue(self, q: Queue) -> None:
        """Overwrite the row ``(q.namespace, q.name)``; ``QueueNotFound`` if absent."""

    async def delete_queue(self, namespace: str, name: str) -> bool:
        """Delete the row (its events are kept); whether it existed."""

    async def get_queue(self, namespace: str, name: str) -> Queue | None: ...

    async def all_queues(self) -> list[Queue]:
        """Every queue of every namespace and state, by namespace then name."""


class WorkerRows(Protocol):
    async def upsert_worker(self, w: Worker) -> None:
        """Insert or overwrite by id; ``AlreadyExists`` when another id has the name."""

    async def list_workers(self, namespace: str | None = None) -> list[Worker]:
        """Workers of ``namespace`` (``None``: all), by namespace then name."""

    async def delete_worker(self, id: str) -> bool: ...

    async def update_liveness(self, workers: Sequence[Worker]) -> None:
        """Overwrite ``status``, ``current``, ``running``, ``resources`` and
        ``last_heartbeat`` of each worker (distinct
        ids) in one write, keeping every other column; a worker without a row is skipped."""

    async def scrub_queue_from_workers(self, namespace: str, queue: str) -> list[Worker]:
        """Remove ``queue`` from every worker's ``queues``; the changed rows, by name."""


class ProviderRows(Protocol):
    async def insert_provider(self, p: Provider) -> None:
        """Raises ``AlreadyExists`` when the namespace has a provider of that name."""

    async def get_provider(self, namespace: str, name: str) -> Provider | None: ...

    async def update_provider(self, p: Provider) -> None:
        """Replace the row's config and labels (kind and name never change)."""

    async def list_providers(self, namespace: str) -> list[Provider]:
        """The namespace's stored providers, by name."""

    async def delete_provider(self, namespace: str, name: str) -> Provider | None:
        """The deleted row as it was, or ``None``."""


class QueueEventLog(Protocol):
    """The append-only log of what happened to each queue (every owner appends its own)."""

    async def append_queue_event(
        self,
        namespace: str,
        queue: str,
        type: str,
        actor: str | None,
        detail: dict[str, Any] | None,
        ts: datetime | None = None,
    ) -> QueueEvent:
        """The stored event, its id increasing in append order."""

    async def list_queue_events(
        self,
        namespace: str,
        queue: str,
        limit: int = 50,
        verbose: bool = False,
        since: datetime | None = None,
    ) -> list[QueueEvent]:
        """The ``limit`` newest events, newest first; ``detail`` only when ``verbose``; only
        those at or after ``since`` when given (a naive ``since`` is taken as UTC)."""


class InvocationHistory(Protocol):
    """The Recorder's table: invocation events and the fences derived from them."""

    async def append_invocation_events(
        self, rows: Sequence[tuple[Any, ...] | msgspec.Struct], *, batches: Sequence[int] = ()
    ) -> int:
        """Append event rows and the event-message sequences they came from, atomically."""

    async def recorded_batches(self, seqs: Sequence[int]) -> set[int]:
        """Which of ``seqs`` were appended."""

    async def prune_recorded_batches(self, ack_floor: int, last_seq: int) -> None:
        """Forget sequences at or below ``ack_floor`` or above ``last_seq``."""

    async def events_position(self) -> int | None:
        """The greatest sequence ever appended (``None``: none), pruned ones included."""

    async def fences(self, ids: Sequence[str]) -> dict[Key, Fence]:
        """Fences of these invocation ids (absent: never recorded)."""

    async def unfinished_fences(self) -> dict[Key, Fence]:
        """Fences of every invocation without a terminal event."""

    async def max_invocation_id(self) -> str | None: ...


class QueueStore(QueueRows, ProviderRows, QueueEventLog, IdempotencyKeys, Protocol):
    """What the queue actors and the directory use."""


class RegistryStore(WorkerRows, NamespaceRows, QueueEventLog, Protocol):
    """What the WorkerRegistry uses (namespace rows: the org a quota counts in)."""


class LauncherStore(NamespaceRows, ProviderRows, QueueEventLog, Protocol):
    """What the Launcher uses."""


class ControllerStore(QueueRows, QueueEventLog, Protocol):
    """What the ControllerActor uses."""


class JobReads(Protocol):
    """The history's queries (DuckDB only: the in-memory twin serves actors, not reads)."""

    async def list_jobs(
        self,
        namespace: str,
        *,
        queue: str | None = None,
        state: InvocationState | Cause | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[Job]: ...

    async def get_job(self, namespace: str, invocation_id: str) -> JobRecord | None: ...

    async def batch_tallies(self, namespace: str, batches: list[str]) -> list[BatchTally]: ...

    async def queue_activity(
        self, namespace: str, queue: str, since: datetime, *, unfinished: bool = True
    ) -> QueueActivity: ...
