"""``GET /metrics`` of a real control plane: token, counters, HTTP routes, label cap, port."""

from __future__ import annotations

import asyncio

import aiohttp
from metrics_support import (
    NS,
    all_succeeded,
    daemon,
    parse,
    scrape,
    scrape_url,
    submit,
    value,
)
from polling import eventually

from lakeshore import __version__
from lakeshore.metrics import OTHER
from lakeshore.model import WorkerStatus


async def test_metrics_answer_401_without_a_token(api):
    status, body = await api.request("GET", "/metrics", token=None)
    assert status == 401, body


async def test_metrics_are_prometheus_text_with_the_build_info(api):
    assert (await api.post(f"/v1/namespaces/{NS}/queues", {"name": "listed"}))[0] == 201
    async with daemon(api, "listed-daemon", "listed"):
        samples = await scrape(api)
    assert value(samples, "lakeshore_build_info", version=__version__) == 1
    names = {n for n, _, _ in samples}
    assert {
        "lakeshore_queue_pending",
        "lakeshore_daemons",
        "lakeshore_invocations_submitted_total",
        "lakeshore_controller_tick_seconds_count",
    } <= names


async def test_utilization_counts_no_more_busy_daemons_than_running_invocations(api, register):
    # Two daemons whose last heartbeat said busy, nothing running: right after a batch,
    # until their next heartbeat. `queues stats` says 0; so does the gauge.
    assert (await api.post(f"/v1/namespaces/{NS}/queues", {"name": "settled"}))[0] == 201
    for name in ("a", "b"):
        await register(name, queues=["settled"], status=WorkerStatus.BUSY)
    samples = await scrape(api)
    assert value(samples, "lakeshore_queue_running", namespace=NS, queue="settled") == 0
    assert value(samples, "lakeshore_queue_utilization", namespace=NS, queue="settled") == 0


async def test_counters_and_histograms_move_as_invocations_run(api):
    assert (await api.post(f"/v1/namespaces/{NS}/queues", {"name": "counted"}))[0] == 201
    before = await scrape(api)
    async with daemon(api, "counter", "counted"):
        ids = await submit(api, "counted", 3)
        await all_succeeded(api, ids)
        after = await scrape(api)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("lakeshore_invocations_submitted_total") >= 3
    assert grew("lakeshore_invocations_finished_total", outcome="succeeded") >= 3
    assert grew("lakeshore_invocation_wait_seconds_count") >= 3
    assert grew("lakeshore_invocation_run_seconds_count") >= 3
    assert grew("lakeshore_invocation_end_to_end_seconds_count") >= 3
    assert value(after, "lakeshore_daemons", namespace=NS) >= 1
    assert value(after, "lakeshore_queue_pending", namespace=NS, queue="counted") == 0


async def test_an_idempotent_resubmit_counts_as_deduplicated(api):
    path = f"/v1/namespaces/{NS}/queues/default/invocations"
    body = {"invocations": [{"command": ["true"], "idempotency_key": "once"}]}
    assert (await api.post(path, body))[0] == 202
    before = value(await scrape(api), "lakeshore_submits_deduplicated_total")
    status, answer = await api.post(path, body)
    assert status == 202 and answer["duplicates"], answer
    assert value(await scrape(api), "lakeshore_submits_deduplicated_total") == before + 1


async def test_http_metrics_are_labelled_by_route_template_not_path(api):
    for name in ("tpl-a", "tpl-b"):
        assert (await api.post(f"/v1/namespaces/{NS}/queues", {"name": name}))[0] == 201
        assert (await api.get(f"/v1/namespaces/{NS}/queues/{name}"))[0] == 200
    assert (await api.get(f"/v1/namespaces/{NS}/queues/absent"))[0] == 404
    assert (await api.get("/no/such/route"))[0] == 404
    samples = await scrape(api)
    http = [lab for n, lab, _ in samples if n == "lakeshore_http_requests_total"]
    routes = {lab["route"] for lab in http}
    assert not any(name in r for r in routes for name in ("tpl-a", "tpl-b", "absent", "such"))
    template = next(r for r in routes if r.startswith("/v1/namespaces/{") and r.endswith("}"))
    got = value(samples, "lakeshore_http_requests_total", route=template, method="GET", code="200")
    assert got >= 2
    assert value(samples, "lakeshore_http_requests_total", route=template, code="404") >= 1
    assert value(samples, "lakeshore_http_requests_total", route="_unmatched", code="404") >= 1
    assert value(samples, "lakeshore_http_request_duration_seconds_count", route=template) >= 3


