"""The history routes' contract: durations and the points bound refused with a 400 that
says why, an unknown queue 404, the Parquet answer's type and row count."""

from __future__ import annotations

import aiohttp

Q = "/v1/namespaces/default/queues"


async def test_history_route_refuses_bad_values_with_400(api) -> None:
    path = f"{Q}/default/history"
    status, body = await api.get(f"{path}?since=yesterday")
    assert status == 400 and "since must be a duration like 30s" in body["error"]["message"]
    status, body = await api.get(f"{path}?since=1d&every=1s")
    assert status == 400 and "raise --every" in body["error"]["message"]
    status, body = await api.get(f"{path}?since=1d&every=1m")
    assert status == 400  # 1441 points
    status, body = await api.get(f"{path}?since=1d&every=2m")
    assert status == 200 and len(body["points"]) in (720, 721)
    assert (await api.get(f"{Q}/nope/history"))[0] == 404


async def test_history_parquet_is_a_parquet_file_with_its_row_count(control_plane) -> None:
    headers = {"Authorization": f"Bearer {control_plane.admin_token}"}
    url = control_plane.api + "/v1/namespaces/default/history.parquet?since=1h"
    async with aiohttp.ClientSession(headers=headers) as session, session.get(url) as resp:
        body = await resp.read()
        assert resp.status == 200 and resp.content_type == "application/vnd.apache.parquet"
        assert resp.headers["X-Lakeshore-Rows"] == "0"
    assert body[:4] == b"PAR1" and body[-4:] == b"PAR1"
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(url.replace("1h", "1y")) as resp:
            assert resp.status == 400 and "since must be a duration" in await resp.text()
