"""The transport under every route of :class:`~lakeshore.sdk.client.Client`: one aiohttp
session, one way to send a request, and the decoding of an error answer.

A non-2xx answer raises the :class:`~lakeshore.errors.LakeshoreError` subclass the server
named, rebuilt through :data:`~lakeshore.errors.ERRORS_BY_CODE`.
"""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

import aiohttp
import msgspec

from lakeshore import errors
from lakeshore.errors import LakeshoreError

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


def api_path(*segments: str) -> str:
    """``/v1/<segments>``, each segment percent-quoted (``/`` included) so a name is one segment."""
    return "/v1/" + "/".join(quote(s, safe="") for s in segments)


def error_from(status: int, raw: bytes, url: str) -> LakeshoreError:
    """The error a non-2xx answer stands for (see :meth:`Transport.request`)."""
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


class Transport:
    """The connection to one Lakeshore API, which each group of routes extends.

    Its arguments are :class:`~lakeshore.sdk.client.Client`'s. A session is opened on first
    use and closed by :meth:`close` (which ``async with`` calls).
    """

    def __init__(
        self, api: str, token: str | None, namespace: str = "default", timeout_s: float = 30
    ) -> None:
        self.api = api.rstrip("/")
        self.namespace = namespace
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session: aiohttp.ClientSession | None = None

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
        session = self._open()
        url = self.api + path
        encoded = None if json is None else msgspec.json.encode(json)
        headers = None if encoded is None else {"Content-Type": "application/json"}
        # aiohttp sends a large bytes body from the event loop in one go; a stream it reads.
        data: bytes | io.BytesIO | None = encoded
        if encoded is not None and len(encoded) > _STREAM_BODY_BYTES:
            data = io.BytesIO(encoded)
        try:
            async with session.request(
                method, url, data=data, params=params, headers=headers
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
            raise errors.Invalid(
                f"invalid api url {self.api!r} ({exc}); pass --api http://HOST:PORT"
            ) from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._unavailable(exc, method, path) from None
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
        session = self._open()
        url = self.api + path
        try:
            async with session.request(method, url, params=params) as resp:
                if not 200 <= resp.status < 300:
                    raise error_from(resp.status, await resp.read(), url)
                with dest.open("wb") as f:
                    async for chunk in resp.content.iter_chunked(256 * 1024):
                        await asyncio.to_thread(f.write, chunk)
                return dict(resp.headers)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._unavailable(exc, method, path) from None

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


__all__ = ["Transport", "api_path", "error_from"]
