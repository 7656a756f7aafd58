"""Functions the daemons of the tests run (``fn="daemon_jobs:<name>"``)."""

from __future__ import annotations

import asyncio
import pathlib
import threading

#: Set by the test that blocks a function; released at the test's end.
RELEASE = threading.Event()


def add(a: int, b: int) -> int:
    return a + b


def noop() -> None:
    return None


async def async_double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


class Boom(Exception):
    """An error type of the user's code, qualified by this module."""


def explode(message: str) -> None:
    raise Boom(message)


def block() -> str:
    """Runs until the test releases it (bounded, so a stray thread never outlives a run)."""
    RELEASE.wait(30)
    return "released"


def hang_first_time(marker: str) -> str:
    """Hangs (until its process dies) on the first run; returns at once after that."""
    path = pathlib.Path(marker)
    if path.exists():
        return "second run"
    path.touch()
    RELEASE.wait(60)
    return "first run"


def big(size: int) -> str:
    return "x" * size
