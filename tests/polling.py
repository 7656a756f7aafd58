"""The one polling helper of the tests: wait, bounded, until a condition holds.

Import it by its bare name, like ``support``: ``from polling import eventually`` (``tests/``
is on ``sys.path`` because of ``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

_NOTHING = object()
#: How much of the last value a failure shows.
_SHOWN = 2000


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    *,
    timeout_s: float,
    every_s: float = 0.05,
    until: Callable[[T], object] = bool,
    retry_on: tuple[type[Exception], ...] = (),
    what: str = "",
) -> T:
    """Call ``check`` (sync or async) every ``every_s`` seconds until ``until`` holds for
    what it returned, and return that value; by default until it returns a truthy value.

    An exception of a ``retry_on`` type raised by ``check`` counts as "not yet". After
    ``timeout_s`` seconds the test fails with an ``AssertionError`` that says ``what`` was
    awaited and the last value (or retried exception) seen.
    """
    __tracebackhide__ = True  # a failure points at the test's wait, not in here
    last: object = _NOTHING
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            while True:
                try:
                    value = check()
                    if inspect.isawaitable(value):
                        value = await value
                except retry_on as exc:
                    last = exc
                else:
                    if until(value):  # type: ignore[arg-type]
                        return value  # type: ignore[return-value]
                    last = value
                await asyncio.sleep(every_s)
    except TimeoutError:
        if not deadline.expired():
            raise  # a TimeoutError of check's own, not the end of the wait
    seen = "nothing (the first check did not return)" if last is _NOTHING else repr(last)
    if len(seen) > _SHOWN:
        seen = seen[:_SHOWN] + f"... ({len(seen)} characters)"
    raise AssertionError(
        f"waited {timeout_s}s for {what or getattr(check, '__qualname__', repr(check))}; "
        f"last seen: {seen}"
    )
