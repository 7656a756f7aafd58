"""The queue routes against a real control plane, one test per sentence of the seed."""

from __future__ import annotations

import pytest
from nats.js import errors as jse

from lakeshore.bus import subjects
from lakeshore.model import DEFAULT_QUEUE_DESCRIPTION

Q = "/v1/namespaces/default/queues"


async def test_queue_names_must_match_the_pattern(api):
    for bad in ["Training", "-x", "a_b", "a.b", "x" * 64, "ü"]:
        status, body = await api.post(Q, {"name": bad})
        assert status == 400, bad
        assert body["error"]["code"] == "invalid_name"
        assert "[a-z0-9]" in body["error"]["message"] or "at most 63" in body["error"]["message"]
    status, body = await api.post(Q, {"name": "a" * 63})
    assert status == 201
    status, _ = await api.post(Q, {"name": "training-h100"})
    assert status == 201


async def test_bad_name_in_a_path_is_a_400(api):
    status, body = await api.get(Q + "/Bad_Name")
    assert status == 400
    assert body["error"]["code"] == "invalid_name"


async def test_default_queue_is_materialised_on_first_ls(api):
    status, body = await api.get(Q)
    assert status == 200
    rows = [q for q in body["queues"] if q["namespace"] == "default"]
    assert [q["name"] for q in rows] == ["default"]
    assert rows[0]["kind"] == "fifo"
    assert rows[0]["description"] == DEFAULT_QUEUE_DESCRIPTION
    assert rows[0]["description"] == (
        "Default queue (auto-created). Cannot be archived or deleted."
    )


async def test_default_queue_is_materialised_on_first_show(api):
    await api.post("/v1/namespaces", {"name": "fresh"})
    status, body = await api.get("/v1/namespaces/fresh/queues/default")
    assert status == 200
    assert body["kind"] == "fifo" and body["state"] == "active"
    assert body["description"] == DEFAULT_QUEUE_DESCRIPTION
    assert body["members"] == []


async def test_default_is_reserved(api):
    await api.get(Q)
    status, body = await api.post(Q + "/default/archive")
    assert status == 409 and body["error"]["code"] == "reserved_name"
    status, body = await api.delete(Q + "/default")
    assert status == 409 and body["error"]["code"] == "reserved_name"
    status, body = await api.delete(Q + "/default?force=true")
    assert status == 409
    status, body = await api.post(Q, {"name": "default"})
    assert status == 409 and body["error"]["code"] == "reserved_name"
    status, body = await api.get(Q + "/default")
    assert body["state"] == "active"


async def test_lifecycle_drain_archive_unarchive_rm(api):
    await api.post(Q, {"name": "training-h100", "kind": "priority"})
    status, body = await api.post(Q + "/training-h100/drain")
    assert (status, body["state"]) == (200, "draining")
    status, body = await api.post(Q + "/training-h100/unarchive")
    assert (status, body["state"]) == (200, "active")
    status, body = await api.post(Q + "/training-h100/archive")
    assert (status, body["state"]) == (200, "archived")
    status, body = await api.get(Q + "/training-h100")
    assert (status, body["state"]) == (200, "archived")
    status, body = await api.post(Q + "/training-h100/drain")
    assert status == 409 and body["error"]["code"] == "wrong_state"
    status, body = await api.post(Q + "/training-h100/unarchive")
    assert (status, body["state"]) == (200, "active")
    status, body = await api.delete(Q + "/training-h100")
    assert status == 200 and body["deleted"] == "training-h100"
    status, body = await api.get(Q + "/training-h100")
    assert status == 404 and body["error"]["code"] == "queue_not_found"


async def test_repeating_a_transition_is_a_no_op(api):
    await api.post(Q, {"name": "q"})
    await api.post(Q + "/q/drain")
    status, body = await api.post(Q + "/q/drain")
    assert (status, body["state"]) == (200, "draining")
    events = (await api.get(Q + "/q/events"))[1]["events"]
    assert [e["type"] for e in events].count("drained") == 1


async def test_rm_deletes_the_stream(api, js):
    await api.post(Q, {"name": "gone"})
    stream = subjects.queue_stream("default", "gone")
    assert (await js.stream_info(stream)).config.name == stream
    await api.delete(Q + "/gone")
    with pytest.raises(jse.NotFoundError):
        await js.stream_info(stream)


async def test_paused_is_declared_but_no_route_sets_it(api):
    await api.post(Q, {"name": "q"})
    status, body = await api.patch(Q + "/q", {"state": "paused"})
    assert status == 400 and "state" in body["error"]["message"]
    status, _ = await api.post(Q + "/q/pause")
    assert status in (404, 405)
    status, body = await api.get(Q + "?state=paused")
    assert status == 200 and body["queues"] == []
    status, body = await api.get(Q + "?state=sleeping")
    assert status == 400 and "active, draining, archived, paused" in body["error"]["message"]


async def test_ls_filters_by_state(api):
    await api.post(Q, {"name": "a"})
    await api.post(Q, {"name": "b"})
    await api.post(Q + "/b/archive")
    status, body = await api.get(Q + "?state=active")
    assert sorted(q["name"] for q in body["queues"]) == ["a", "default"]
    status, body = await api.get(Q + "?state=archived")
    assert [q["name"] for q in body["queues"]] == ["b"]


