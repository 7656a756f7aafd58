"""Work-stealing: leases to idle daemons after steal_delay_s, before any launch."""

from __future__ import annotations

from datetime import timedelta
from typing import NamedTuple

import pytest
from controller_support import (
    NOW,
    launched,
    load,
    queue,
    retired,
    run,
    snapshot,
    stolen,
    worker,
)

from lakeshore.controller import POOL_LABEL, ControllerSettings, GrantSteal
from lakeshore.model import Queue, QueueState, Worker, WorkerStatus

IDLE, BUSY = WorkerStatus.IDLE, WorkerStatus.BUSY


def thief(**kw: object) -> Worker:
    """An idle hand-launched daemon of another queue: the steal candidate ``c``."""
    kw.setdefault("queues", ["other"])
    return worker("c", **kw)


class Case(NamedTuple):
    id: str
    queue: Queue
    age_s: float
    workers: list[Worker]
    granted: bool
    #: worker id → (queue, seconds until the lease lapses)
    leases: dict[str, tuple[str, float]] = {}


def fixed(**kw: object) -> Queue:
    kw.setdefault("steal_delay_s", 10.0)
    return queue("q", "fixed", **kw)


CASES = [
    Case("never-before-steal-delay", fixed(), 9.99, [thief()], False),
    Case("at-steal-delay", fixed(), 10.0, [thief()], True),
    Case("null-steal-delay-never-steals", fixed(steal_delay_s=None), 1e4, [thief()], False),
    Case("not-with-an-idle-member", fixed(), 60, [thief(), worker("mq", queues=["q"])], False),
    Case(
        "a-busy-member-does-not-stop-it",
        fixed(),
        60,
        [thief(), worker("mq", queues=["q"], status=BUSY)],
        True,
    ),
    Case("busy-candidate-does-not-steal", fixed(), 60, [thief(status=BUSY)], False),
    Case(
        "labels-satisfy-match",
        fixed(match={"gpu": "h100"}),
        60,
        [thief(labels={"gpu": "h100", "zone": "b"})],
        True,
    ),
    Case("labels-missing-for-match", fixed(match={"gpu": "h100"}), 60, [thief()], False),
    Case(
        "labels-differ-from-match",
        fixed(match={"gpu": "h100"}),
        60,
        [thief(labels={"gpu": "a100"})],
        False,
    ),
    Case("live-lease-gets-no-other", fixed(), 60, [thief()], False, {"c": ("q2", 0.5)}),
    Case("lapsed-lease-may-steal-again", fixed(), 60, [thief()], True, {"c": ("q2", 0.0)}),
    Case("archived-does-not-steal", fixed(state=QueueState.ARCHIVED), 60, [thief()], False),
    Case("draining-steals", fixed(state=QueueState.DRAINING), 60, [thief()], True),
    Case("pool-needs-a-pool-daemon", fixed(pool="p"), 60, [thief()], False),
    Case("pool-daemon-by-label", fixed(pool="p"), 60, [thief(labels={POOL_LABEL: "p"})], True),
    Case("other-pool-daemon", fixed(pool="p"), 60, [thief(labels={POOL_LABEL: "x"})], False),
    Case("pool-daemon-by-membership", fixed(pool="p"), 60, [thief(queues=["q2"])], True),
    Case(
        "pool-daemon-must-satisfy-match",
        fixed(pool="p", match={"gpu": "h100"}),
        60,
        [thief(labels={POOL_LABEL: "p"})],
        False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_steal_table(case: Case) -> None:
    # q2 is in pool p too, so a daemon serving it is a daemon of the pool.
    q2 = queue("q2", "fixed", pool=case.queue.elasticity.pool)
    snap = snapshot(
        [case.queue, q2], case.workers, [load("q", pending=4, age_s=case.age_s)], leases=case.leases
    )
    assert stolen(run(snap)) == ({"c": "q"} if case.granted else {})


def test_a_lease_lasts_steal_lease_ticks_and_says_why() -> None:
    settings = ControllerSettings(tick_s=2.0, steal_lease_ticks=3)
    result = run(snapshot([fixed()], [thief()], [load("q", pending=4, age_s=12)]), settings)
    (grant,) = [d for d in result.decisions if isinstance(d, GrantSteal)]
    assert grant.until == NOW + timedelta(seconds=6)
    assert grant.reason.startswith("oldest pending 12s ≥ steal_delay_s 10s and no idle member")
    assert grant.inputs["lease_s"] == 6.0


def test_leases_are_sized_to_the_pending_backlog_less_those_held() -> None:
    idle = [worker(f"c{i}", queues=["other"]) for i in range(5)]
    backlog = [load("q", pending=9, age_s=60)]
    assert len(stolen(run(snapshot([fixed()], idle, backlog)))) == 3
    held = {"c0": ("q", 2.0)}
    assert sorted(stolen(run(snapshot([fixed()], idle, backlog, leases=held)))) == ["c1", "c2"]


def test_the_most_starved_queue_and_longest_idle_daemon_go_first() -> None:
    queues = [fixed(), queue("r", "fixed", steal_delay_s=10.0)]
    daemons = [worker("c1", queues=["other"]), worker("c2", queues=["other"])]
    loads = [load("q", pending=1, age_s=20), load("r", pending=1, age_s=100)]
    result = run(snapshot(queues, daemons, loads, idle_s={"c1": 5, "c2": 50}))
    assert stolen(result) == {"c2": "r", "c1": "q"}


def test_a_stealing_tick_does_not_also_launch_for_the_same_backlog() -> None:
    q = queue("q", max=8, steal_delay_s=10.0)
    member = worker("m1", managed_for="q", status=BUSY)
    backlog = [load("q", pending=4, running=4, age_s=20)]
    first = run(snapshot([q], [member, thief()], backlog))
    assert stolen(first) == {"c": "q"}
    assert launched(first) == {}
    busy_thief = thief(status=BUSY)
    leased = run(snapshot([q], [member, busy_thief], backlog, leases={"c": ("q", 2.0)}))
    assert launched(leased) == {}, "a live lease still counts for the queue"
    lapsed = run(snapshot([q], [member, busy_thief], backlog, leases={"c": ("q", 0.0)}))
    assert launched(lapsed) == {"q": 1}


def test_a_daemon_lent_this_tick_is_not_retired() -> None:
    lender = queue("o", scale_down_idle_s=60)
    daemons = [worker("c1", managed_for="o"), worker("c2", managed_for="o")]
    snap = snapshot(
        [fixed(), lender], daemons, [load("q", pending=1, age_s=60)], idle_s={"c1": 900, "c2": 800}
    )
    result = run(snap)
    assert stolen(result) == {"c1": "q"}
    assert retired(result) == ["c2"]


@pytest.mark.parametrize("status", [WorkerStatus.STOPPED, WorkerStatus.LOST], ids=str)
def test_a_lease_held_by_a_daemon_no_longer_up_lends_nothing(status: WorkerStatus) -> None:
    q = queue("q", max=8, steal_delay_s=10.0)
    gone = thief(status=status)
    backlog = [load("q", pending=4, age_s=20)]
    result = run(snapshot([q], [gone], backlog, leases={"c": ("q", 2.0)}))
    assert launched(result) == {"q": 1}
