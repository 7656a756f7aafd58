"""Shared pools: capped demand, max-min fair shares by cost_weight, one fleet."""

from __future__ import annotations

import pytest
from controller_support import (
    NS,
    explained,
    launched,
    launches,
    load,
    queue,
    retired,
    run,
    snapshot,
    worker,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshore.controller import ControllerSettings, Scope, fair_shares
from lakeshore.model import QueueState, WorkerStatus

IDLE, BUSY = WorkerStatus.IDLE, WorkerStatus.BUSY


@pytest.mark.parametrize(
    ("cap", "asks", "weights", "shares"),
    [
        (6, {"a": 6, "b": 2}, {"a": 1, "b": 3}, {"a": 4, "b": 2}),
        (6, {"a": 6, "b": 6}, {"a": 1, "b": 3}, {"a": 2, "b": 4}),
        (7, {"a": 10, "b": 10}, {"a": 1, "b": 2}, {"a": 2, "b": 5}),
        (5, {"a": 5, "b": 5, "c": 1}, {"a": 1, "b": 1, "c": 1}, {"a": 2, "b": 2, "c": 1}),
        (10, {"a": 3, "b": 4}, {"a": 1, "b": 9}, {"a": 3, "b": 4}),
        (0, {"a": 3, "b": 4}, {"a": 1, "b": 1}, {"a": 0, "b": 0}),
        (3, {"b": 2, "a": 2}, {"a": 1, "b": 1}, {"a": 2, "b": 1}),
    ],
    ids=[
        "small-heavy-member-gets-its-ask",
        "both-capped-by-weight-tie-to-first-name",
        "largest-remainder",
        "leftover-of-a-satisfied-member-goes-to-others",
        "under-cap-everyone-gets-its-ask",
        "zero-cap",
        "equal-remainders-tie-break-by-name",
    ],
)
def test_fair_shares(
    cap: int, asks: dict[str, int], weights: dict[str, float], shares: dict[str, int]
) -> None:
    assert fair_shares(cap, asks, weights) == shares


_members = st.dictionaries(
    st.sampled_from("abcdefgh"),
    st.tuples(st.integers(0, 40), st.floats(0.05, 20, allow_nan=False)),
    min_size=1,
)


# No example database: the suite leaves no .hypothesis/ directory in the checkout.
@settings(database=None)
@given(cap=st.integers(0, 100), members=_members)
def test_fair_shares_never_exceed_asks_and_fill_the_cap(
    cap: int, members: dict[str, tuple[int, float]]
) -> None:
    asks = {k: a for k, (a, _) in members.items()}
    weights = {k: w for k, (_, w) in members.items()}
    shares = fair_shares(cap, asks, weights)
    assert all(0 <= shares[k] <= asks[k] for k in asks)
    assert sum(shares.values()) == min(cap, sum(asks.values()))
    # Max-min fair within one daemon of rounding: nobody short of its ask is behind anyone
    # else by more than the rounding allows, in daemons per unit of weight.
    for i in asks:
        if shares[i] < asks[i]:
            for j in asks:
                assert (shares[j] - 1) / weights[j] < (shares[i] + 1) / weights[i]


@settings(database=None)
@given(cap=st.integers(0, 100), members=_members)
def test_fair_shares_are_deterministic(cap: int, members: dict[str, tuple[int, float]]) -> None:
    asks = {k: a for k, (a, _) in members.items()}
    weights = {k: w for k, (_, w) in members.items()}
    reordered = dict(reversed(list(asks.items())))
    assert fair_shares(cap, asks, weights) == fair_shares(cap, reordered, weights)


def member(name: str, max: int, weight: float = 1.0, **kw: object) -> object:
    kw.setdefault("target_pending", 1)
    return queue(name, "fully_elastic", max=max, cost_weight=weight, pool="p", **kw)


def pd(wid: str, launched_for: str, status: WorkerStatus = IDLE, **kw: object) -> object:
    """A managed daemon of pool ``p`` launched for ``launched_for``."""
    return worker(wid, status=status, managed_for=launched_for, pool="p", **kw)


def test_a_capped_pool_is_split_max_min_fair_by_cost_weight() -> None:
    queues = [member("a", max=6, weight=1), member("b", max=2, weight=3)]
    result = run(snapshot(queues, [], [load("a", pending=6), load("b", pending=2)]))
    assert launched(result) == {"a": 4, "b": 2}
    pool_row = next(e for e in result.explanations if e.scope is Scope.POOL)
    assert (pool_row.name, pool_row.desired) == ("p", 6)
    assert "demand 8 capped at pool max 6 (b 2→2, a 6→4)" in pool_row.reason
    assert explained(result, "a") == (4, 0, 0)


def test_a_pool_within_its_max_gets_every_ask() -> None:
    queues = [member("a", max=6), member("b", max=2)]
    result = run(snapshot(queues, [], [load("a", pending=3), load("b", pending=1)]))
    assert launched(result) == {"a": 3, "b": 1}


def test_pool_daemons_carry_the_members_match_and_serve_every_member_it_satisfies() -> None:
    queues = [member("a", max=4), member("b", max=4, match={"gpu": "h100"})]
    result = run(snapshot(queues, [], [load("a", pending=1), load("b", pending=1)]))
    by_queue = {d.queue: d for d in launches(result)}
    assert by_queue["a"].queues == ["a"]
    assert by_queue["b"].queues == ["a", "b"]
    assert by_queue["b"].labels == {
        "gpu": "h100",
        "lakeshore.io/queue": "b",
        "lakeshore.io/pool": "p",
    }
    assert {d.pool for d in by_queue.values()} == {"p"}


def test_a_daemon_one_member_no_longer_needs_fills_anothers_share() -> None:
    queues = [member("a", max=4), member("b", max=4)]
    daemons = [pd("d1", "a"), pd("d2", "a")]
    result = run(snapshot(queues, daemons, [load("b", pending=2)], idle_s={"d1": 1e4, "d2": 1e4}))
    assert launches(result) == []
    assert retired(result) == []
    assert explained(result, "b") == (2, 2, 0)


def test_a_pool_retires_its_idle_surplus_after_scale_down_idle() -> None:
    queues = [member("a", max=4, scale_down_idle_s=60)]
    daemons = [pd("d1", "a"), pd("d2", "a"), pd("d3", "a", BUSY)]
    idle = {"d1": 120, "d2": 30}
    result = run(snapshot(queues, daemons, [load("a", running=1)], idle_s=idle))
    assert retired(result) == ["d1"]


def test_a_daemon_that_cannot_serve_the_needy_member_is_retired_and_replaced() -> None:
    queues = [member("a", max=4), member("b", max=4, match={"gpu": "h100"})]
    result = run(snapshot(queues, [pd("d1", "a")], [load("b", pending=1)], idle_s={"d1": 120}))
    assert launched(result) == {"b": 1}
    assert retired(result) == ["d1"]


def test_max_surge_is_per_pool_highest_cost_weight_first() -> None:
    queues = [member("a", max=6, weight=1), member("b", max=6, weight=2)]
    snap = snapshot(queues, [], [load("a", pending=3), load("b", pending=3)])
    assert launched(run(snap, ControllerSettings(max_surge=4))) == {"b": 3, "a": 1}


def test_an_archived_member_stops_asking_and_its_daemons_serve_others_or_go() -> None:
    queues = [member("a", max=8, state=QueueState.ARCHIVED), member("b", max=2)]
    daemons = [pd("d1", "a"), pd("d2", "a", BUSY)]
    snap = snapshot(queues, daemons, [load("a", pending=9), load("b", pending=1)])
    result = run(snap)
    # The pool max is now b's 2 and b asks 1: a's busy daemon fills it, the idle one goes
    # at once (no scale_down_idle_s wait: nothing will want it for a).
    assert explained(result, "a") == (0, 0, 0)
    assert explained(result, "b") == (1, 1, 0)
    assert launched(result) == {}
    assert retired(result) == ["d1"]


def test_an_archived_members_idle_daemon_fills_another_members_share() -> None:
    queues = [member("a", max=8, state=QueueState.ARCHIVED), member("b", max=2)]
    snap = snapshot(queues, [pd("d1", "a")], [load("a", pending=9), load("b", pending=9)])
    result = run(snap)
    assert explained(result, "b") == (2, 1, 0)
    assert launched(result) == {"b": 1}
    assert retired(result) == []


def test_a_lost_pool_daemon_is_replaced_for_the_member_short_of_its_share() -> None:
    queues = [member("a", max=4)]
    gone = pd("d1", "a", BUSY, heartbeat_age_s=60)
    (launch,) = launches(run(snapshot(queues, [gone], [load("a", running=1)])))
    assert (launch.queue, launch.count, launch.replaces) == ("a", 1, ["d1"])


def test_managed_daemons_of_a_vanished_or_moved_queue_are_retired_once_idle() -> None:
    orphans = [
        worker("gone-idle", managed_for="gone"),
        worker("gone-busy", managed_for="gone", status=BUSY),
        worker("moved", managed_for="a"),  # launched before "a" joined pool p
    ]
    result = run(snapshot([member("a", max=2)], orphans, [load("a", pending=1)]))
    assert sorted(retired(result)) == ["gone-idle", "moved"]
    assert launched(result) == {"a": 1}
    assert all(r.namespace == NS for r in result.decisions)
