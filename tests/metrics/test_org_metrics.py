"""``GET /metrics`` with an org's token shows only that org's series; the admin's, all."""

from __future__ import annotations

import aiohttp
from metrics_support import parse, value
from polling import eventually

from lakeshore.metrics.view import PLANE_WIDE


async def _text(base: str, token: str) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.get(base + "/metrics", headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200, await r.text()
            return await r.text()


async def _two_orgs(api, register) -> str:
    """Org acme: namespace ``acme-ns``, queue ``acme-work``; org globex: ``globex-ns``,
    ``globex-secret``, a daemon on it; each queue with one pending invocation. Returns a
    token of acme's namespace."""
    orgs = [("acme-ns", "acme", "acme-work"), ("globex-ns", "globex", "globex-secret")]
    for ns, org, queue in orgs:
        assert (await api.post("/v1/namespaces", {"name": ns, "org": org}))[0] == 201
        assert (await api.post(f"/v1/namespaces/{ns}/queues", {"name": queue}))[0] == 201
        body = {"invocations": [{"command": ["true"]}]}
        status, answer = await api.post(f"/v1/namespaces/{ns}/queues/{queue}/invocations", body)
        assert status == 202, answer
    await register("globex-daemon", queues=["globex-secret"], namespace="globex-ns")
    status, body = await api.post("/v1/namespaces/acme-ns/tokens", {"description": "metrics"})
    assert status == 201, body
    return body["token"]


async def test_an_org_token_sees_only_its_orgs_namespaces_and_queues(api, register):
    acme = await _two_orgs(api, register)
    text = await _text(api.base, acme)
    for other in ("globex-ns", "globex-secret", "globex-daemon", 'namespace="default"'):
        assert other not in text
    samples = parse(text)
    assert value(samples, "lakeshore_queue_pending", namespace="acme-ns", queue="acme-work") == 1
    assert {lab["namespace"] for _, lab, _ in samples if "namespace" in lab} == {"acme-ns"}
    # Plane-wide health is shown; totals over every org's work are not.
    families = {n.removesuffix("_count") for n, _, _ in samples}
    assert PLANE_WIDE <= families
    assert "lakeshore_invocations_submitted_total" not in families
    assert not any(n.startswith("lakeshore_http_") for n in families)


async def test_the_admin_token_sees_every_org(api, register):
    await _two_orgs(api, register)

    async def scrape():
        return parse(await _text(api.base, api.token))

    # A submit is counted once the Recorder records it: behind its answer by up to the
    # outbox's linger (a scrape does not wait for the history, as `queues stats` does).
    samples = await eventually(
        scrape,
        until=lambda s: value(s, "lakeshore_invocations_submitted_total") >= 2,
        timeout_s=5.0,
        what="both orgs' submits counted",
    )
    pending = {
        (lab["namespace"], lab["queue"]) for n, lab, _ in samples if n == "lakeshore_queue_pending"
    }
    assert {("acme-ns", "acme-work"), ("globex-ns", "globex-secret")} <= pending
    assert value(samples, "lakeshore_daemons", namespace="globex-ns") == 1
    assert value(samples, "lakeshore_invocations_submitted_total") >= 2
