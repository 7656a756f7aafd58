"""A daemon's own ``--metrics-port``: runs in flight, claims, run seconds."""

from __future__ import annotations

from metrics_support import NS, all_succeeded, daemon, scrape_url, submit, value


async def test_a_daemon_serves_its_claims_and_run_seconds(api):
    assert (await api.post(f"/v1/namespaces/{NS}/queues", {"name": "dm"}))[0] == 201
    async with daemon(api, "metered", "dm", metrics_port=0) as running:
        url = running.metrics_url
        assert url is not None and url.startswith("http://127.0.0.1:")
        ids = await submit(api, "dm", 2)
        await all_succeeded(api, ids)
        samples = await scrape_url(url)
    assert value(samples, "lakeshore_daemon_claims_total", queue="dm") == 2
    assert value(samples, "lakeshore_daemon_run_seconds_count", outcome="succeeded") == 2
    assert value(samples, "lakeshore_daemon_runs_in_flight") == 0
    assert value(samples, "lakeshore_build_info") == 1


async def test_a_daemon_without_a_metrics_port_serves_none(api):
    async with daemon(api, "quiet", "default") as running:
        assert running.metrics_url is None
