"""``compose up / diff / down`` against a real control plane, with real local daemons.

Daemon counts are kept to one or two: each is a ``lakeshore daemon run`` subprocess. The
control plane stops its local daemons when the fixture stops it.
"""

from __future__ import annotations

import json

from composing import DAEMON_WAIT_S, Live, cli_for, plan_lines
from polling import eventually

from lakeshore.cli.compose import CHANGES_PENDING
from lakeshore.cli.exits import API_ERROR
from lakeshore.compose import DAEMON_LABEL, PROJECT_LABEL
from lakeshore.quotas import Quotas

OURS = {PROJECT_LABEL: "demo"}

#: The spec's example with stand-ins: ``my-gpu`` is an ssh provider (created without
#: reaching its host) but the daemons run on ``local``, two ``prep`` and one ``train``; the
#: elastic queue's controller-managed daemon is launched on ``local`` too.
EXAMPLE = """
    namespace: default
    providers:
      my-gpu: {kind: ssh, config: {hosts: [127.0.0.1], user: lake, python: /opt/venv/bin/python}}
      my-hpc: {kind: slurm, config: {partition: gpu, gres: "gpu:1", time: "04:00:00"}}
    queues:
      cpu-prep:      {kind: fifo, elasticity: {kind: fixed}}
      training-h100: {kind: priority, max_depth: 1000, on_full: reject,
                      elasticity: {kind: elastic, min: 1, max: 8, provider: local, pool: gpu}}
    daemons:
      prep:  {provider: local, queues: [cpu-prep], count: 2}
      train: {provider: local, queues: [training-h100], count: 1, labels: {gpu: h100}}
"""


def group_file(count: int) -> str:
    return f"""
        queues:
          train-q: {{}}
        daemons:
          train: {{queues: [train-q], count: {count}}}
    """


async def test_up_creates_the_example_and_a_second_up_changes_nothing(
    cli, compose_file, live, control_plane
):
    compose_file(EXAMPLE)
    first = await cli("compose", "up")
    assert plan_lines(first.stdout) == [
        "+ provider my-gpu (ssh)",
        "+ provider my-hpc (slurm)",
        "+ queue cpu-prep (fifo, fixed)",
        "+ queue training-h100 (priority, elastic 1..8 on local pool gpu)",
        "+ daemons prep: launch prep-00 prep-01 on local",
        "+ daemons train: launch train on local",
    ]
    assert first.stdout.startswith("namespace default (project demo)\n")
    assert "3/3 registered" in first.stderr

    providers = await live.providers()
    assert providers["my-gpu"].kind == "ssh" and providers["my-gpu"].labels == OURS
    assert providers["my-hpc"].config == {"partition": "gpu", "gres": "gpu:1", "time": "04:00:00"}
    queues = await live.queues()
    h100 = queues["training-h100"]
    assert (h100.kind, h100.max_depth, h100.on_full) == ("priority", 1000, "reject")
    assert h100.labels == OURS
    e = h100.elasticity
    assert (e.kind, e.min, e.max, e.provider, e.pool) == ("elastic", 1, 8, "local", "gpu")
    workers = await live.workers()
    assert {n: (w.status, w.queues) for n, w in workers.items()} == {
        "prep-00": ("idle", ["cpu-prep"]),
        "prep-01": ("idle", ["cpu-prep"]),
        "train": ("idle", ["training-h100"]),
    }
    assert workers["train"].labels == {"gpu": "h100", **OURS, DAEMON_LABEL: "train"}

    # The elastic queue's managed daemon is the controller's: neither a member nor unmanaged.
    async with live.client() as c:
        await eventually(
            lambda: _managed(c), timeout_s=DAEMON_WAIT_S, what="the controller's daemon"
        )
    second = await cli("compose", "up")
    assert plan_lines(second.stdout) == []
    assert second.stdout.strip().endswith("no changes")
    in_sync = await cli("compose", "diff")
    assert plan_lines(in_sync.stdout) == ["in sync"]
    as_json = json.loads((await cli("compose", "up", "-o", "json")).stdout)
    assert (as_json["applied"], as_json["failed"], as_json["launched"]) == ([], None, [])


async def _managed(client) -> bool:
    return any(w.managed for w in await client.workers_ls())


