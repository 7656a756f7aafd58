"""Restart is normal: a second start on the same data dir keeps rows, states and streams."""

from __future__ import annotations

from lakeshore.plane import ControlPlane


async def test_restart_keeps_rows_states_and_streams(plane_factory, js):
    first = await plane_factory()
    async with first.client() as api:
        await api.post("/v1/namespaces", {"name": "bob", "org": "acme"})
        token = (await api.post("/v1/namespaces/bob/tokens", {}))[1]["token"]
        await api.post(
            "/v1/namespaces/bob/queues",
            {"name": "training-h100", "kind": "priority", "max_depth": 7},
        )
        await api.post("/v1/namespaces/bob/queues", {"name": "eval"})
        await api.post("/v1/namespaces/bob/queues/eval/drain")
        await api.post("/v1/namespaces/bob/queues", {"name": "old"})
        await api.post("/v1/namespaces/bob/queues/old/archive")
        before = (await api.get("/v1/namespaces/bob/queues"))[1]
    await js.publish("ls.bob.q.training-h100.p5", b"pending work")
    data_dir = first.data_dir
    await first.stop()

    second = await plane_factory(data_dir=data_dir)
    assert second.plane.admin_token is None, "bootstrap must run only once"
    async with second.client(token=first.admin_secret) as api:
        after = (await api.get("/v1/namespaces/bob/queues"))[1]
        assert after == before
        states = {q["name"]: q["state"] for q in after["queues"]}
        assert states == {
            "default": "active",
            "training-h100": "active",
            "eval": "draining",
            "old": "archived",
        }
        stats = (await api.get("/v1/namespaces/bob/queues/training-h100/stats"))[1]
        assert stats["pending"] == 1
        status, _ = await api.request("GET", "/v1/namespaces/bob/queues", token=token)
        assert status == 200
        events = (await api.get("/v1/namespaces/bob/queues/eval/events"))[1]["events"]
        assert [e["type"] for e in events] == ["drained", "created"]
    si = await js.stream_info("LS_bob_training-h100")
    assert si.config.max_msgs == 7 and si.state.messages == 1
    assert isinstance(second.plane, ControlPlane)
