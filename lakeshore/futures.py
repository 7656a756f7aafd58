"""Small helpers for asyncio futures that the rest of the code shares."""

from __future__ import annotations

import asyncio
from typing import Any


def mark_retrieved(future: asyncio.Future[Any]) -> None:
    """A done callback: take a failed future's error as seen, for a future its awaiters may
    all have left (asyncio would otherwise log "exception was never retrieved")."""
    if not future.cancelled():
        future.exception()
