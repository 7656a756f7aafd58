"""The bounded exit stack every stop of the control plane goes through."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from lakeshore.shutdown import StopStack


async def test_every_step_runs_though_one_hangs_and_one_fails(caplog):
    ran: list[str] = []
    never = asyncio.Event()

    async def hangs() -> None:
        ran.append("hangs")
        await never.wait()

    async def fails() -> None:
        ran.append("fails")
        raise ConnectionResetError("Connection lost")

    async def last() -> None:
        ran.append("last")

    @contextlib.asynccontextmanager
    async def held():
        yield
        ran.append("held")

    stack = StopStack(step_s=0.2)
    stack.push_async_callback(last)
    await stack.enter_async_context(held())
    stack.push_async_callback(fails)
    stack.push_async_callback(hangs)
    with caplog.at_level(logging.WARNING, logger="lakeshore.shutdown"):
        async with asyncio.timeout(5):
            await stack.aclose()
    assert ran == ["hangs", "fails", "held", "last"]
    said = [r.getMessage() for r in caplog.records]
    assert any("hangs did not end within 0.2s" in line for line in said), said
    assert any("fails failed (ConnectionResetError: Connection lost)" in line for line in said)