async def test_diff_after_a_manual_patch_shows_exactly_that_field(cli, compose_file):
    compose_file("""
        queues:
          cpu-prep: {max_depth: 500, description: prep}
          other: {kind: priority}
    """)
    await cli("compose", "up")
    await cli("queues", "patch", "cpu-prep", "--max-depth", "1000")

    diff = await cli("compose", "diff", expect=CHANGES_PENDING)
    assert plan_lines(diff.stdout) == ["~ queue cpu-prep: max_depth: 1000 → 500"]
    assert diff.stdout.splitlines()[-1] == "1 to change"
    as_json = json.loads(
        (await cli("compose", "diff", "-o", "json", expect=CHANGES_PENDING)).stdout
    )
    (change,) = as_json["changes"]
    assert (change["op"], change["subject"], change["name"]) == ("patch", "queue", "cpu-prep")
    assert change["fields"] == [{"field": "max_depth", "old": 1000, "new": 500}]
    action = {"type": "patch_queue", "name": "cpu-prep", "body": {"max_depth": 500}}
    assert change["action"] == action
    assert as_json["pending"] is True

    up = await cli("compose", "up")
    assert plan_lines(up.stdout) == ["~ queue cpu-prep: max_depth: 1000 → 500"]
    await cli("compose", "diff")


async def test_down_leaves_unmanaged_objects_alone(cli, compose_file, live):
    compose_file("""
        queues:
          work: {}
        daemons:
          worker: {queues: [work], count: 1}
    """)
    await cli("compose", "up")
    await cli("queues", "add", "scratch")
    await cli("daemon", "launch", "--name", "scratch", "--queue", "scratch", "--wait")
    diff = await cli("compose", "diff")
    assert plan_lines(diff.stdout) == ["? unmanaged queue scratch", "? unmanaged daemon scratch"]

    down = await cli("compose", "down")
    assert plan_lines(down.stdout) == ["- daemons worker: retire worker", "- queue work: archive"]
    queues = await live.queues()
    assert (queues["work"].state, queues["scratch"].state) == ("archived", "active")
    await eventually(
        live.statuses,
        until=lambda s: s == {"scratch": "idle"},
        timeout_s=DAEMON_WAIT_S,
        what="the declared daemon to stop and the hand-launched one to stay",
    )
    again = await cli("compose", "down")
    assert again.stdout.strip().endswith("no changes")


async def test_down_rm_deletes_the_projects_queues_and_providers(cli, compose_file, live):
    compose_file("""
        providers:
          gpu: {kind: ssh, config: {hosts: [127.0.0.1]}}
        queues:
          work: {}
          shared: {}
    """)
    await cli("queues", "add", "shared")  # made by hand; up adopts it (labels it)
    await cli("compose", "up")
    assert (await live.queues())["shared"].labels == OURS
    await cli("compose", "down", "--rm")
    assert list(await live.queues()) == ["default"]
    assert list(await live.providers()) == ["local"]


async def test_up_after_a_half_failed_apply_finishes_the_job(
    plane_factory, compose_file, project_dir
):
    plane = await plane_factory(quotas=Quotas(queues_per_namespace=2))
    cli, live = cli_for(plane), Live(plane)
    compose_file("""
        providers:
          gpu: {kind: ssh, config: {hosts: [127.0.0.1]}}
        queues:
          first: {}
          second: {}
        daemons:
          worker: {queues: [first, second], count: 1}
    """)
    await cli("queues", "add", "scratch")  # with it, only one more queue fits the quota

    failed = await cli("compose", "up", expect=API_ERROR)
    assert plan_lines(failed.stdout) == [
        "+ provider gpu (ssh)",
        "+ queue first (fifo, fixed)",
        "? unmanaged queue scratch",
    ]
    err = failed.stderr.splitlines()
    assert err[0].startswith("error: + queue second (fifo, fixed): ")
    assert "queues_per_namespace" in err[0]
    assert err[1:] == [
        "applied: 2 change(s) (listed above)",
        "not applied:",
        "  + queue second (fifo, fixed)",
        "  + daemons worker: launch worker on local",
        "run the same command again to finish: it plans only what is left",
    ]
    assert set(await live.queues()) == {"default", "scratch", "first"}
    assert await live.workers() == {}

    await cli("queues", "rm", "scratch")
    finished = await cli("compose", "up")
    assert plan_lines(finished.stdout) == [
        "+ queue second (fifo, fixed)",
        "+ daemons worker: launch worker on local",
    ]
    assert await live.statuses() == {"worker": "idle"}
    await cli("compose", "diff")