async def test_ls_pages_chain_without_gaps_or_repeats(api):
    await api.post("/v1/namespaces", {"name": "aaa"})  # same org, sorts first
    for name in ["q-3", "q-1", "q-5", "q-2", "q-4"]:
        assert (await api.post(Q, {"name": name}))[0] == 201
    assert (await api.post("/v1/namespaces/aaa/queues", {"name": "z"}))[0] == 201
    status, whole = await api.get(Q)
    assert status == 200 and "next" not in whole  # no ?limit=: the whole list, as before
    expected = [(q["namespace"], q["name"]) for q in whole["queues"]]
    assert expected[:2] == [("aaa", "z"), ("default", "default")] and len(expected) == 7
    pages, after = [], None
    while True:
        status, body = await api.get(Q + "?limit=3" + (f"&after={after}" if after else ""))
        assert status == 200
        pages.append([(q["namespace"], q["name"]) for q in body["queues"]])
        after = body.get("next")
        if after is None:
            break
        assert after == "/".join(pages[-1][-1])
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [row for page in pages for row in page] == expected
    status, body = await api.get(Q + "?limit=2&state=active&after=default/q-2")
    assert [q["name"] for q in body["queues"]] == ["q-3", "q-4"]
    # A cursor whose queue is gone still continues after where it was.
    assert (await api.delete(Q + "/q-3"))[0] == 200
    status, body = await api.get(Q + "?limit=1&after=default/q-3")
    assert [q["name"] for q in body["queues"]] == ["q-4"]


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=1001", "limit=x", "after=q-1", "after=default/Q", "after=a/b/c"]
)
async def test_bad_ls_page_parameters_are_400(api, query):
    status, body = await api.get(f"{Q}?{query}")
    assert status == 400, body
    assert query.split("=")[0] in body["error"]["message"]


async def test_create_conflicts_and_validation(api):
    assert (await api.post(Q, {"name": "q"}))[0] == 201
    status, body = await api.post(Q, {"name": "q"})
    assert status == 409 and body["error"]["code"] == "already_exists"
    status, body = await api.post(Q, {"name": "r", "kind": "lifo"})
    assert status == 400 and "$.kind" in body["error"]["message"]
    status, body = await api.post(Q, {"name": "r", "max_depth": 0})
    assert status == 400 and "$.max_depth" in body["error"]["message"]
    status, body = await api.post(Q, {"name": "r", "colour": "red"})
    assert status == 400 and "colour" in body["error"]["message"]
    status, body = await api.post(Q, {"name": "r", "elasticity": {"kind": "elastic"}})
    assert status == 400 and "max" in body["error"]["message"]
    assert (await api.get(Q + "/r"))[0] == 404


async def test_bad_json_is_a_400_not_a_500(api):
    status, body = await api.request("POST", Q, data=b"{not json")
    assert status == 400 and body["error"]["code"] == "invalid"
    status, body = await api.request("POST", Q, data=b"[1,2]")
    assert status == 400


async def test_patch_in_place(api):
    await api.post(Q, {"name": "training-h100", "kind": "priority"})
    status, body = await api.patch(Q + "/training-h100", {"max_depth": 1000, "on_full": "reject"})
    assert status == 200 and body["max_depth"] == 1000 and body["on_full"] == "reject"
    status, body = await api.patch(Q + "/training-h100", {"description": "h100 production"})
    assert status == 200 and body["description"] == "h100 production"
    assert body["max_depth"] == 1000
    status, body = await api.patch(Q + "/training-h100", {"max_depth": None})
    assert status == 200 and body["max_depth"] is None


async def test_labels_are_set_at_creation_replaced_by_patch_and_kept_over_a_restart(
    plane_factory,
):
    handle = await plane_factory()
    async with handle.client() as api:
        body = {"name": "prep", "labels": {"lakeshore.io/project": "demo"}}
        status, row = await api.post(Q, body)
        assert (status, row["labels"]) == (201, {"lakeshore.io/project": "demo"})
        assert (await api.get(Q))[1]["queues"][-1]["labels"] == row["labels"]
        status, row = await api.patch(Q + "/prep", {"labels": {"team": "ml"}})
        assert (status, row["labels"]) == (200, {"team": "ml"})
        status, answer = await api.patch(Q + "/prep", {"labels": {"": "x"}})
        assert status == 400, answer
    await handle.stop()
    again = await plane_factory(data_dir=handle.data_dir)
    async with again.client() as api:
        assert (await api.get(Q + "/prep"))[1]["labels"] == {"team": "ml"}


async def test_patch_cannot_change_the_queue_kind(api):
    await api.post(Q, {"name": "q"})
    status, body = await api.patch(Q + "/q", {"kind": "priority"})
    assert status == 400 and body["error"]["code"] == "immutable_field"
    assert "kind" in body["error"]["message"]
    assert (await api.get(Q + "/q"))[1]["kind"] == "fifo"


