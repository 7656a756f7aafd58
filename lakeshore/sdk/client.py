"""The one HTTP client of Lakeshore: every route of ``docs/http-api.md``, typed.

Each typed method returns a :class:`Call`: ``await`` it for the model Struct, or
``await call.body()`` for the JSON exactly as the server sent it (what the CLI's ``-o json``
prints). Either way a non-2xx answer raises the :class:`~lakeshore.errors.LakeshoreError`
subclass the server named, rebuilt through :data:`~lakeshore.errors.ERRORS_BY_CODE`.

The routes are grouped by subject, one module each, and :class:`Client` combines them over
one :class:`~lakeshore.sdk.transport.Transport`: :mod:`~lakeshore.sdk.namespaces`
(namespaces and tokens), :mod:`~lakeshore.sdk.queues`, :mod:`~lakeshore.sdk.jobs`
(submitting and jobs) and :mod:`~lakeshore.sdk.fleet` (workers, daemons, providers, the
controller), :mod:`~lakeshore.sdk.history` (a queue's history per interval, the Parquet
export), :mod:`~lakeshore.sdk.code` (code snapshots).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lakeshore.sdk.backup import BackupRoutes
from lakeshore.sdk.call import Call
from lakeshore.sdk.code import CodeRoutes
from lakeshore.sdk.fastpath import FastPath
from lakeshore.sdk.fleet import FleetRoutes
from lakeshore.sdk.history import HistoryRoutes
from lakeshore.sdk.jobs import JobRoutes
from lakeshore.sdk.namespaces import NamespaceRoutes
from lakeshore.sdk.queues import QueueRoutes
from lakeshore.sdk.transport import api_path


class Client(
    NamespaceRoutes, QueueRoutes, JobRoutes, FleetRoutes, HistoryRoutes, BackupRoutes, CodeRoutes
):
    """An async client of one Lakeshore API.

    Args:
        api: base URL, e.g. ``http://127.0.0.1:8080`` (without ``/v1``); or the URLs of
            several control planes, as a sequence or separated by commas, among which the
            client follows the leader (see :mod:`~lakeshore.sdk.transport`).
        token: bearer token; ``None`` sends no ``Authorization`` header.
        namespace: the namespace of every namespaced call that does not name one.
        timeout_s: bound on each whole request, in seconds.
        failover_s: how long a request keeps looking for the leader (standbys answering,
            given URLs not reachable) before it gives up, in seconds.

    Raises:
        Invalid: an empty URL in ``api``.

    Use it as ``async with Client(...) as client:``; a session is opened on first use and
    closed by :meth:`close` (which the context manager calls).

    ``fast_path`` (with a token) lets :attr:`fast` submit and wait for results over NATS
    (see :mod:`~lakeshore.sdk.fastpath`); the typed routes always speak HTTP.
    """

    def __init__(
        self,
        api: str | Sequence[str],
        token: str | None,
        namespace: str = "default",
        timeout_s: float = 30,
        *,
        failover_s: float = 30,
        fast_path: bool = True,
    ) -> None:
        super().__init__(api, token, namespace, timeout_s, failover_s)
        #: submits and result waits over NATS when it can be reached, else HTTP
        self.fast = FastPath(self, token if fast_path else None)

    async def close(self) -> None:
        """Close the HTTP session and the fast path's connection; the client may be used
        again afterwards."""
        await self.fast.close()
        await super().close()

    # ---- service ------------------------------------------------------------------------

    def healthz(self) -> Call[dict[str, Any]]:
        """``{"status": "ok"}`` once the control plane is ready (no token needed)."""
        return Call(self, dict[str, Any], "GET", api_path("healthz"))

    def readyz(self) -> Call[dict[str, Any]]:
        """``{"role": "leader", …}`` from the leading control plane (no token needed); a
        standby answers ``not_leader``, which the client follows to the leader."""
        return Call(self, dict[str, Any], "GET", "/readyz")

    def openapi(self) -> Call[dict[str, Any]]:
        """The OpenAPI 3.1 document describing every route (no token needed)."""
        return Call(self, dict[str, Any], "GET", api_path("openapi.json"))


__all__ = ["Call", "Client"]
