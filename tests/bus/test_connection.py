"""A Lakeshore connection survives a reconnect its auth callout could not answer in time;
a loop around nats-py calls stops when cancelled."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import natsauth
import pytest
from polling import eventually

from lakeshore.bus import subjects
from lakeshore.bus.connection import NatsLogin, check_cancelled, connect_nats
from lakeshore.embedded import NatsServer
from lakeshore.security import grants
from lakeshore.security.callout import Callout, Grant

# nats-py's own close of a connection the server hung up on mid-handshake can leave its
# stream writer to the garbage collector, which pytest reports whenever it runs.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

WAIT_S = 30.0


class _Anyone:
    """Grants every daemon connection the same daemon grant."""

    async def grant(self, user: str, password: str) -> Grant:
        permissions = grants.daemon("default", "w-1", [], "o")
        return Grant(name="daemon/o/default/t/w-1", permissions=permissions)


async def test_a_reconnect_the_callout_did_not_answer_is_retried_not_fatal(tmp_path: Path):
    conf = natsauth.server_config(tmp_path / "nats.conf")
    server = NatsServer(tmp_path / "store", config_file=conf, port=0)
    await server.start()
    callout = Callout(natsauth.secrets().issuer, _Anyone())  # type: ignore[arg-type]

    async def answer(msg) -> None:
        await msg.respond(await callout.answer(msg.subject, msg.data))

    plane = await natsauth.plane_nats(server.url)
    responder = await plane.subscribe("$SYS.REQ.USER.AUTH", cb=answer)
    inbox = subjects.daemon_inbox("default", "w-1")
    login = NatsLogin(user=grants.DAEMON_USER, password="any", inbox_prefix=inbox)
    heard: list[str] = []
    nc = await connect_nats(
        server.url, name="survivor", login=login, on_error=lambda e: heard.append(str(e))
    )
    again = None
    try:
        # The control plane stops answering, and the server restarts: the client's
        # reconnect is cut off during its handshake.
        await responder.unsubscribe()
        await plane.close()
        port = server.port
        await server.stop()
        again = NatsServer(tmp_path / "store", config_file=conf, port=port)
        await again.start()
        # nats-py 2.16 alone would close for good on the refusal that follows.
        await eventually(
            lambda: [e for e in heard if "authorization violation" in e.lower()],
            until=bool,
            timeout_s=WAIT_S,
            what="a reconnect refused for want of an answer",
        )
        assert not nc.is_closed
        # The control plane answers again: the client reconnects by itself.
        plane = await natsauth.plane_nats(again.url)
        await plane.subscribe("$SYS.REQ.USER.AUTH", cb=answer)
        await eventually(
            lambda: nc.is_connected, until=bool, timeout_s=WAIT_S, what="the client reconnected"
        )
        assert not nc.is_closed
    finally:
        await nc.close()
        await plane.close()
        for s in (server, again):
            if s is not None:
                await s.stop()


async def test_a_loop_stops_though_a_call_swallowed_its_cancellation() -> None:
    # nats-py's wait_for (Python 3.11) returns an answer that lands with the cancellation
    # and drops the cancellation; the loop's check raises it again.
    calls = 0

    async def swallowing_call() -> None:
        nonlocal calls
        calls += 1
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)

    async def loop() -> None:
        while True:
            await swallowing_call()
            check_cancelled()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert task.cancelled() and calls == 1
