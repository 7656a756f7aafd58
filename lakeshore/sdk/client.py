"""The one HTTP client of Lakeshore: every route of ``docs/http-api.md``, typed.

Each typed method returns a :class:`Call`: ``await`` it for the model Struct, or
``await call.body()`` for the JSON exactly as the server sent it (what the CLI's ``-o json``
prints). Either way a non-2xx answer raises the :class:`~lakeshore.errors.LakeshoreError`
subclass the server named, rebuilt through :data:`~lakeshore.errors.ERRORS_BY_CODE`.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import aiohttp
import msgspec

from lakeshore import errors
from lakeshore.controller.status import ControllerStatus
from lakeshore.errors import LakeshoreError
from lakeshore.model import (
    DaemonLaunch,
    InvocationSubmit,
    Job,
    JobDetail,
    Launched,
    MembershipEdit,
    Namespace,
    NamespaceCreate,
    Provider,
    ProviderCreate,
    ProviderKind,
    Queue,
    QueueCreate,
    QueueDetail,
    QueueEvent,
    QueuePatch,
    QueueStats,
    Result,
    SubmitAnswer,
    SubmitBatch,
    Token,
    TokenCreate,
    TokenCreated,
    Worker,
)

T = TypeVar("T")

#: HTTP status → error class, for an error body whose code this client does not know.
_ERRORS_BY_STATUS: dict[int, type[LakeshoreError]] = {
    cls.http_status: cls
    for cls in (
        errors.Invalid,
        errors.Unauthorized,
        errors.Forbidden,
        errors.NotFound,
        errors.Conflict,
        errors.TooLarge,
        errors.QueueFull,
        errors.Unavailable,
        errors.Internal,
    )
}
_EXCERPT_CHARS = 200


def _path(*segments: str) -> str:
    """``/v1/<segments>``, each segment percent-quoted (``/`` included) so a name is one segment."""
    return "/v1/" + "/".join(quote(s, safe="") for s in segments)


def _error_from(status: int, raw: bytes, url: str) -> LakeshoreError:
    """The error a non-2xx answer stands for (see :meth:`Client.request`)."""
    try:
        detail = msgspec.json.decode(raw)["error"]
        code, message = detail["code"], detail["message"]
    except (msgspec.DecodeError, KeyError, TypeError):
        excerpt = " ".join(raw.decode("utf-8", "replace").split())[:_EXCERPT_CHARS]
        return LakeshoreError(f"http {status} from {url}: {excerpt or '(empty body)'}")
    cls = errors.ERRORS_BY_CODE.get(code) or _ERRORS_BY_STATUS.get(status, LakeshoreError)
    return cls.from_wire(message)


def _reason(exc: aiohttp.ClientError) -> str:
    """Why a connection failed, in a few words ("connection refused")."""
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, OSError) and os_error.errno and os_error.errno > 0:
        return os.strerror(os_error.errno).lower()
    if isinstance(os_error, OSError) and os_error.strerror:
        return os_error.strerror.lower()
    return str(exc) or type(exc).__name__


class Call(Generic[T]):
    """One request, sent when awaited.

    ``await call`` returns the answer decoded into ``T``; ``await call.body()`` returns the
    decoded JSON as the server sent it, and :meth:`decode` turns such a body into ``T``, so
    a caller can have both from one request.
    """

    __slots__ = ("_client", "_type", "_key", "method", "path", "_json", "_params")

    def __init__(
        self,
        client: Client,
        type_: Any,
        method: str,
        path: str,
        *,
        key: str | None = None,
        json: Any = None,
        params: dict[str, str | int] | None = None,
    ) -> None:
        self._client, self._type, self._key = client, type_, key
        #: the HTTP method and the path (under the API's base URL) this call requests
        self.method, self.path = method, path
        self._json, self._params = json, params

    async def body(self) -> Any:
        """Send the request; the decoded JSON answer. Raises as :meth:`Client.request`."""
        return await self._client.request(
            self.method, self.path, json=self._json, params=self._params
        )

    def decode(self, body: Any) -> T:
        """Convert a body of this route into ``T`` (unwrapping a list answer's key).

        Raises:
            LakeshoreError: the body does not have this route's shape (a server of another
                version, or not a Lakeshore API at all).
        """
        try:
            return msgspec.convert(body[self._key] if self._key else body, self._type)
        except (msgspec.ValidationError, KeyError, TypeError) as exc:
            raise LakeshoreError(
                f"unexpected answer to {self.method} {self.path} from {self._client.api}: {exc}"
            ) from None

    async def _typed(self) -> T:
        return self.decode(await self.body())

    def __await__(self) -> Generator[Any, None, T]:
        return self._typed().__await__()


class _ResultCall(Call["Result | Job"]):
    """The result route answers two shapes: a finished ``Result`` (which always carries
    ``ok``) or, while unfinished, the ``Job`` (which never does)."""

    __slots__ = ()

    def decode(self, body: Any) -> Result | Job:
        finished = not isinstance(body, dict) or "ok" in body
        shape: Call[Any] = Call(self._client, Result if finished else Job, self.method, self.path)
        return shape.decode(body)


class Client:
    """An async client of one Lakeshore API.

    Args:
        api: base URL, e.g. ``http://127.0.0.1:8080`` (without ``/v1``).
        token: bearer token; ``None`` sends no ``Authorization`` header.
        namespace: the namespace of every namespaced call that does not name one.
        timeout_s: bound on each whole request, in seconds.

    Use it as ``async with Client(...) as client:``; a session is opened on first use and
    closed by :meth:`close` (which the context manager calls).
    """

    def __init__(
        self, api: str, token: str | None, namespace: str = "default", timeout_s: float = 30
    ) -> None:
        self.api = api.rstrip("/")
        self.namespace = namespace
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session; the client may be used again afterwards."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str | int] | None = None,
    ) -> Any:
        """Send one request and return the decoded JSON answer (``None`` for an empty one).

        Args:
            method: HTTP method.
            path: absolute path under the API, e.g. ``/v1/healthz``.
            json: request body: builtins or a model Struct (``UNSET`` fields are omitted).
            params: query parameters.

        Raises:
            LakeshoreError: the subclass named by the error body's ``code`` (an unknown code:
                the class of the HTTP status; an unparseable body: ``LakeshoreError`` with
                the status and an excerpt).
            Unavailable: the API cannot be reached or did not answer within ``timeout_s``.
            Invalid: ``api`` is not an http(s) URL.
        """
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=aiohttp.ClientTimeout(total=self.timeout_s)
            )
        url = self.api + path
        data = None if json is None else msgspec.json.encode(json)
        headers = None if data is None else {"Content-Type": "application/json"}
        try:
            async with self._session.request(
                method, url, data=data, params=params, headers=headers
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
            raise errors.Invalid(
                f"invalid api url {self.api!r} ({exc}); pass --api http://HOST:PORT"
            ) from None
        except TimeoutError:
            raise errors.Unavailable(
                f"the lakeshore api at {self.api} did not answer {method} {path} "
                f"within {self.timeout_s:g}s"
            ) from None
        except aiohttp.ClientError as exc:
            raise errors.Unavailable(
                f"cannot reach the lakeshore api at {self.api} ({_reason(exc)}); start one with "
                "`lakeshore server` or point --api (or LAKESHORE_API) at a running one"
            ) from None
        if not 200 <= status < 300:
            raise _error_from(status, raw, url)
        if not raw:
            return None
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError:
            raise _error_from(status, raw, url) from None

    def _ns(self, namespace: str | None, *segments: str) -> str:
        return _path("namespaces", namespace or self.namespace, *segments)

    # ---- service ------------------------------------------------------------------------

    def healthz(self) -> Call[dict[str, Any]]:
        """``{"status": "ok"}`` once the control plane is ready (no token needed)."""
        return Call(self, dict[str, Any], "GET", _path("healthz"))

    def openapi(self) -> Call[dict[str, Any]]:
        """The OpenAPI 3.1 document describing every route (no token needed)."""
        return Call(self, dict[str, Any], "GET", _path("openapi.json"))

    # ---- namespaces and tokens ----------------------------------------------------------

    def namespaces_add(self, name: str, org: str | None = None) -> Call[Namespace]:
        """Create a namespace in ``org`` (default: the caller's org)."""
        body = NamespaceCreate(name=name, org=org)
        return Call(self, Namespace, "POST", _path("namespaces"), json=body)

    def namespaces_ls(self) -> Call[list[Namespace]]:
        """The namespaces the token may see."""
        return Call(self, list[Namespace], "GET", _path("namespaces"), key="namespaces")

    def namespaces_show(self, name: str | None = None) -> Call[Namespace]:
        """One namespace (default: the client's)."""
        return Call(self, Namespace, "GET", self._ns(name))

    def tokens_create(
        self, description: str = "", *, namespace: str | None = None
    ) -> Call[TokenCreated]:
        """Issue a token for the namespace; its secret is in the answer and nowhere else."""
        body = TokenCreate(description=description)
        return Call(self, TokenCreated, "POST", self._ns(namespace, "tokens"), json=body)

    def tokens_ls(self, *, namespace: str | None = None) -> Call[list[Token]]:
        """The namespace's tokens (ids and descriptions, never secrets)."""
        return Call(self, list[Token], "GET", self._ns(namespace, "tokens"), key="tokens")

    def tokens_revoke(self, token_id: str, *, namespace: str | None = None) -> Call[Token]:
        """Revoke a token; the answer is the revoked token."""
        return Call(self, Token, "DELETE", self._ns(namespace, "tokens", token_id))

    # ---- queues -------------------------------------------------------------------------

    def queues_ls(
        self, state: str | None = None, *, namespace: str | None = None
    ) -> Call[list[Queue]]:
        """Every queue of every namespace in the org (each with its ``namespace``)."""
        params = {"state": state} if state else None
        path = self._ns(namespace, "queues")
        return Call(self, list[Queue], "GET", path, key="queues", params=params)

    def queue_add(self, body: QueueCreate, *, namespace: str | None = None) -> Call[Queue]:
        """Create a queue."""
        return Call(self, Queue, "POST", self._ns(namespace, "queues"), json=body)

    def queue_show(self, name: str, *, namespace: str | None = None) -> Call[QueueDetail]:
        """A queue row with its current members."""
        return Call(self, QueueDetail, "GET", self._ns(namespace, "queues", name))

    def queue_patch(
        self, name: str, body: dict[str, Any] | QueuePatch, *, namespace: str | None = None
    ) -> Call[Queue]:
        """Change fields of a queue; a partial ``elasticity`` is merged into the current one."""
        return Call(self, Queue, "PATCH", self._ns(namespace, "queues", name), json=body)

    def _transition(self, name: str, verb: str, namespace: str | None) -> Call[Queue]:
        return Call(self, Queue, "POST", self._ns(namespace, "queues", name, verb))

    def queue_drain(self, name: str, *, namespace: str | None = None) -> Call[Queue]:
        """Stop admitting work; what is queued and in flight finishes."""
        return self._transition(name, "drain", namespace)

    def queue_archive(self, name: str, *, namespace: str | None = None) -> Call[Queue]:
        """Soft-delete: keep the row, admit nothing."""
        return self._transition(name, "archive", namespace)

    def queue_unarchive(self, name: str, *, namespace: str | None = None) -> Call[Queue]:
        """Back to ``active`` from ``draining`` or ``archived``."""
        return self._transition(name, "unarchive", namespace)

    def queue_rm(
        self, name: str, force: bool = False, *, namespace: str | None = None
    ) -> Call[dict[str, Any]]:
        """Delete a queue; ``force`` first scrubs it from every member's ``queues``.

        The answer is ``{"deleted": name, "namespace": ns, "scrubbed": [worker names]}``.
        """
        params = {"force": "true"} if force else None
        path = self._ns(namespace, "queues", name)
        return Call(self, dict[str, Any], "DELETE", path, params=params)

    def queue_events(
        self,
        name: str,
        verbose: bool = False,
        limit: int | None = None,
        *,
        namespace: str | None = None,
    ) -> Call[list[QueueEvent]]:
        """Recorded changes of a queue, newest first; ``verbose`` adds each one's detail."""
        params: dict[str, str | int] = {"verbose": "true"} if verbose else {}
        if limit is not None:
            params["limit"] = limit
        path = self._ns(namespace, "queues", name, "events")
        return Call(self, list[QueueEvent], "GET", path, key="events", params=params or None)

    def queue_stats(self, name: str, *, namespace: str | None = None) -> Call[QueueStats]:
        """Counters of a queue: daemons, utilisation, pending and running work."""
        return Call(self, QueueStats, "GET", self._ns(namespace, "queues", name, "stats"))

    # ---- invocations --------------------------------------------------------------------

    def submit(
        self,
        queue: str,
        invocations: InvocationSubmit | list[InvocationSubmit],
        *,
        wait_s: float | None = None,
        namespace: str | None = None,
    ) -> Call[SubmitAnswer]:
        """Submit one invocation or a batch (at most 10,000); the answer has the ids.

        Args:
            wait_s: how long a ``block`` queue may wait for room, in seconds.
        """
        body: Any = (
            SubmitBatch(invocations=invocations) if isinstance(invocations, list) else invocations
        )
        params: dict[str, str | int] | None = (
            {"wait_s": str(wait_s)} if wait_s is not None else None
        )
        path = self._ns(namespace, "queues", queue, "invocations")
        return Call(self, SubmitAnswer, "POST", path, json=body, params=params)

    # ---- jobs ---------------------------------------------------------------------------

    def jobs_ls(
        self,
        queue: str | None = None,
        state: str | None = None,
        limit: int | None = None,
        after: str | None = None,
        *,
        namespace: str | None = None,
    ) -> Call[list[Job]]:
        """Invocations of the namespace, newest first.

        Args:
            queue: only this queue's.
            state: only those in this state (``pending``, ``running``, ``succeeded``, …).
            limit: at most this many, 1–1000 (the server's default is 100).
            after: the last id of the previous page, to read the next one.
        """
        given = {"queue": queue, "state": state, "limit": limit, "after": after}
        params: dict[str, str | int] = {k: v for k, v in given.items() if v is not None}
        path = self._ns(namespace, "jobs")
        return Call(self, list[Job], "GET", path, key="jobs", params=params or None)

    def job_show(self, job_id: str, *, namespace: str | None = None) -> Call[JobDetail]:
        """One invocation with its attempts."""
        return Call(self, JobDetail, "GET", self._ns(namespace, "jobs", job_id))

    def job_result(
        self, job_id: str, wait_s: float | None = None, *, namespace: str | None = None
    ) -> Call[Result | Job]:
        """An invocation's outcome: a :class:`Result` once finished, else its :class:`Job`.

        A cancelled or dropped invocation has finished: its ``Result`` has ``ok`` false and
        the error type ``lakeshore.Cancelled`` or ``lakeshore.Dropped``. A ``Job`` answer
        (HTTP 202) means it had not finished when ``wait_s`` ran out.

        Args:
            wait_s: how long the server may hold the request for the invocation to finish,
                0–600 seconds (server default 0). Keep it below the client's ``timeout_s``.
        """
        params: dict[str, str | int] | None = (
            {"wait_s": f"{wait_s:.3f}"} if wait_s is not None else None
        )
        path = self._ns(namespace, "jobs", job_id, "result")
        return _ResultCall(self, Result, "GET", path, params=params)

    def job_cancel(self, job_id: str, *, namespace: str | None = None) -> Call[Job]:
        """Cancel an invocation: a pending one is removed (state ``cancelled``), a running
        one's daemon is told to stop it (the answer still shows ``running``).

        Raises:
            Conflict: the invocation had already finished.
        """
        return Call(self, Job, "POST", self._ns(namespace, "jobs", job_id, "cancel"))

    # ---- workers ------------------------------------------------------------------------

    def workers_ls(self, *, namespace: str | None = None) -> Call[list[Worker]]:
        """The namespace's workers."""
        path = self._ns(namespace, "workers")
        return Call(self, list[Worker], "GET", path, key="workers")

    def worker_show(self, ref: str, *, namespace: str | None = None) -> Call[Worker]:
        """One worker, by id or name."""
        return Call(self, Worker, "GET", self._ns(namespace, "workers", ref))

    def worker_retire(self, ref: str, *, namespace: str | None = None) -> Call[Worker]:
        """Retire a worker: it finishes its current run, then exits."""
        return Call(self, Worker, "DELETE", self._ns(namespace, "workers", ref))

    def worker_queues(
        self,
        ref: str,
        add: list[str] | None = None,
        remove: list[str] | None = None,
        *,
        namespace: str | None = None,
    ) -> Call[Worker]:
        """Edit a worker's membership; it takes effect on the worker's next poll."""
        body = MembershipEdit(add=list(add or []), remove=list(remove or []))
        return Call(self, Worker, "POST", self._ns(namespace, "workers", ref, "queues"), json=body)

    # ---- daemons and providers ----------------------------------------------------------

    def daemons_launch(self, body: DaemonLaunch, *, namespace: str | None = None) -> Call[Launched]:
        """Launch daemons on a provider; the answer's rows are ``starting`` until each
        daemon registers (poll :meth:`workers_ls` or :meth:`worker_show`).

        Raises:
            Conflict: a name is held by a live worker, or the provider is ``external``
                (its daemons are started by hand with ``lakeshore daemon run``).
        """
        return Call(self, Launched, "POST", self._ns(namespace, "daemons"), json=body)

    def providers_add(
        self,
        name: str,
        kind: ProviderKind | str,
        config: dict[str, Any] | None = None,
        *,
        namespace: str | None = None,
    ) -> Call[Provider]:
        """Add a provider (an unknown namespace is created in the caller's org)."""
        body = ProviderCreate(name=name, kind=ProviderKind(kind), config=dict(config or {}))
        return Call(self, Provider, "POST", self._ns(namespace, "providers"), json=body)

    def providers_ls(self, *, namespace: str | None = None) -> Call[list[Provider]]:
        """The namespace's providers, the built-in ``local`` first."""
        path = self._ns(namespace, "providers")
        return Call(self, list[Provider], "GET", path, key="providers")

    def providers_show(self, name: str, *, namespace: str | None = None) -> Call[Provider]:
        """One provider."""
        return Call(self, Provider, "GET", self._ns(namespace, "providers", name))

    def providers_rm(self, name: str, *, namespace: str | None = None) -> Call[Provider]:
        """Delete a provider; the built-in ``local`` cannot be deleted (409)."""
        return Call(self, Provider, "DELETE", self._ns(namespace, "providers", name))

    # ---- controller ---------------------------------------------------------------------

    def controller_status(self, *, namespace: str | None = None) -> Call[ControllerStatus]:
        """The controller's last tick in the namespace: per queue and pool, the desired
        and actual managed daemons, those launching and the reason; the live steal leases.
        """
        return Call(self, ControllerStatus, "GET", self._ns(namespace, "controller"))