async def test_top_n_caps_the_queue_labels_of_a_thousand_queues(plane_factory):
    handle = await plane_factory(metrics_per_queue="top:5")
    async with handle.client() as api:
        gate = asyncio.Semaphore(32)

        async def create(i: int) -> None:
            async with gate:
                status, body = await api.post(f"/v1/namespaces/{NS}/queues", {"name": f"q{i:04d}"})
                assert status == 201, body

        await asyncio.gather(*(create(i) for i in range(1000)))
        await submit(api, "q0500", 3)
        await submit(api, "q0999", 1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        samples = await scrape(api)
        took_s = loop.time() - started
    assert took_s < 5.0, f"a scrape of 1,000 queues took {took_s:.2f} s"
    pending = {lab["queue"]: v for n, lab, v in samples if n == "lakeshore_queue_pending"}
    assert len(pending) <= 5 + 1
    assert pending["q0500"] == 3 and pending["q0999"] == 1
    assert OTHER in pending
    assert sum(pending.values()) == 4


async def test_the_metrics_port_serves_without_a_token_and_none_drops_the_queue_label(
    plane_factory,
):
    handle = await plane_factory(metrics_port=0, metrics_per_queue="none")
    url = handle.plane.metrics_url
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    async with handle.client() as api:
        await submit(api, "default", 2)
    samples = await scrape_url(url)
    pending = [(lab, v) for n, lab, v in samples if n == "lakeshore_queue_pending"]
    assert pending and all("queue" not in lab for lab, _ in pending)
    assert sum(v for _, v in pending) == 2
    async with aiohttp.ClientSession() as http:
        async with http.get(url.removesuffix("/metrics") + "/v1/healthz") as r:
            assert r.status == 404


def test_parse_reads_what_the_parser_reads():
    text = '# TYPE x gauge\nx{a="1"} 2.0\n'
    assert parse(text) == [("x", {"a": "1"}, 2.0)]


async def test_controller_ticks_are_timed(api):
    await eventually(
        lambda: scrape(api),
        until=lambda s: value(s, "lakeshore_controller_tick_seconds_count") >= 2,
        timeout_s=10.0,
        what="two controller ticks timed",
    )


async def test_the_controllers_launches_are_counted_by_kind(plane_factory):
    handle = await plane_factory(tick_s=0.2, heartbeat_s=0.2, lost_after_s=2)
    async with handle.client() as api:
        before = value(await scrape(api), "lakeshore_controller_actions_total", kind="launch")
        body = {"name": "elastic", "elasticity": {"kind": "fully_elastic", "max": 1}}
        assert (await api.post(f"/v1/namespaces/{NS}/queues", body))[0] == 201
        ids = await submit(api, "elastic", 1)
        await all_succeeded(api, ids)
        after = await scrape(api)
    assert value(after, "lakeshore_controller_actions_total", kind="launch") >= before + 1


async def test_gpus_of_a_queues_daemons_and_those_held_are_gauged(api, tmp_path):
    # Four GPUs declared with --gpus on a host without nvidia-smi (docs/resources.md).
    assert (await api.post(f"/v1/namespaces/{NS}/queues", {"name": "gpu-q"}))[0] == 201
    gate = tmp_path / "go"
    wait = ["sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.02; done']
    async with daemon(api, "gpu-d", "gpu-q", gpus="4"):
        samples = await scrape(api)
        assert value(samples, "lakeshore_queue_gpus", namespace=NS, queue="gpu-q") == 4
        assert value(samples, "lakeshore_queue_gpus_used", namespace=NS, queue="gpu-q") == 0
        status, body = await api.post(
            f"/v1/namespaces/{NS}/queues/gpu-q/invocations",
            {"command": wait, "resources": {"gpus": 3}},
        )
        assert status == 202, body

        async def used() -> float:
            found = await scrape(api)
            return value(found, "lakeshore_queue_gpus_used", namespace=NS, queue="gpu-q")

        await eventually(used, until=lambda n: n == 3, timeout_s=10, what="3 GPUs held")
        gate.touch()
        await all_succeeded(api, body["ids"])
