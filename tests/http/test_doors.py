"""The API's listener across role changes: one port, no request cut by the swap."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from lakeshore.http.doors import Doors
from lakeshore.http.standby import standby_app


def _app(name: str) -> web.Application:
    async def who(request: web.Request) -> web.Response:
        return web.Response(text=name)

    app = web.Application()
    app.router.add_get("/who", who)
    return app


async def test_a_swap_keeps_open_connections_and_new_ones_reach_the_new_app() -> None:
    apps = {"now": _app("old")}
    doors = Doors("127.0.0.1", 0, lambda: apps["now"])
    await doors.refresh()
    url = f"http://127.0.0.1:{doors.port}/who"
    try:
        async with aiohttp.ClientSession() as kept:
            assert await (await kept.get(url)).text() == "old"
            apps["now"] = _app("new")
            await doors.refresh()
            # The kept-alive connection is still served (closing it as the client sends
            # on it would cut the request), by the app it was opened to.
            for _ in range(3):
                resp = await kept.get(url)
                assert resp.status == 200 and await resp.text() == "old"
            async with aiohttp.ClientSession() as fresh:
                assert await (await fresh.get(url)).text() == "new"
    finally:
        async with asyncio.timeout(10):  # the replaced app is closed at once, not after
            await doors.close()  # its retirement


async def test_a_standby_answer_closes_its_connection_so_the_next_request_moves_on() -> None:
    async def nowhere() -> str | None:
        return None

    doors = Doors("127.0.0.1", 0, lambda: standby_app(nowhere, lambda: 0))
    await doors.refresh()
    try:
        async with aiohttp.ClientSession() as session:
            resp = await session.post(f"http://127.0.0.1:{doors.port}/v1/namespaces")
            assert resp.status == 503
            assert (await resp.json())["error"]["code"] == "not_leader"
            assert resp.headers["Connection"] == "close"
    finally:
        await doors.close()


async def test_a_plane_the_lease_names_but_not_leading_yet_says_it_is_taking_over() -> None:
    here = "http://127.0.0.1:8080"

    async def us() -> str | None:
        return here

    app = standby_app(us, lambda: 0, own_url=lambda: here)
    doors = Doors("127.0.0.1", 0, lambda: app)
    await doors.refresh()
    try:
        async with aiohttp.ClientSession() as session:
            resp = await session.post(f"http://127.0.0.1:{doors.port}/v1/namespaces")
            error = (await resp.json())["error"]
            assert (resp.status, error["code"]) == (503, "not_leader")
            assert "taking over as leader" in error["message"], error
    finally:
        await doors.close()


async def test_connections_opened_while_the_listener_is_swapped_are_all_answered() -> None:
    # New connections land in whichever listening socket the kernel picks: one queued in
    # a listener that then closes would be dropped, and its client would wait for TCP's
    # retransmissions (seconds) before a reset. Every connection opened during a burst of
    # swaps is answered, by one app or the other.
    apps = {"now": _app("0")}
    doors = Doors("127.0.0.1", 0, lambda: apps["now"])
    await doors.refresh()
    url = f"http://127.0.0.1:{doors.port}/who"
    failures: list[BaseException] = []
    answered = 0
    swapping = True

    async def client() -> None:
        nonlocal answered
        connector = aiohttp.TCPConnector(force_close=True)
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            while swapping:
                try:
                    async with session.get(url) as resp:
                        assert resp.status == 200
                        await resp.text()
                        answered += 1
                except (aiohttp.ClientError, TimeoutError) as e:
                    failures.append(e)

    clients = [asyncio.create_task(client()) for _ in range(8)]
    try:
        for i in range(1, 41):
            await asyncio.sleep(0.02)
            apps["now"] = _app(str(i))
            await doors.refresh()
        swapping = False
        async with asyncio.timeout(30):
            await asyncio.gather(*clients)
    finally:
        swapping = False
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
        await doors.close()
    assert answered > 0 and failures == [], failures[:3]
