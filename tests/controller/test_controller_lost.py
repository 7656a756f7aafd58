"""Lost daemons: marked lost after ``lost_after_s``; managed ones replaced where wanted."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from controller_support import launches, load, lost, queue, run, snapshot, worker

from lakeshore.controller import ControllerSettings, MarkLost, QueueLoad
from lakeshore.model import Queue, QueueState, WorkerStatus

SILENT_S = 10.5  # just past the default lost_after_s of 10 s


class Case(NamedTuple):
    id: str
    queue: Queue
    load: QueueLoad
    managed: bool
    #: ids of lost daemons the tick replaces
    replaces: list[str]


CASES = [
    Case("elastic-managed-replaced", queue(), load(), True, ["x"]),
    Case(
        "fully-elastic-with-work-replaced",
        queue(kind="fully_elastic"),
        load(pending=1),
        True,
        ["x"],
    ),
    Case("fully-elastic-idle-not-replaced", queue(kind="fully_elastic"), load(), True, []),
    Case(
        "burst-while-bursting-replaced",
        queue(kind="burst"),
        load(pending=4, age_s=31),
        True,
        ["x"],
    ),
    Case(
        "burst-not-bursting-not-replaced", queue(kind="burst"), load(pending=4, age_s=5), True, []
    ),
    Case("fixed-not-replaced", queue(kind="fixed"), load(pending=40, age_s=1e3), True, []),
    Case("draining-not-replaced", queue(state=QueueState.DRAINING), load(pending=4), True, []),
    Case("hand-daemon-not-replaced", queue(), load(pending=4), False, []),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_lost_daemons_are_marked_and_replaced_per_policy(case: Case) -> None:
    x = worker(
        "x",
        status=WorkerStatus.BUSY,
        managed_for="q" if case.managed else None,
        queues=["q"],
        heartbeat_age_s=SILENT_S,
    )
    result = run(snapshot([case.queue], [x], [case.load]))
    assert lost(result) == ["x"]
    replacing = [d for d in launches(result) if d.replaces]
    assert [r for d in replacing for r in d.replaces] == case.replaces
    if case.replaces:
        assert "replacing lost x" in replacing[0].reason


def test_lost_is_strictly_older_than_lost_after_s() -> None:
    settings = ControllerSettings(lost_after_s=10.0)
    on_time = worker("a", heartbeat_age_s=10.0)
    late = worker("b", heartbeat_age_s=10.001)
    result = run(snapshot([queue(kind="fixed")], [on_time, late]), settings)
    assert lost(result) == ["b"]
    (mark,) = [d for d in result.decisions if isinstance(d, MarkLost)]
    assert mark.inputs["lost_after_s"] == 10.0
    assert mark.inputs["silent_s"] == pytest.approx(10.001)


@pytest.mark.parametrize("status", [WorkerStatus.LOST, WorkerStatus.STOPPED], ids=lambda s: s.value)
def test_workers_already_lost_or_stopped_are_not_marked_again(status: WorkerStatus) -> None:
    gone = worker("g", status=status, managed_for="q", heartbeat_age_s=1e4)
    result = run(snapshot([queue()], [gone], [load()]))
    assert lost(result) == []
    (launch,) = launches(result)
    assert launch.replaces == [], "a replacement is only tagged in the tick that finds it"


def test_a_starting_daemon_without_heartbeat_is_left_to_the_launch_timeout() -> None:
    starting = worker("s", status=WorkerStatus.STARTING, managed_for="q", heartbeat_age_s=None)
    result = run(snapshot([queue()], [starting], [load()]))
    assert lost(result) == []
    assert launches(result) == []


def test_a_lost_daemon_is_replaced_only_up_to_desired() -> None:
    up = [worker(f"u{i}", status=WorkerStatus.BUSY, managed_for="q") for i in range(2)]
    gone = [
        worker(f"x{i}", status=WorkerStatus.BUSY, managed_for="q", heartbeat_age_s=SILENT_S)
        for i in range(2)
    ]
    result = run(snapshot([queue()], up + gone, [load(running=12)]))
    assert lost(result) == ["x0", "x1"]
    (launch,) = launches(result)
    assert (launch.count, launch.replaces) == (1, ["x0"])
