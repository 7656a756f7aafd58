"""What a provider backend does, and which providers a namespace has.

A *provider row* (:class:`lakeshore.model.Provider`) names where daemons run; a *backend*
(:class:`Backend` below, one per :class:`~lakeshore.model.ProviderKind`) does the work
for every row of its kind. Every namespace has the built-in ``local`` provider, which is
not stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from lakeshore.errors import NotFound
from lakeshore.model import (
    BUILTIN_PROVIDER,
    DaemonAccess,
    Namespace,
    Provider,
    ProviderKind,
    Worker,
)

if TYPE_CHECKING:
    from lakeshore.store.port import ProviderRows

#: Called once when a launched daemon's process has ended:
#: ``(worker, returncode or None if it never started, reason, requested)`` where
#: ``requested`` means the provider was asked to stop it.
ExitCallback = Callable[[Worker, int | None, str, bool], None]
#: Called once a backend knows where a launched daemon runs: ``(worker, placement)``,
#: e.g. ``{"host": "gpu1", "pid": "4242"}``; it is kept on the worker row.
PlacedCallback = Callable[[Worker, dict[str, str]], None]
#: A daemon's NATS URL, identity and credential, minted for the worker row it runs.
AccessFor = Callable[[Worker], DaemonAccess]


class Backend(Protocol):
    """A backend that starts and stops daemons for the provider rows of one kind.

    The interface is small on purpose (check, launch N, stop one, list what it runs):
    ``docs/providers.md`` shows how to add a kind.
    """

    def check_config(self, config: dict[str, Any]) -> None:
        """Refuse a provider row's ``config`` this backend cannot use (at ``providers add``).

        Raises:
            Invalid: what is wrong with it and how to fix it.
        """

    def check_launch(
        self, provider: Provider, *, names: Sequence[str] = (), queues: Sequence[str] = ()
    ) -> None:
        """Refuse, before any worker row exists, a launch this backend cannot do.

        ``names`` and ``queues`` are the launch's (for a refusal that says what to run).

        Raises:
            LakeshoreError: why not, and what to do instead.
        """

    async def launch(self, provider: Provider, workers: list[Worker], access: AccessFor) -> None:
        """Start one daemon per row (rows already ``starting``).

        ``access(worker)`` is that daemon's way onto NATS (URL, its own credential, CA).
        A backend whose starts are slow (another machine, a batch system) may return before
        they are done: it then owns the work until it ends. Where a daemon runs is reported
        through the backend's placed callback, a daemon that cannot be started through its
        exit callback, not raised, so the others still run.
        """

    async def stop(self, worker: Worker, provider: Provider) -> bool:
        """Ask the daemon's process to stop (forcefully after a bound).

        ``worker.placement`` says where it runs, also after a restart of the control plane.

        Returns:
            Whether this backend found a process of ``worker`` to stop.
        """

    def daemons(self) -> list[Worker]:
        """The workers whose process this backend runs on this host now (the quotas count
        them; backends that start daemons elsewhere answer ``[]``)."""

    async def close(self) -> None:
        """Stop what this backend owns on this host within a few seconds (daemons it runs
        elsewhere keep running: a restarted control plane finds them again)."""


def builtin(ns: Namespace) -> Provider:
    """The namespace's built-in ``local`` provider (it exists as long as the namespace)."""
    return Provider(
        name=BUILTIN_PROVIDER, namespace=ns.name, kind=ProviderKind.LOCAL, created_at=ns.created_at
    )


async def find_provider(store: ProviderRows, ns: Namespace, name: str) -> Provider:
    """The provider ``name`` of ``ns``, built-in or stored.

    Raises:
        NotFound: no such provider.
    """
    if name == BUILTIN_PROVIDER:
        return builtin(ns)
    row = await store.get_provider(ns.name, name)
    if row is None:
        raise NotFound(
            f"no provider {name!r} in namespace {ns.name!r}; list them with "
            f"`lakeshore providers ls -n {ns.name}` or add one with "
            f"`lakeshore providers add {name} --kind local|external`"
        )
    return row


async def list_providers(store: ProviderRows, ns: Namespace) -> list[Provider]:
    """The built-in ``local`` first, then the stored rows by name."""
    return [builtin(ns), *await store.list_providers(ns.name)]
