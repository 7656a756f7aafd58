"""Running daemons the project does not own, as a pure plan (no server): which a group
adopts, why the others are not adopted, and which queues ``down`` must not take away."""

from __future__ import annotations

import pytest
from test_plan import OURS, declared, lines, queue, snapshot, worker

from lakeshore.compose import Op, plan_down, plan_up
from lakeshore.compose.changes import AdoptDaemons, LaunchDaemons
from lakeshore.compose.serving import Served, served_by_others
from lakeshore.compose.spec import DAEMON_LABEL, PROJECT_LABEL
from lakeshore.model import WorkerStatus

PREP = {**OURS, DAEMON_LABEL: "prep"}


def prep_file(count: int = 2, extra: str = "") -> str:
    return f"""
    queues:
      cpu-prep: {{}}
    daemons:
      prep: {{provider: local, queues: [cpu-prep], count: {count}{extra}}}
    """


def by_hand(name: str, **fields):
    """A daemon launched by hand: no project's labels."""
    fields.setdefault("queues", ["cpu-prep"])
    return worker(name, group=None, **fields)


def plan(count: int = 2, *workers, adopt: bool = False, extra: str = ""):
    live = snapshot(queues=[queue("cpu-prep", labels=OURS)], workers=workers)
    return plan_up(declared(prep_file(count, extra)), live, adopt=adopt)


def test_without_adopt_a_group_launches_none_beside_the_daemons_that_match_it():
    p = plan(2, by_hand("prep-00"), by_hand("prep-01"))
    assert lines(p) == [
        "! daemons prep: 2 running daemons match (prep-00 prep-01) but are not the project's; "
        "none launched beside them: compose up --adopt adopts them, "
        "or stop them (lakeshore daemon stop NAME)"
    ]
    assert p.pending and not p.actions


def test_adopt_labels_the_matches_and_launches_only_the_difference():
    p = plan(3, by_hand("prep-00"), by_hand("prep-01"), adopt=True)
    assert lines(p) == [
        "~ daemons prep: adopt prep-00 prep-01",
        "+ daemons prep: launch prep-02 on local",
    ]
    adopting, launching = p.changes
    assert adopting.op is Op.PATCH and isinstance(adopting.action, AdoptDaemons)
    assert [w.id for w in adopting.action.workers] == ["w-prep-00", "w-prep-01"]
    assert adopting.action.labels == PREP
    assert isinstance(launching.action, LaunchDaemons) and launching.action.names == ["prep-02"]


def test_adopt_takes_only_what_the_group_is_short_of_lowest_names_first():
    ours = worker("prep-00", group="prep", queues=["cpu-prep"])
    p = plan(2, ours, by_hand("prep-03"), by_hand("prep-01"), adopt=True)
    assert lines(p) == [
        "~ daemons prep: adopt prep-01",
        "? unmanaged daemon prep-03 (matches group prep, which has its count (2) with those "
        "adopted)",
    ]


def test_adopted_daemons_get_the_files_labels_and_keep_none_it_would_not_set():
    fits = plan(
        1, by_hand("prep", labels={"gpu": "h100"}), adopt=True, extra=", labels: {gpu: h100}"
    )
    (change,) = fits.changes
    assert change.action.labels == {"gpu": "h100", **PREP}
    clash = plan(1, by_hand("prep", labels={"gpu": "a100"}), extra=", labels: {gpu: h100}")
    assert lines(clash)[-1] == (
        '? unmanaged daemon prep (not adopted by group prep: labels differ ({"gpu": "a100"} are '
        "not the group's))"
    )


@pytest.mark.parametrize(
    ("daemon", "why"),
    [
        (by_hand("helper"), "its name is not prep or prep-NN"),
        (by_hand("prep-00", queues=["other"]), 'queues differ (["other"]; the file: ["cpu-prep"])'),
        (by_hand("prep-00", provider="my-ec2"), "provider differs (my-ec2; the file: local)"),
    ],
    ids=["name", "queues", "provider"],
)
def test_a_daemon_that_matches_in_part_is_not_adopted_and_the_plan_says_why(daemon, why):
    p = plan(2, daemon, adopt=True)
    assert f"? unmanaged daemon {daemon.name} (not adopted by group prep: {why})" in lines(p)
    (launch,) = [c for c in p.changes if c.op is Op.CREATE]
    assert len(launch.action.names) == 2


@pytest.mark.parametrize(
    "daemon",
    [
        by_hand("prep-00", labels={PROJECT_LABEL: "other"}),
        by_hand("prep-00", managed=True),
        by_hand("prep-00", status=WorkerStatus.RETIRING),
        by_hand("prep-00", status=WorkerStatus.LOST),
    ],
    ids=["another-project", "managed", "retiring", "lost"],
)
def test_only_running_hand_launched_daemons_of_no_project_are_looked_at(daemon):
    p = plan(1, daemon, adopt=True)
    assert not [c for c in p.changes if isinstance(c.action, AdoptDaemons)]
    assert [c.op for c in p.changes if c.subject == "daemons"] == [Op.CREATE]


def test_a_group_at_its_count_looks_at_nothing():
    ours = worker("prep", group="prep", queues=["cpu-prep"])
    assert lines(plan(1, ours, by_hand("prep-01"))) == ["? unmanaged daemon prep-01"]


# ---- down ---------------------------------------------------------------------------------


def test_down_finds_the_queues_that_daemons_it_does_not_own_serve():
    text = "queues:\n  cpu-prep: {}\n  quiet: {}\n  theirs: {}\n"
    live = snapshot(
        queues=[
            queue("cpu-prep", labels=OURS),
            queue("quiet", labels=OURS),
            queue("theirs"),  # not the project's: not taken down, whoever serves it
        ],
        workers=[
            by_hand("prep-01"),
            by_hand("prep-00", status=WorkerStatus.BUSY),
            by_hand("gone", status=WorkerStatus.RETIRING),
            by_hand("lost", status=WorkerStatus.LOST),
            by_hand("scaled", managed=True),
            worker("mine", group="prep", queues=["cpu-prep", "quiet"]),
            by_hand("elsewhere", queues=["theirs"]),
        ],
    )
    down = plan_down(declared(text), live)
    (served,) = served_by_others(down, live)
    assert served == Served(
        namespace="default", queue="cpu-prep", verb="archive", daemons=["prep-00", "prep-01"]
    )
    assert served.message() == (
        "cpu-prep is served by prep-00, prep-01, which this project does not own; "
        "stop them first, or pass --force to archive it anyway"
    )
    rm = plan_down(declared(text), live, rm=True)
    assert [s.verb for s in served_by_others(rm, live)] == ["delete"]
