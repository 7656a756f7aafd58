"""Batch work done in turns, so that one tenant's big batch does not hold the event loop.

The control plane serves every org on one event loop. A submit of 5,000 invocations is
~50 ms of Python (ids, validation, encoding) and a burst of publish callbacks; done in one
go, every other org's request (a heartbeat, ``GET workers``) waits behind it. Handled in
turns of :data:`TURN` items with a yield to the loop between them, another request waits
for one turn at most (a few milliseconds), and the batch costs the same in all.
"""

from __future__ import annotations

import asyncio

#: Items handled between two yields to the event loop (~1–3 ms of work on these machines).
TURN = 200


async def pause(done: int, size: int = TURN) -> None:
    """Yield to the event loop when ``done`` items (``done > 0``) complete a turn."""
    if done and done % size == 0:
        await asyncio.sleep(0)
