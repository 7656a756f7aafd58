"""What ``controller status`` shows of a tick: the rows built from the rule book's
explanations (pure, no I/O) and the CLI's table of them."""

from __future__ import annotations

from collections import Counter

from controller_support import NOW, load, queue, run, snapshot, worker

from lakeshore.cli.controller import status_table
from lakeshore.controller import Snapshot
from lakeshore.controller.status import UnitKey, unit_rows
from lakeshore.model import ControllerStatus, Scope, UnitStatus, WorkerStatus

IDLE, BUSY = WorkerStatus.IDLE, WorkerStatus.BUSY


def rows(snap: Snapshot) -> dict[UnitKey, UnitStatus]:
    result = run(snap)
    queues = {(q.namespace, q.name): q for q in snap.queues}
    return unit_rows(result.explanations, queues, Counter(), {}, snap.workers)


def by_name(found: dict[UnitKey, UnitStatus]) -> dict[str, tuple[int, int]]:
    """(actual, total) by unit name."""
    return {name: (u.actual, u.total) for (_, _, name), u in found.items()}


def test_total_counts_hand_launched_daemons_that_actual_leaves_out() -> None:
    hand = [worker(f"h{i}", status=BUSY if i % 2 else IDLE, queues=["q"]) for i in range(4)]
    dead = [
        worker("lost", status=WorkerStatus.LOST, queues=["q"]),
        worker("stopped", status=WorkerStatus.STOPPED, queues=["q"]),
        worker("retiring", status=WorkerStatus.RETIRING, queues=["q"]),
    ]
    elsewhere = [worker("other", queues=["r"]), worker("ns2", queues=["q"], ns="other-ns")]
    snap = snapshot([queue("q", "fixed"), queue("r", "fixed")], hand + dead + elsewhere)
    assert by_name(rows(snap)) == {"q": (0, 4), "r": (0, 1)}


def test_total_includes_the_managed_daemons_and_the_default_queues_empty_membership() -> None:
    managed = worker("m1", managed_for="q")
    plain = worker("plain")  # no queues: the default queue
    snap = snapshot(
        [queue("q", min=1, max=4), queue("default", "fixed")],
        [managed, worker("h1", queues=["q", "default"]), plain],
        [load("q", pending=1)],
    )
    assert by_name(rows(snap)) == {"q": (1, 2), "default": (0, 2)}


def test_a_pools_total_counts_daemons_serving_any_member_once() -> None:
    members = [
        queue(name, "fully_elastic", max=4, pool="mix", target_pending=1) for name in ("a", "b")
    ]
    daemons = [
        worker("m1", managed_for="a", pool="mix", queues=["a", "b"]),
        worker("h-a", queues=["a"]),
        worker("h-ab", queues=["a", "b"]),
        worker("h-c", queues=["c"]),
    ]
    found = rows(snapshot([*members, queue("c", "fixed")], daemons))
    assert found["ns", Scope.POOL, "mix"].total == 3
    assert (found["ns", Scope.QUEUE, "a"].total, found["ns", Scope.QUEUE, "b"].total) == (3, 2)


def _status(*units: UnitStatus) -> ControllerStatus:
    return ControllerStatus(namespace="ns", ticks=1, tick_at=NOW, units=list(units))


def _unit(name: str, actual: int, total: int) -> UnitStatus:
    return UnitStatus(
        namespace="ns", scope=Scope.QUEUE, name=name, policy="fixed", max=0, desired=0,
        actual=actual, launching=0, reason="fixed", total=total,
    )  # fmt: skip


def test_the_table_shows_every_daemon_up_beside_the_managed_ones() -> None:
    table = status_table(_status(_unit("hand", 0, 4), _unit("managed", 2, 2), _unit("old", 1, 0)))
    header, hand, managed, old = table.split("\n\n")[0].splitlines()
    actual = header.index("ACTUAL")
    launching = header.index("LAUNCHING")
    assert hand[actual:launching].strip() == "0 (4 total)"
    # Nothing beyond the managed ones (or a server too old to count them): just the number.
    assert managed[actual:launching].strip() == "2"
    assert old[actual:launching].strip() == "1"
