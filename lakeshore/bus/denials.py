"""NATS's permissions violations, answered at once.

A publish NATS refuses (the connection's grant does not name the subject) gets no answer:
the server reports it asynchronously, and a request on it would wait out its timeout. A
connection's error callback feeds :class:`Denials`, which ends such a request at once.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from typing import TypeVar

_T = TypeVar("_T")


class Denied(Exception):
    """NATS refused a publish of this connection (a permissions violation)."""


class Denials:
    """Turns the server's asynchronous permissions violations into prompt answers: a
    request whose subject NATS refused fails at once instead of waiting out its timeout."""

    _VIOLATION = re.compile(r'permissions violation for publish to "([^"]+)"', re.IGNORECASE)

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}

    def heard(self, error: Exception) -> None:
        found = self._VIOLATION.search(str(error))
        if found is None:
            return
        for waiter in self._waiting.pop(found[1].lower(), []):
            if not waiter.done():
                waiter.set_result(None)

    async def unless(self, subject: str, call: Awaitable[_T]) -> _T:
        """Await ``call``, a request on ``subject``, unless NATS refuses the subject first.

        Raises:
            Denied: NATS refused it.
        """
        key = subject.lower()
        denied: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(denied)
        answer = asyncio.ensure_future(call)
        try:
            await asyncio.wait({answer, denied}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiters = self._waiting.get(key, [])
            if denied in waiters:
                waiters.remove(denied)
                if not waiters:
                    del self._waiting[key]
        if answer.done():
            return answer.result()
        answer.cancel()
        raise Denied(subject)