async def test_count_changes_launch_and_retire_the_right_names(cli, compose_file, live):
    compose_file(group_file(2))
    up = await cli("compose", "up")
    assert "+ daemons train: launch train-00 train-01 on local" in plan_lines(up.stdout)

    compose_file(group_file(3))
    diff = await cli("compose", "diff", expect=CHANGES_PENDING)
    assert plan_lines(diff.stdout) == ["+ daemons train: launch train-02 on local"]
    await cli("compose", "up")
    assert await live.statuses() == {"train-00": "idle", "train-01": "idle", "train-02": "idle"}

    compose_file(group_file(1))
    down_to_one = await cli("compose", "up")
    assert plan_lines(down_to_one.stdout) == ["- daemons train: retire train-02 train-01"]
    await eventually(
        live.statuses,
        until=lambda s: s == {"train-00": "idle"},
        timeout_s=DAEMON_WAIT_S,
        what="train-01 and train-02 to stop",
    )
    await cli("compose", "diff")


async def test_membership_is_changed_in_place(cli, compose_file, live):
    compose_file(group_file(1))
    await cli("compose", "up")
    before = (await live.workers())["train"]
    compose_file("""
        queues:
          train-q: {}
          eval: {}
        daemons:
          train: {queues: [train-q, eval], count: 1}
    """)
    up = await cli("compose", "up")
    assert plan_lines(up.stdout) == [
        "+ queue eval (fifo, fixed)",
        '~ daemon train: queues: ["train-q"] → ["train-q", "eval"]',
    ]
    after = (await live.workers())["train"]
    assert (after.id, after.queues) == (before.id, ["train-q", "eval"])


async def test_orphans_are_shown_and_removed_only_when_asked(cli, compose_file, live):
    compose_file("queues:\n  keep: {}\n  old: {}\n")
    await cli("compose", "up")
    compose_file("queues:\n  keep: {}\n")
    diff = await cli("compose", "diff")
    assert plan_lines(diff.stdout) == ["? orphan queue old (up --remove-orphans would archive it)"]
    await cli("compose", "up")
    assert (await live.queues())["old"].state == "active"
    removed = await cli("compose", "up", "--remove-orphans")
    assert plan_lines(removed.stdout) == ["- queue old: archive (orphan)"]
    assert (await live.queues())["old"].state == "archived"
    assert plan_lines((await cli("compose", "diff")).stdout) == ["in sync"]


async def test_a_kind_change_cannot_be_applied(cli, compose_file, live):
    compose_file("queues:\n  q: {kind: fifo}\n  r: {}\n")
    await cli("compose", "up")
    compose_file("queues:\n  q: {kind: priority}\n  r: {description: later}\n")
    await cli("compose", "diff", expect=CHANGES_PENDING)
    up = await cli("compose", "up", expect=API_ERROR)
    printed = plan_lines(up.stdout)
    assert printed[0] == '! queue q: kind: "fifo" → "priority"'
    assert printed[1].startswith("a queue's kind is fixed: delete it (lakeshore queues rm q")
    assert printed[2] == '~ queue r: description: "" → "later"'
    assert "error: 1 change cannot be applied" in up.stderr
    assert (await live.queues())["r"].description == "later"


async def test_several_namespaces_and_a_new_one(cli, compose_file, live):
    compose_file("""
        project: multi
        namespaces:
          default:
            queues: {here: {}}
          team-b:
            queues: {there: {kind: priority}}
    """)
    up = await cli("compose", "up")
    assert up.stdout.splitlines() == [
        "namespace default (project multi)",
        "  + queue here (fifo, fixed)",
        "namespace team-b (project multi)",
        "  + namespace team-b",
        "  + queue there (priority, fixed)",
    ]
    assert (await live.queues("team-b"))["there"].labels == {PROJECT_LABEL: "multi"}
    assert (await cli("compose", "diff")).stdout.count("in sync") == 2


async def test_the_project_name_comes_from_the_flag(cli, compose_file, live):
    compose_file("queues:\n  q: {}\n")
    await cli("compose", "up", "-p", "other")
    assert (await live.queues())["q"].labels == {PROJECT_LABEL: "other"}
    diff = await cli("compose", "diff", expect=CHANGES_PENDING)  # as project demo
    assert plan_lines(diff.stdout)[0].startswith("! queue q: belongs to project other")
    await cli("compose", "diff", "--project-name", "Bad_Name", expect=2)
