"""Row 19 of the fault matrix: an actor that keeps crashing is restarted with back-off, is
reported by /v1/healthz while it is down, and never affects other queues or namespaces."""

from __future__ import annotations

from polling import eventually
from report import record

Q = "/v1/namespaces/default/queues"


async def test_a_crashing_queue_actor_is_degraded_alone_then_back(plane_factory):
    plane = await plane_factory(fault_points="queue.patch:raise", restart_backoff_s=5.0)
    async with plane.client() as api:
        for name in ("sick", "well"):
            assert (await api.post(Q, {"name": name}))[0] == 201
        await api.post("/v1/namespaces", {"name": "other", "org": "default"})
        assert (await api.get("/v1/healthz"))[0] == 200
        # Ten crashes a minute are restarted at once; the eleventh takes it down.
        for _ in range(11):
            status, body = await api.patch(Q + "/sick", {"description": "x"})
            assert (status, body["error"]["code"]) == (500, "internal")
            assert "traceback" not in body["error"]["message"].lower()
        status, body = await api.get("/v1/healthz")
        assert (status, body["error"]["code"]) == (503, "degraded")
        assert "queue:default/sick" in body["error"]["message"]
        status, body = await api.get(Q + "/sick")
        assert (status, body["error"]["code"]) == (503, "unavailable")
        # Everything else works meanwhile.
        assert (await api.get(Q + "/well"))[0] == 200
        assert (await api.post(Q + "/well/invocations", {"fn": "m:f"}))[0] == 202
        assert (await api.post("/v1/namespaces/other/queues", {"name": "q"}))[0] == 201
        assert (await api.get(Q))[0] == 200
        # It comes back by itself, without a server restart.
        await eventually(
            lambda: api.get("/v1/healthz"), timeout_s=30, until=lambda r: r[0] == 200,
            what="healthz back to 200",
        )  # fmt: skip
        status, row = await api.get(Q + "/sick")
        assert (status, row["name"]) == (200, "sick")
    record(
        19, "queue-actor-crashing",
        tried="a queue actor crashed 11 times in a row (fault point queue.patch:raise), past "
        "its restart budget of 10 a minute; other queues, namespaces and healthz meanwhile",
        passed=True,
        note="healthz 503 degraded naming queue:default/sick while down; other queues and "
        "namespaces answered 2xx; back without a restart after its 5 s back-off",
    )  # fmt: skip
