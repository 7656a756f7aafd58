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


class PagedCall(Call[T]):
    """A list route read page by page (``?limit=``, then ``?after=`` the answer's ``next``)
    until a page has no ``next``; its :meth:`body` is the server's answer shape with every
    page's items under the one key, as an unpaged answer would have them.

    A server without pages answers everything at once and no ``next``: one request.
    """

    __slots__ = ("_page",)

    def __init__(self, *args: Any, page: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        assert self._key is not None, "a paged route answers a list under a key"
        #: the ``limit`` of each request
        self._page = page

    async def body(self) -> Any:
        key, items, after = self._key, [], None
        assert key is not None
        while True:
            params = {**(self._params or {}), "limit": self._page}
            if after is not None:
                params["after"] = after
            answer = await self._client.request(self.method, self.path, params=params)
            if not isinstance(answer, dict) or not isinstance(answer.get(key), list):
                return answer  # not this route's shape: decode() says so
            items += answer[key]
            after = answer.get("next")
            if not after:
                return {**{k: v for k, v in answer.items() if k != "next"}, key: items}


__all__ = ["Call", "PagedCall"]