async def test_patch_the_elasticity_object_over_http(api):
    await api.post(Q, {"name": "cpu-prep", "elasticity": {"kind": "fixed"}})
    status, body = await api.patch(
        Q + "/cpu-prep", {"elasticity": {"kind": "fully_elastic", "max": 8, "pool": "mixed"}}
    )
    assert status == 200, body
    e = body["elasticity"]
    assert (e["kind"], e["max"], e["pool"], e["min"]) == ("fully_elastic", 8, "mixed", 0)
    status, body = await api.patch(
        Q + "/cpu-prep",
        {"elasticity": {"match": {"gpu": "h100"}, "steal_delay_s": 5, "cost_weight": 2.5}},
    )
    assert status == 200
    e = body["elasticity"]
    assert (e["kind"], e["pool"], e["match"], e["steal_delay_s"], e["cost_weight"]) == (
        "fully_elastic",
        "mixed",
        {"gpu": "h100"},
        5,
        2.5,
    )
    status, body = await api.patch(Q + "/cpu-prep", {"elasticity": {"kind": "elastic"}})
    assert status == 200 and body["elasticity"]["min"] == 1


@pytest.mark.parametrize(
    ("elasticity", "needle"),
    [
        ({"kind": "elastic", "max": 2, "min": 3}, "max (2) must be ≥ min (3)"),
        ({"kind": "elastic", "max": 2, "min": 0}, "min must be ≥ 1"),
        ({"kind": "burst"}, "needs max ≥ 1"),
        ({"kind": "wobbly"}, "unknown elasticity kind"),
        ({"cost_weight": 0}, "$.elasticity.cost_weight"),
        ({"target_pending": 0}, "$.elasticity.target_pending"),
        ({"steal_delay_s": -1}, "$.elasticity.steal_delay_s"),
        ({"pool": "Bad Pool"}, "$.elasticity.pool"),
        ({"maxx": 3}, "unknown elasticity field"),
    ],
)
async def test_bad_elasticity_is_a_clear_400_and_changes_nothing(api, elasticity, needle):
    await api.post(Q, {"name": "q"})
    before = (await api.get(Q + "/q"))[1]
    status, body = await api.patch(Q + "/q", {"elasticity": elasticity})
    assert status == 400
    assert needle in body["error"]["message"]
    after = (await api.get(Q + "/q"))[1]
    assert after == before


async def test_max_depth_is_the_stream_limit(api, js):
    await api.post(Q, {"name": "q", "max_depth": 5})
    assert (await js.stream_info("LS_default_q")).config.max_msgs == 5
    await api.patch(Q + "/q", {"max_depth": 10})
    assert (await js.stream_info("LS_default_q")).config.max_msgs == 10
    await api.patch(Q + "/q", {"max_depth": None})
    assert (await js.stream_info("LS_default_q")).config.max_msgs == -1


async def test_priority_queue_has_a_consumer_per_level(api, js):
    await api.post(Q, {"name": "fifo-q"})
    await api.post(Q, {"name": "prio-q", "kind": "priority"})
    fifo = sorted(c.name for c in await js.consumers_info("LS_default_fifo-q"))
    prio = sorted(c.name for c in await js.consumers_info("LS_default_prio-q"))
    assert fifo == ["p0"]
    assert prio == sorted(f"p{i}" for i in range(10))


async def test_every_mutation_is_an_event_newest_first(api, admin_token_id):
    await api.post(Q, {"name": "q"})
    await api.patch(Q + "/q", {"description": "d"})
    await api.post(Q + "/q/drain")
    await api.post(Q + "/q/archive")
    await api.post(Q + "/q/unarchive")
    status, body = await api.get(Q + "/q/events")
    assert status == 200
    types = [e["type"] for e in body["events"]]
    assert types == ["unarchived", "archived", "drained", "patched", "created"]
    assert all(e["actor"] == admin_token_id for e in body["events"])
    assert all(e["detail"] is None for e in body["events"])
    status, body = await api.get(Q + "/q/events?verbose=true&limit=2")
    assert [e["type"] for e in body["events"]] == ["unarchived", "archived"]
    detail = body["events"][1]["detail"]
    assert detail["before"]["state"] == "draining" and detail["after"]["state"] == "archived"
    status, body = await api.get(Q + "/q/events?limit=0")
    assert status == 400


async def test_a_re_created_queue_shows_only_its_own_events(api):
    await api.post(Q, {"name": "q"})
    await api.post(Q + "/q/drain")
    assert (await api.delete(Q + "/q"))[0] == 200
    assert (await api.post(Q, {"name": "q"}))[0] == 201
    status, body = await api.get(Q + "/q/events")
    assert status == 200 and [e["type"] for e in body["events"]] == ["created"]


async def test_stats_counts_pending_from_jetstream(api, js):
    await api.post(Q, {"name": "q", "kind": "priority"})
    for level in (0, 3, 9):
        await js.publish(f"ls.default.q.q.p{level}", b"x")
    status, body = await api.get(Q + "/q/stats")
    assert status == 200
    assert body["pending"] == 3 and body["running"] == 0 and body["depth"] == 3
    assert body["daemon_count"] == 0 and body["utilization"] == 0.0
