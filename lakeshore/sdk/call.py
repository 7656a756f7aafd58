"""The :class:`Call` every typed route of the client returns: one request, sent when awaited."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from lakeshore.errors import LakeshoreError

if TYPE_CHECKING:
    from lakeshore.sdk.transport import Transport

T = TypeVar("T")


class Call(Generic[T]):
    """One request, sent when awaited.

    ``await call`` returns the answer decoded into ``T``; ``await call.body()`` returns the
    decoded JSON as the server sent it, and :meth:`decode` turns such a body into ``T``, so
    a caller can have both from one request.
    """

    __slots__ = ("_client", "_type", "_key", "method", "path", "_json", "_params")

    def __init__(
        self,
        client: Transport,
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


__all__ = ["Call"]
