"""Membership lives on the worker row: Worker.queues, the empty array being the default."""

from __future__ import annotations

from lakeshore.model import WorkerStatus

Q = "/v1/namespaces/default/queues"
W = "/v1/namespaces/default/workers"


async def test_a_daemon_without_queues_is_in_the_default_queue(api, register):
    scratch = await register("scratch")
    status, body = await api.get(W + "/scratch")
    assert status == 200 and body["queues"] == [] and body["id"] == scratch.id
    members = (await api.get(Q + "/default"))[1]["members"]
    assert [m["name"] for m in members] == ["scratch"]


async def test_the_lookup_accepts_a_literal_default_entry(api, register):
    await api.post(Q, {"name": "eval"})
    await register("literal", queues=["default", "eval"])
    assert [m["name"] for m in (await api.get(Q + "/default"))[1]["members"]] == ["literal"]
    assert [m["name"] for m in (await api.get(Q + "/eval"))[1]["members"]] == ["literal"]


async def test_show_reports_who_pulls_from_a_queue(api, register):
    await api.post(Q, {"name": "training-h100"})
    await api.post(Q, {"name": "eval"})
    await register("daemon-a", queues=["training-h100"])
    await register("daemon-b", queues=["training-h100", "eval"])
    await register("daemon-c")
    body = (await api.get(Q + "/training-h100"))[1]
    assert sorted(m["name"] for m in body["members"]) == ["daemon-a", "daemon-b"]
    assert [m["name"] for m in (await api.get(Q + "/eval"))[1]["members"]] == ["daemon-b"]
    stats = (await api.get(Q + "/training-h100/stats"))[1]
    assert stats["daemon_count"] == 2


async def test_edit_membership_on_a_running_daemon(api, register):
    await api.post(Q, {"name": "training-h100"})
    await api.post(Q, {"name": "eval"})
    await register("train-00", queues=["training-h100"])
    status, body = await api.post(W + "/train-00/queues", {"add": ["eval"]})
    assert status == 200 and body["queues"] == ["training-h100", "eval"]
    assert [m["name"] for m in (await api.get(Q + "/eval"))[1]["members"]] == ["train-00"]
    status, body = await api.post(W + "/train-00/queues", {"remove": ["eval"]})
    assert status == 200 and body["queues"] == ["training-h100"]
    events = (await api.get(Q + "/eval/events"))[1]["events"]
    assert [e["type"] for e in events][:2] == ["member_removed", "member_added"]


async def test_explicit_add_and_remove_reject_default(api, register):
    await register("w")
    for edit in ({"add": ["default"]}, {"remove": ["default"]}):
        status, body = await api.post(W + "/w/queues", edit)
        assert status == 400
        assert "empty array" in body["error"]["message"]
    assert (await api.get(W + "/w"))[1]["queues"] == []


async def test_membership_edit_errors(api, register):
    w = await register("w")
    status, body = await api.post(W + "/ghost/queues", {"add": []})
    assert status == 404 and body["error"]["code"] == "worker_not_found"
    status, body = await api.post(W + "/w/queues", {"add": ["Bad"]})
    assert status == 400
    status, body = await api.post(W + "/w/queues", {"ad": ["x"]})
    assert status == 400 and "ad" in body["error"]["message"]
    status, body = await api.get(W + "/" + w.id)
    assert status == 200 and body["name"] == "w"


async def test_rm_refuses_while_the_queue_has_members(api, register):
    await api.post(Q, {"name": "cpu-prep"})
    await register("prep-00", queues=["cpu-prep"])
    status, body = await api.delete(Q + "/cpu-prep")
    assert status == 409 and body["error"]["code"] == "queue_has_members"
    assert "prep-00" in body["error"]["message"]
    assert (await api.get(Q + "/cpu-prep"))[0] == 200


async def test_rm_force_scrubs_every_worker_first(api, register):
    await api.post(Q, {"name": "cpu-prep"})
    await api.post(Q, {"name": "eval"})
    await register("prep-00", queues=["cpu-prep"])
    await register("prep-01", queues=["cpu-prep", "eval"])
    await register("old", queues=["cpu-prep"], status=WorkerStatus.STOPPED)
    status, body = await api.delete(Q + "/cpu-prep?force=true")
    assert status == 200
    assert sorted(body["scrubbed"]) == ["old", "prep-00", "prep-01"]
    workers = {w["name"]: w["queues"] for w in (await api.get(W))[1]["workers"]}
    assert workers == {"old": [], "prep-00": [], "prep-01": ["eval"]}
    assert (await api.get(Q + "/cpu-prep"))[0] == 404


async def test_stopped_workers_are_not_members(api, register):
    await api.post(Q, {"name": "q"})
    await register("gone", queues=["q"], status=WorkerStatus.STOPPED)
    assert (await api.get(Q + "/q"))[1]["members"] == []
    assert (await api.delete(Q + "/q"))[0] == 200


async def test_a_queue_may_be_added_before_it_exists(api, register):
    await register("train-00", queues=["training-h100"])
    status, body = await api.post(W + "/train-00/queues", {"add": ["eval"]})
    assert status == 200 and body["queues"] == ["training-h100", "eval"]
    await api.post(Q, {"name": "eval"})
    assert [m["name"] for m in (await api.get(Q + "/eval"))[1]["members"]] == ["train-00"]


async def test_adding_a_queue_that_does_not_exist_succeeds_with_a_warning(api, register):
    await api.post(Q, {"name": "training-h100"})
    await register("train-00")
    status, body = await api.post(W + "/train-00/queues", {"add": ["training-h100", "eval"]})
    assert status == 200 and body["queues"] == ["training-h100", "eval"]
    [warning] = body["warnings"]
    assert warning.startswith("queue_not_found: queue 'eval' does not exist in namespace")
    assert "lakeshore queues add eval" in warning
    await api.post(Q, {"name": "eval"})
    status, body = await api.post(W + "/train-00/queues", {"remove": ["eval"], "add": ["eval"]})
    assert status == 200 and body["warnings"] == []
    status, body = await api.post(W + "/train-00/queues", {"remove": ["gone"]})
    assert status == 200 and body["warnings"] == []
    assert "warnings" not in (await api.get(W + "/train-00"))[1]


async def test_the_openapi_answer_of_a_membership_edit_has_its_warnings(api):
    status, doc = await api.request("GET", "/v1/openapi.json", token=None)
    op = doc["paths"]["/v1/namespaces/{ns}/workers/{id}/queues"]["post"]
    ref = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.endswith("/WorkerEdited")
    schema = doc["components"]["schemas"]["WorkerEdited"]
    assert schema["properties"]["warnings"]["type"] == "array"
    assert {"id", "name", "queues"} <= set(schema["properties"])


async def test_a_patch_replaces_a_running_workers_labels_and_refuses_bad_ones(api, register):
    await register("labelled", queues=["eval"])
    status, body = await api.patch(W + "/labelled", {"labels": {"team": "vision"}})
    assert (status, body["labels"]) == (200, {"team": "vision"}), body
    assert (await api.get(W + "/labelled"))[1]["labels"] == {"team": "vision"}
    status, body = await api.patch(W + "/labelled", {"labels": {"a=b": "x"}})
    assert status == 400 and "label key" in body["error"]["message"], body
    status, body = await api.patch(W + "/labelled", {"queues": ["x"]})
    assert status == 400, body
    assert (await api.get(W + "/labelled"))[1]["labels"] == {"team": "vision"}
    status, body = await api.patch(W + "/nobody", {"labels": {}})
    assert (status, body["error"]["code"]) == (404, "worker_not_found"), body
