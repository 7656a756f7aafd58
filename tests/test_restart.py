"""Restart is normal: a second start on the same data dir keeps rows, states and streams."""

from __future__ import annotations

from polling import eventually

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
    # The draining and archived queues' streams still take no publish after the restart.
    for queue in ("eval", "old"):
        config = (await js.stream_info(f"LS_bob_{queue}")).config
        assert config.subjects == [f"ls.bob.closed.{queue}.*"], config
    assert isinstance(second.plane, ControlPlane)


async def test_a_deleted_store_is_rebuilt_from_the_streams_on_the_next_start(plane_factory, js):
    """The file is a projection: delete it, start again, and every row and the history
    come back from LS_STATE and LS_EVENTS."""
    first = await plane_factory()
    async with first.client() as api:
        await api.post("/v1/namespaces", {"name": "bob", "org": "acme"})
        token = (await api.post("/v1/namespaces/bob/tokens", {}))[1]["token"]
        await api.post("/v1/namespaces/bob/queues", {"name": "eval", "max_depth": 7})
        await api.post("/v1/namespaces/bob/queues/eval/drain")
        body = {"invocations": [{"command": ["true"], "idempotency_key": "k1"}]}
        submitted = (await api.post("/v1/namespaces/bob/queues/default/invocations", body))[1]
        before = (await api.get("/v1/namespaces/bob/queues"))[1]
        events = (await api.get("/v1/namespaces/bob/queues/eval/events"))[1]
    data_dir = first.data_dir
    await first.stop()
    for path in data_dir.glob("lakeshore.duckdb*"):
        path.unlink()

    second = await plane_factory(data_dir=data_dir)
    assert second.plane.admin_token is None, "the admin token is a row: rebuilt, not made"
    async with second.client(token=first.admin_secret) as api:
        assert (await api.get("/v1/namespaces/bob/queues"))[1] == before
        assert (await api.get("/v1/namespaces/bob/queues/eval/events"))[1] == events
        status, _ = await api.request("GET", "/v1/namespaces/bob/queues", token=token)
        assert status == 200
        [job] = submitted["ids"]
        # The history is read again from the events stream by the new file's Recorder.
        await eventually(
            lambda: api.get(f"/v1/namespaces/bob/jobs/{job}"), until=lambda r: r[0] == 200,
            timeout_s=30, what="the job in the rebuilt history",
        )  # fmt: skip
        # The idempotency key came back too: the same key names the same invocation.
        again = (await api.post("/v1/namespaces/bob/queues/default/invocations", body))[1]
        assert again["ids"] == [job]
