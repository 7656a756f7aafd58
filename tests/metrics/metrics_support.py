"""Scraping ``/metrics`` and running a daemon in-process, for the metrics tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
from polling import eventually
from prometheus_client.parser import text_string_to_metric_families

from lakeshore.daemon import DaemonSettings, Running, run_daemon
from lakeshore.model import DaemonAccess

NS = "default"
WAIT_S = 30.0

Samples = list[tuple[str, dict[str, str], float]]


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text document: ``(name, labels, value)``."""
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(
        v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items())
    )


async def scrape(api: Any) -> Samples:
    """``GET /metrics`` through the API, with the admin token."""
    headers = {"Authorization": f"Bearer {api.token}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(api.base + "/metrics", headers=headers) as r:
            assert r.status == 200, await r.text()
            assert r.content_type == "text/plain"
            return parse(await r.text())


async def scrape_url(url: str) -> Samples:
    """``GET`` a metrics URL without a token."""
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as r:
            assert r.status == 200, await r.text()
            return parse(await r.text())


async def submit(api: Any, queue: str, count: int) -> list[str]:
    """Submit ``count`` ``true`` commands to ``queue``; their ids."""
    body = {"invocations": [{"command": ["true"]} for _ in range(count)]}
    status, answer = await api.post(f"/v1/namespaces/{NS}/queues/{queue}/invocations", body)
    assert status == 202, answer
    return answer["ids"]


async def all_succeeded(api: Any, ids: list[str]) -> None:
    async def states() -> list[str]:
        return [(await api.get(f"/v1/namespaces/{NS}/jobs/{i}"))[1]["state"] for i in ids]

    await eventually(
        states,
        until=lambda s: all(x == "succeeded" for x in s),
        timeout_s=WAIT_S,
        what=f"{len(ids)} jobs succeeded",
    )


@contextlib.asynccontextmanager
async def daemon(api: Any, name: str, queue: str, **overrides: Any) -> AsyncIterator[Running]:
    """A registered ``run_daemon`` on ``queue`` in this process; retired on exit, bounded."""
    status, body = await api.post(f"/v1/namespaces/{NS}/daemons/join", {"id": None})
    assert status == 200, body
    settings = DaemonSettings(
        access=msgspec.convert(body, DaemonAccess),
        name=name,
        queues=[queue],
        heartbeat_s=0.2,
        drain_timeout_s=5.0,
        request_timeout_s=2.0,
        **overrides,
    )
    stop = asyncio.Event()
    ready: asyncio.Future[Running] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        run_daemon(settings, stop, environ=dict(os.environ), on_ready=ready.set_result)
    )
    try:
        async with asyncio.timeout(WAIT_S):
            await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            raise AssertionError(f"daemon {name} ended before it was ready: {task.result()}")
        yield ready.result()
    finally:
        stop.set()
        async with asyncio.timeout(WAIT_S):
            await asyncio.gather(task, return_exceptions=True)
