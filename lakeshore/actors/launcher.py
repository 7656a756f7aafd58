"""Launcher: validates daemon launches, has the rows made, and has a provider start them.

It owns the provider rows' writes and the backends (hence every daemon process the
control plane started). Worker rows stay the :class:`~lakeshore.actors.workers.WorkerRegistry`'s:
a launch asks it to ``Prepare`` the rows (status ``starting``), then the backend starts one
process per row; each daemon registers with the id it was given, which turns its row
``idle``. A row that never registers is marked ``lost`` by the registry's sweep after its
launch timeout, or at once when its process exits (see :func:`exit_reporter`).

A launch on a ``local`` provider must fit the org's ``local_daemons_per_host`` quota (the
local backend's own processes are counted), and its rows the org's ``daemons_per_org``
(the registry counts); the controller's launches are cut to what fits instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from msgspec import UNSET, Struct

from lakeshore import quotas
from lakeshore.actors.base import Actor, ActorRef
from lakeshore.actors.workers import Exited, ListWorkers, Placed, Prepare, new_worker_id
from lakeshore.errors import (
    AlreadyExists,
    Conflict,
    ImmutableField,
    Invalid,
    NamespaceNotFound,
    NotFound,
    WorkerNotFound,
)
from lakeshore.model import (
    BUILTIN_PROVIDER,
    DEFAULT_QUEUE,
    DaemonAccess,
    DaemonLaunch,
    Launched,
    Provider,
    ProviderCreate,
    ProviderKind,
    ProviderPatch,
    Worker,
    WorkerStatus,
    check_daemon_resources,
    check_depth,
    daemon_names,
    now,
    validate_name,
)
from lakeshore.providers import Backend, ExitCallback, PlacedCallback, capacity, find_provider
from lakeshore.quotas import DEFAULT_QUOTAS, Quotas
from lakeshore.store.port import LauncherStore

log = logging.getLogger(__name__)


class LaunchDaemons(Struct, frozen=True):
    """Start ``request.count`` daemons in ``namespace``; answers :class:`Launched`."""

    namespace: str
    request: DaemonLaunch
    actor: str | None = None
    #: the controller's launch: the rows (and daemons) are ``managed``, which the HTTP
    #: route never asks for, so a hand launch cannot pose as the controller's
    managed: bool = False


class StopDaemon(Struct, frozen=True):
    """Force a daemon this control plane started to stop (SIGTERM, then SIGKILL)."""

    namespace: str
    ref: str


class AddProvider(Struct, frozen=True):
    namespace: str
    body: ProviderCreate


class PatchProvider(Struct, frozen=True):
    namespace: str
    name: str
    body: ProviderPatch


class RemoveProvider(Struct, frozen=True):
    namespace: str
    name: str


class CountLocal(Struct, frozen=True):
    """How many daemons the ``local`` backend runs for ``org`` on this host now."""

    org: str


LauncherMsg = LaunchDaemons | StopDaemon | AddProvider | PatchProvider | RemoveProvider | CountLocal


class Launcher(Actor[LauncherMsg]):
    """The one writer of provider rows and owner of the provider backends.

    Args:
        store: the row store.
        workers: the WorkerRegistry.
        backends: one backend per provider kind; the caller closes them at shutdown.
        access: mints a launched daemon's NATS access: ``access(worker, org)``.
        quotas: the server's quotas (``local_daemons_per_host`` is checked here).
    """

    name = "launcher"

    def __init__(
        self,
        store: LauncherStore,
        workers: ActorRef[Any],
        backends: Mapping[ProviderKind, Backend],
        *,
        access: Callable[[Worker, str], DaemonAccess],
        quotas: Quotas = DEFAULT_QUOTAS,
    ) -> None:
        self._store = store
        self._workers = workers
        self._backends = dict(backends)
        self._access = access
        self._quotas = quotas
        #: namespace -> org, read once per namespace (a namespace never changes org)
        self._orgs: dict[str, str] = {}

    async def handle(self, msg: LauncherMsg) -> Any:
        match msg:
            case LaunchDaemons():
                return await self._launch(msg)
            case StopDaemon(namespace=ns, ref=ref):
                return await self._stop(ns, ref)
            case AddProvider(namespace=ns, body=body):
                return await self._add(ns, body)
            case PatchProvider(namespace=ns, name=name, body=body):
                return await self._patch(ns, name, body)
            case RemoveProvider(namespace=ns, name=name):
                return await self._remove(ns, name)
            case CountLocal(org=org):
                return await self._local_count(org)

    async def _launch(self, msg: LaunchDaemons) -> Launched:
        req, ns_name = msg.request, msg.namespace
        names = daemon_names(req.name, req.count)
        queues = launch_queues(req.queues)
        check_labels(req.labels)
        if req.resources is not None:
            check_daemon_resources(req.resources)
        ns = await self._store.get_namespace(ns_name)
        if ns is None:
            raise NamespaceNotFound(ns_name)
        provider = await find_provider(self._store, ns, req.provider)
        backend = self._backends[provider.kind]
        backend.check_launch(provider, names=names, queues=queues)
        if provider.kind is ProviderKind.LOCAL:
            have = await self._local_count(ns.org)
            fits = quotas.local_room(self._quotas, ns.org, have, len(names), partial=msg.managed)
            names = names[:fits]
        ts = now()
        rows = [
            Worker(
                id=new_worker_id(),
                name=name,
                namespace=ns_name,
                queues=queues,
                labels=_with_gpu_type(req.labels, provider),
                provider=provider.name,
                managed=msg.managed,
                status=WorkerStatus.STARTING,
                started_at=ts,
                launched_with=req.resources or capacity.launched_with(provider),
            )
            for name in names
        ]
        rows = await self._workers.ask(Prepare(ns_name, rows, partial=msg.managed))
        names = [w.name for w in rows]
        org = ns.org
        await backend.launch(provider, rows, lambda w: self._access(w, org))
        log.info("launched %d daemon(s) %s on %s in %s", len(rows), names, provider.name, ns_name)
        detail = {"provider": provider.name, "names": names, "ids": [w.id for w in rows]}
        for q in queues or [DEFAULT_QUEUE]:
            await self._store.append_queue_event(ns_name, q, "daemons_launched", msg.actor, detail)
        return Launched(workers=rows)

    async def _local_count(self, org: str) -> int:
        count = 0
        for w in self._backends[ProviderKind.LOCAL].daemons():
            if w.namespace not in self._orgs:
                row = await self._store.get_namespace(w.namespace)
                if row is None:
                    continue
                self._orgs[w.namespace] = row.org
            count += self._orgs[w.namespace] == org
        return count

    async def _stop(self, ns: str, ref: str) -> Worker:
        rows: list[Worker] = await self._workers.ask(ListWorkers(ns))
        worker = next((w for w in rows if w.id == ref), None) or next(
            (w for w in rows if w.name == ref), None
        )
        if worker is None:
            raise WorkerNotFound(ns, ref)
        namespace = await self._store.get_namespace(ns)
        if namespace is None:
            raise NamespaceNotFound(ns)
        try:
            provider = await find_provider(self._store, namespace, worker.provider)
        except NotFound:
            provider = None  # started by hand (``external``), or its provider was deleted
        if provider is not None and await self._backends[provider.kind].stop(worker, provider):
            return worker
        raise Conflict(
            f"worker {worker.name!r} runs no process this control plane started (provider "
            f"{worker.provider!r}); retire it with `lakeshore daemon stop {worker.name}`"
        )

    async def _add(self, ns: str, body: ProviderCreate) -> Provider:
        validate_name("provider", body.name)
        check_depth("provider config", body.config)
        if body.name == BUILTIN_PROVIDER:
            raise AlreadyExists("provider", body.name, " in every namespace (it is built in)")
        check_labels(body.labels)
        self._backends[body.kind].check_config(body.config)
        row = Provider(
            name=body.name,
            namespace=ns,
            kind=body.kind,
            config=dict(body.config),
            created_at=now(),
            labels=dict(body.labels),
        )
        await self._store.insert_provider(row)
        log.info("provider %s (%s) added to %s", row.name, row.kind, ns)
        return row

    async def _patch(self, ns: str, name: str, body: ProviderPatch) -> Provider:
        if name == BUILTIN_PROVIDER:
            raise Conflict(f"provider {name!r} is built in: it has no config or labels to change")
        old = await self._store.get_provider(ns, name)
        if old is None:
            raise NotFound(f"no provider {name!r} in namespace {ns!r}")
        if body.kind is not UNSET and body.kind != old.kind.value:
            raise ImmutableField(
                "kind",
                f"provider {name!r} is {old.kind.value}; a provider's kind is fixed at creation "
                "— add a provider with the kind you need",
            )
        if body.name is not UNSET and body.name != name:
            raise ImmutableField("name", "add a provider with the new name instead")
        changes: dict[str, Any] = {}
        if body.config is not UNSET:
            check_depth("provider config", body.config)
            self._backends[old.kind].check_config(body.config)
            changes["config"] = dict(body.config)
        if body.labels is not UNSET:
            check_labels(body.labels)
            changes["labels"] = dict(body.labels)
        new = msgspec.structs.replace(old, **changes)
        if new != old:
            await self._store.update_provider(new)
            log.info("provider %s of %s patched: %s", name, ns, sorted(changes))
        return new

    async def _remove(self, ns: str, name: str) -> Provider:
        if name == BUILTIN_PROVIDER:
            raise Conflict(
                f"provider {name!r} is built in: every namespace has it and it cannot be deleted"
            )
        row = await self._store.delete_provider(ns, name)
        if row is None:
            raise NotFound(f"no provider {name!r} in namespace {ns!r}")
        log.info("provider %s removed from %s", name, ns)
        return row


def launch_queues(queues: list[str]) -> list[str]:
    """The queues of a launch, deduplicated; ``default`` is refused (``[]`` is the default).

    Raises:
        Invalid / InvalidName: ``default`` or an invalid name among them.
    """
    for q in queues:
        if q == DEFAULT_QUEUE:
            raise Invalid(
                "'default' cannot be listed as a queue: the default queue is the empty list — "
                "launch without --queue to pull from it"
            )
        validate_name("queue", q)
    return list(dict.fromkeys(queues))


def check_labels(labels: dict[str, str]) -> None:
    """Labels travel as ``--label KEY=VALUE``: a key must be non-empty and without ``=``.

    Raises:
        Invalid: a key that could not be passed on.
    """
    for key in labels:
        if not key or "=" in key:
            raise Invalid(f"invalid label key {key!r}: it must be non-empty and without '='")


def exit_reporter(workers: ActorRef[Any]) -> ExitCallback:
    """The exit callback of a backend: tells the registry, which updates the worker's row."""

    def report(worker: Worker, returncode: int | None, reason: str, requested: bool) -> None:
        workers.tell(Exited(worker.namespace, worker.id, returncode, reason, requested))

    return report


def placement_reporter(workers: ActorRef[Any]) -> PlacedCallback:
    """The placed callback of a backend: the registry keeps the placement on the row."""

    def report(worker: Worker, placement: dict[str, str]) -> None:
        workers.tell(Placed(worker.namespace, worker.id, dict(placement)))

    return report


def _with_gpu_type(labels: dict[str, str], provider: Provider) -> dict[str, str]:
    """A launch's labels, with its provider's ``gpu_type`` unless the launch names one."""
    kind = capacity.daemon_gpus(provider).gpu_type
    if kind is None or "gpu_type" in labels:
        return dict(labels)
    return {**labels, "gpu_type": kind}
