"""What a provider backend does, and which providers a namespace has.

A *provider row* (:class:`lakeshore.model.Provider`) names where daemons run; a *backend*
(:class:`Backend` below, one per :class:`~lakeshore.model.ProviderKind`) does the work
for every row of its kind. Every namespace has the built-in ``local`` provider, which is
not stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

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
#: A daemon's NATS URL, identity and credential, minted for the worker row it runs.
AccessFor = Callable[[Worker], DaemonAccess]


class Backend(Protocol):
    """A backend that starts and stops daemons for the provider rows of one kind."""

    def check_launch(self, provider: Provider) -> None:
        """Refuse, before any worker row exists, a launch this backend cannot do.

        Raises:
            LakeshoreError: why not, and what to do instead.
        """

    async def launch(self, workers: list[Worker], access: AccessFor) -> None:
        """Start one daemon per row (rows already ``starting``); returns once started.

        ``access(worker)`` is that daemon's way onto NATS (URL, its own credential, CA).

        A daemon that cannot be started is reported through the backend's exit callback,
        not raised, so the others still run.
        """

    async def stop(self, worker_id: str) -> bool:
        """Ask the daemon's process to stop (forcefully after a bound).

        Returns:
            Whether this backend runs a process for ``worker_id``.
        """

    def daemons(self) -> list[Worker]:
        """The workers whose process this backend runs now (the quotas count them)."""

    async def close(self) -> None:
        """Stop every process this backend started, within a few seconds."""


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
