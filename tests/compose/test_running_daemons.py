"""``compose up / diff / down`` and daemons that were launched by hand before the file
declared them: real local daemons against a real control plane."""

from __future__ import annotations

from composing import plan_lines

from lakeshore.cli.compose import CHANGES_PENDING
from lakeshore.cli.exits import API_ERROR
from lakeshore.compose import DAEMON_LABEL, PROJECT_LABEL

OURS = {PROJECT_LABEL: "demo"}
#: The fleet launched by hand below, declared.
DECLARED = """
    queues:
      cpu-prep: {}
    daemons:
      prep: {provider: local, queues: [cpu-prep], count: 2}
"""
ADOPT_QUEUE = '~ queue cpu-prep: labels: {} → {"lakeshore.io/project": "demo"}'
NOT_OURS = (
    "! daemons prep: 2 running daemons match (prep-00 prep-01) but are not the project's; "
    "none launched beside them: compose up --adopt adopts them, "
    "or stop them (lakeshore daemon stop NAME)"
)


async def launch_by_hand(cli) -> None:
    await cli("queues", "add", "cpu-prep")
    await cli("daemon", "launch", "--name", "prep", "--queue", "cpu-prep", "--count", "2", "--wait")


async def test_up_adopt_counts_the_hand_launched_daemons_and_launches_nothing(
    cli, compose_file, live
):
    await launch_by_hand(cli)
    before = await live.workers()
    compose_file(DECLARED)

    up = await cli("compose", "up", "--adopt")
    assert plan_lines(up.stdout) == [ADOPT_QUEUE, "~ daemons prep: adopt prep-00 prep-01"]
    after = await live.workers()
    assert {n: (w.id, w.status, w.labels) for n, w in after.items()} == {
        name: (before[name].id, "idle", {**OURS, DAEMON_LABEL: "prep"})
        for name in ("prep-00", "prep-01")
    }
    assert plan_lines((await cli("compose", "diff")).stdout) == ["in sync"]
    down = await cli("compose", "down")
    assert plan_lines(down.stdout) == [
        "- daemons prep: retire prep-00 prep-01",
        "- queue cpu-prep: archive",
    ]


async def test_up_without_adopt_names_the_matching_daemons_and_launches_none(
    cli, compose_file, live
):
    await launch_by_hand(cli)
    compose_file(DECLARED)

    diff = await cli("compose", "diff", expect=CHANGES_PENDING)
    assert plan_lines(diff.stdout) == [ADOPT_QUEUE, NOT_OURS]
    up = await cli("compose", "up", expect=API_ERROR)
    assert plan_lines(up.stdout) == [ADOPT_QUEUE, NOT_OURS]
    assert "error: 1 change cannot be applied" in up.stderr
    workers = await live.workers()
    assert {n: (w.status, w.labels) for n, w in workers.items()} == {
        "prep-00": ("idle", {}),
        "prep-01": ("idle", {}),
    }
    adopting = await cli("compose", "diff", "--adopt", expect=CHANGES_PENDING)
    assert plan_lines(adopting.stdout) == ["~ daemons prep: adopt prep-00 prep-01"]


async def test_down_refuses_a_queue_served_by_daemons_it_does_not_own(cli, compose_file, live):
    compose_file("queues:\n  cpu-prep: {}\n")
    await cli("compose", "up")
    await cli("daemon", "launch", "--name", "prep", "--queue", "cpu-prep", "--count", "2", "--wait")

    refused = await cli("compose", "down", expect=API_ERROR)
    assert refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "error: compose down: cpu-prep is served by prep-00, prep-01, which this project "
        "does not own; stop them first, or pass --force to archive it anyway",
        "nothing was changed",
    ]
    assert (await live.queues())["cpu-prep"].state == "active"
    assert await live.statuses() == {"prep-00": "idle", "prep-01": "idle"}

    forced = await cli("compose", "down", "--force")
    assert plan_lines(forced.stdout) == ["- queue cpu-prep: archive"]
    assert (await live.queues())["cpu-prep"].state == "archived"
    assert await live.statuses() == {"prep-00": "idle", "prep-01": "idle"}
