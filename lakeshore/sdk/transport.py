"""The transport under every route of :class:`~lakeshore.sdk.client.Client`: one aiohttp
session, one way to send a request, and the decoding of an error answer.

A non-2xx answer raises the :class:`~lakeshore.errors.LakeshoreError` subclass the server
named, rebuilt through :data:`~lakeshore.errors.ERRORS_BY_CODE`.

The client may be given several API URLs (the replicas of a highly available control
plane) and follows the leader among them: a standby answers ``503 not_leader`` (naming the
leader when it knows it) and a connection that could not be opened never reached a server,
so in both cases the request was not applied and is sent again elsewhere, whatever its
method, until ``failover_s`` has passed. Any other failure is raised as it is: a request
that timed out or lost its connection may have been applied.

Given one URL, a refused connection is said at once while that server never answered this
client (nothing runs there: a wrong URL, a server not started); once it has answered, a
refused connection is a control plane restarting, and the request is sent again until it
is back, for ``failover_s`` at most.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

import aiohttp
import msgspec

from lakeshore import errors
from lakeshore.errors import LakeshoreError
from lakeshore.model import ErrorBody

log = logging.getLogger(__name__)

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
#: Request bodies larger than this are streamed (bytes).
_STREAM_BODY_BYTES = 512 * 1024
#: The content type of a JSON request body.
JSON = "application/json"
#: Longest wait before asking again after ``not_leader``, whatever ``Retry-After`` says (s).
_MAX_RETRY_AFTER_S = 0.5
#: Wait after every given URL in turn could not be connected to (seconds).
_ROUND_PAUSE_S = 0.25
_error_body = msgspec.json.Decoder(ErrorBody)


def api_path(*segments: str) -> str:
    """``/v1/<segments>``, each segment percent-quoted (``/`` included) so a name is one segment."""
    return "/v1/" + "/".join(quote(s, safe="") for s in segments)


def parse_apis(api: str | Sequence[str]) -> tuple[str, ...]:
    """The API URLs ``api`` names: one URL, several separated by commas, or a sequence.

    Raises:
        Invalid: an empty entry (or none at all).
    """
    given = api.split(",") if isinstance(api, str) else list(api)
    urls = tuple(url.strip().rstrip("/") for url in given)
    if not urls or not all(urls):
        raise errors.Invalid(
            f"invalid api {api!r}: an empty URL; pass one URL, or several separated by commas"
        )
    return urls


def error_from(status: int, raw: bytes, url: str) -> LakeshoreError:
    """The error a non-2xx answer stands for (see :meth:`Transport.request`)."""
    try:
        detail = _error_body.decode(raw).error
    except msgspec.DecodeError:  # ValidationError included: not the API's error shape
        excerpt = " ".join(raw.decode("utf-8", "replace").split())[:_EXCERPT_CHARS]
        return LakeshoreError(f"http {status} from {url}: {excerpt or '(empty body)'}")
    cls = errors.ERRORS_BY_CODE.get(detail.code) or _ERRORS_BY_STATUS.get(status, LakeshoreError)
    err = cls.from_wire(detail.message)
    if isinstance(err, errors.NotLeader):
        # from_wire carries the message only; the leader's URL is what a client follows.
        err.reason, err.leader_url = detail.message, detail.leader_url
    return err


def _reason(exc: aiohttp.ClientError) -> str:
    """Why a connection failed, in a few words ("connection refused")."""
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, OSError) and os_error.errno and os_error.errno > 0:
        return os.strerror(os_error.errno).lower()
    if isinstance(os_error, OSError) and os_error.strerror:
        return os_error.strerror.lower()
    return str(exc) or type(exc).__name__


def _retry_after_s(resp: aiohttp.ClientResponse) -> float:
    """How long a standby asked to wait before asking again (seconds, capped)."""
    try:
        asked = float(resp.headers.get("Retry-After", _MAX_RETRY_AFTER_S))
    except ValueError:  # an HTTP date: not what Lakeshore sends
        asked = _MAX_RETRY_AFTER_S
    return min(max(asked, 0.0), _MAX_RETRY_AFTER_S)


class _Failover:
    """One request's way through the control planes: where its next attempt goes, after
    how long, and when it gives up.

    Args:
        apis: the URLs the client was given.
        failover_s: how long after the first attempt it may still try again (seconds).
        clock: monotonic seconds.
    """

    def __init__(
        self, apis: tuple[str, ...], failover_s: float, clock: Callable[[], float]
    ) -> None:
        self._apis, self._clock = apis, clock
        self._deadline = clock() + failover_s
        #: why each URL tried did not take the request, latest last
        self._why: dict[str, str] = {}
        self._followed: set[str] = set()
        self._refused_in_row = 0

    def after_standby(
        self, here: str, leader_url: str | None, retry_after_s: float
    ) -> tuple[str, float] | None:
        """``here`` answered ``not_leader``: the URL to try next and the wait before it;
        ``None``: give up."""
        self._note(here, "not the leader")
        self._refused_in_row = 0
        leader = leader_url.rstrip("/") if leader_url else None
        if leader is None or leader == here:
            return self._step(self._next(here), retry_after_s)
        first = leader not in self._followed
        self._followed.add(leader)
        return self._step(leader, 0.0 if first else retry_after_s)

    def after_unreachable(self, here: str, why: str) -> tuple[str, float] | None:
        """``here`` could not be connected to (``why``): as :meth:`after_standby`."""
        self._note(here, why)
        self._refused_in_row += 1
        # A pause once every given URL failed in a row, not after each one.
        round_over = self._refused_in_row % len(self._apis) == 0
        return self._step(self._next(here), _ROUND_PAUSE_S if round_over else 0.0)

    def first_refusal(self) -> bool:
        """Whether no URL has refused a connection to this request yet."""
        return self._refused_in_row == 0 and not self._why

    def tried(self) -> str:
        """Each URL tried and why it did not take the request, for an error message."""
        return ", ".join(f"{url} ({why})" for url, why in self._why.items())

    def _note(self, url: str, why: str) -> None:
        self._why.pop(url, None)
        self._why[url] = why

    def _next(self, here: str) -> str:
        """The given URL after ``here`` (the first if ``here`` is a leader not given)."""
        at = self._apis.index(here) + 1 if here in self._apis else 0
        return self._apis[at % len(self._apis)]

    def _step(self, url: str, wait_s: float) -> tuple[str, float] | None:
        return None if self._clock() + wait_s > self._deadline else (url, wait_s)


class Transport:
    """The connection to the Lakeshore API, which each group of routes extends.

    Its arguments are :class:`~lakeshore.sdk.client.Client`'s. A session is opened on first
    use and closed by :meth:`close` (which ``async with`` calls).
    """

    def __init__(
        self,
        api: str | Sequence[str],
        token: str | None,
        namespace: str = "default",
        timeout_s: float = 30,
        failover_s: float = 30,
    ) -> None:
        #: every API URL given, in order
        self.apis = parse_apis(api)
        #: the URL requests go to now: the leader found last, else the first given
        self.api = self.apis[0]
        self.namespace = namespace
        self.timeout_s = timeout_s
        self.failover_s = failover_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session: aiohttp.ClientSession | None = None
        #: whether any control plane answered this client yet (see the module)
        self._answered = False

    async def __aenter__(self) -> Self:
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
        content: tuple[bytes, str] | None = None,
    ) -> Any:
        """Send one request and return the decoded JSON answer (``None`` for an empty one).

        Args:
            method: HTTP method.
            path: absolute path under the API, e.g. ``/v1/healthz``.
            json: request body: builtins or a model Struct (``UNSET`` fields are omitted).
            params: query parameters.
            content: a request body that is not JSON, and its content type (instead of
                ``json``).

        Raises:
            LakeshoreError: the subclass named by the error body's ``code`` (an unknown code:
                the class of the HTTP status; an unparseable body: ``LakeshoreError`` with
                the status and an excerpt).
            NotLeader: every control plane asked for ``failover_s`` was a standby.
            Unavailable: the API cannot be reached (given several URLs: none of them for
                ``failover_s``) or did not answer within ``timeout_s``.
            Invalid: ``api`` is not an http(s) URL.
        """
        encoded = None if json is None else msgspec.json.encode(json)
        kind = JSON
        if content is not None:
            encoded, kind = content
        async with self._answer(method, path, params=params, body=encoded, kind=kind) as resp:
            raw = await resp.read()
            status = resp.status
        url = self.api + path
        if not 200 <= status < 300:
            raise error_from(status, raw, url)
        if not raw:
            return None
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError:
            raise error_from(status, raw, url) from None

    async def download(
        self,
        path: str,
        dest: Path,
        *,
        params: dict[str, str | int] | None = None,
        method: str = "GET",
    ) -> dict[str, str]:
        """``GET path`` (or ``method``) and write the answer's body to ``dest`` as it
        arrives (not into memory); returns the answer's headers.

        Raises:
            as :meth:`request`; on an error answer ``dest`` is not created.
        """
        async with self._answer(method, path, params=params) as resp:
            if not 200 <= resp.status < 300:
                raise error_from(resp.status, await resp.read(), self.api + path)
            with dest.open("wb") as f:
                async for chunk in resp.content.iter_chunked(256 * 1024):
                    await asyncio.to_thread(f.write, chunk)
            return dict(resp.headers)

    async def stream_lines(
        self, path: str, *, params: dict[str, str | int] | None = None
    ) -> AsyncIterator[bytes]:
        """``GET path`` and yield its answer's lines (NDJSON) as they arrive, each without
        its newline. The answer may last as long as it likes: only connecting is bounded
        by ``timeout_s`` (a followed log lasts as long as its job).

        Raises:
            as :meth:`request` (an error answer before the first line; a connection lost
            on the way: ``Unavailable``).
        """
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout_s)
        async with self._answer("GET", path, params=params, timeout=timeout) as resp:
            if not 200 <= resp.status < 300:
                raise error_from(resp.status, await resp.read(), self.api + path)
            # Not ``async for line in resp.content``: aiohttp refuses lines over 128 KiB,
            # and one chunk of output, escaped as JSON, may be longer.
            pending = b""
            async for data in resp.content.iter_any():
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield line
            if pending.strip():
                yield pending

    @asynccontextmanager
    async def _answer(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str | int] | None = None,
        body: bytes | None = None,
        kind: str = JSON,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The answer of the control plane that took the request (see the module), open
        while the block reads it; failing to get or read it raises as :meth:`request`
        (``timeout``: instead of the session's)."""
        try:
            resp = await self._follow(method, path, params, body, kind, timeout)
            try:
                yield resp
            finally:
                resp.release()
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
            raise errors.Invalid(
                f"invalid api url {self.api!r} ({exc}); pass --api http://HOST:PORT"
            ) from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._unavailable(exc, method, path) from None

    async def _follow(
        self,
        method: str,
        path: str,
        params: dict[str, str | int] | None,
        body: bytes | None,
        kind: str = JSON,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send the request until a server other than a standby answers, moving
        :attr:`api` to the leader (see the module)."""
        session = self._open()
        headers = None if body is None else {"Content-Type": kind}
        failover = _Failover(self.apis, self.failover_s, time.monotonic)
        while True:
            here = self.api
            # aiohttp sends a large bytes body from the event loop in one go; a stream it reads.
            data = io.BytesIO(body) if body and len(body) > _STREAM_BODY_BYTES else body
            try:
                extra = {} if timeout is None else {"timeout": timeout}
                resp = await session.request(
                    method, here + path, data=data, params=params, headers=headers, **extra
                )
            except aiohttp.ClientConnectorError as exc:
                if self.apis == (here,) and not self._answered:
                    raise  # the one URL given, never answered: no server there, say so
                if self.apis == (here,) and failover.first_refusal():
                    log.warning(
                        "the lakeshore api at %s refuses connections (restarting?): %s %s "
                        "is asked again until it is back, for %gs at most",
                        here, method, path, self.failover_s,
                    )  # fmt: skip
                step = failover.after_unreachable(here, _reason(exc))
                if step is None:
                    raise errors.Unavailable(
                        f"cannot reach the lakeshore api within {self.failover_s:g}s: "
                        f"{failover.tried()}; start one with `lakeshore server` or point "
                        "--api (or LAKESHORE_API) at running ones"
                    ) from None
            else:
                self._answered = True
                standby = await _standby(resp, here + path)
                if standby is None:
                    return resp
                step = failover.after_standby(here, standby.leader_url, _retry_after_s(resp))
                if step is None:
                    raise errors.NotLeader(
                        f"no leader took {method} {path} within {self.failover_s:g}s; "
                        f"asked {failover.tried()}",
                        standby.leader_url,
                    ) from None
            self.api, wait_s = step
            if self.api != here:
                log.info(
                    "lakeshore api: %s did not take %s %s; asking %s", here, method, path, self.api
                )
            if wait_s:
                await asyncio.sleep(wait_s)

    def _open(self) -> aiohttp.ClientSession:
        """The client's HTTP session, opened on first use."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=aiohttp.ClientTimeout(total=self.timeout_s)
            )
        return self._session

    def _unavailable(self, exc: BaseException, method: str, path: str) -> errors.Unavailable:
        """The error of a request that got no answer: timed out, or the API unreachable."""
        if isinstance(exc, TimeoutError):
            return errors.Unavailable(
                f"the lakeshore api at {self.api} did not answer {method} {path} "
                f"within {self.timeout_s:g}s"
            )
        return errors.Unavailable(
            f"cannot reach the lakeshore api at {self.api} ({_reason(exc)}); start one with "
            "`lakeshore server` or point --api (or LAKESHORE_API) at a running one"
        )

    def _ns(self, namespace: str | None, *segments: str) -> str:
        """The path of ``segments`` under ``namespace`` (default: the client's)."""
        return api_path("namespaces", namespace or self.namespace, *segments)


async def _standby(resp: aiohttp.ClientResponse, url: str) -> errors.NotLeader | None:
    """The ``not_leader`` refusal ``resp`` is, if it is one (then it is released)."""
    if resp.status != errors.NotLeader.http_status:
        return None
    err = error_from(resp.status, await resp.read(), url)
    if not isinstance(err, errors.NotLeader):
        return None
    resp.release()
    return err


__all__ = ["Transport", "api_path", "error_from", "parse_apis"]
