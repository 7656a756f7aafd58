"""The rule book per policy and queue state, table-driven, at an injected ``now``."""

from __future__ import annotations

import itertools
import random
from typing import Any, NamedTuple

import msgspec
import pytest
from controller_support import (
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

from lakeshore.controller import ControllerSettings, Decision, QueueLoad, TickResult, tick
from lakeshore.model import ElasticityKind, Queue, QueueState, Worker, WorkerStatus

IDLE, BUSY = WorkerStatus.IDLE, WorkerStatus.BUSY
STARTING, RETIRING = WorkerStatus.STARTING, WorkerStatus.RETIRING
ACTIVE, DRAINING = QueueState.ACTIVE, QueueState.DRAINING
ARCHIVED, PAUSED = QueueState.ARCHIVED, QueueState.PAUSED


def m(wid: str, status: WorkerStatus = IDLE) -> Worker:
    """A managed daemon launched for queue ``q``."""
    return worker(wid, status=status, managed_for="q")


def h(wid: str, status: WorkerStatus = IDLE) -> Worker:
    """A hand-launched daemon serving queue ``q``."""
    return worker(wid, status=status, queues=["q"])


class Case(NamedTuple):
    id: str
    queue: Queue
    load: QueueLoad
    workers: list[Worker]
    #: expected (launches, retired ids, desired)
    launch: int
    retire: list[str]
    desired: int
    idle_s: dict[str, float] = {}
    launching: int = 0


CASES = [
    # fixed
    Case("fixed-launches-nothing", queue(kind="fixed"), load(pending=100, age_s=1e4), [], 0, [], 0),
    Case("fixed-retires-nothing", queue(kind="fixed"), load(), [m("m1")], 0, [], 0, {"m1": 1e4}),
    # elastic
    Case("elastic-empty-keeps-min-1", queue(), load(), [], 1, [], 1),
    Case("elastic-sizes-backlog", queue(), load(pending=9, running=3), [m("m1", BUSY)], 2, [], 3),
    Case("elastic-clamps-to-max", queue(max=8), load(pending=100), [], 8, [], 8),
    Case("elastic-clamps-to-min", queue(min=3), load(pending=1), [], 3, [], 3),
    Case(
        "elastic-retires-longest-idle-surplus",
        queue(),
        load(),
        [m("m1"), m("m2"), m("m3")],
        0,
        ["m1", "m2"],
        1,
        {"m1": 120, "m2": 90, "m3": 61},
    ),
    Case(
        "elastic-keeps-surplus-idle-under-scale-down-idle",
        queue(scale_down_idle_s=60),
        load(),
        [m("m1"), m("m2")],
        0,
        [],
        1,
        {"m1": 59.9, "m2": 30},
    ),
    Case(
        "elastic-never-retires-busy",
        queue(),
        load(running=1),
        [m("m1", BUSY), m("m2", BUSY), m("m3")],
        0,
        ["m3"],
        1,
        {"m3": 120},
    ),
    Case("elastic-ignores-hand-daemons", queue(), load(), [h("h1")], 1, [], 1, {"h1": 1e4}),
    # burst
    Case("burst-waits", queue(kind="burst", max=5), load(pending=10, age_s=29.9), [], 0, [], 0),
    Case(
        "burst-starts-above-hand-baseline",
        queue(kind="burst", max=5),
        load(pending=10, age_s=30),
        [h("h1", BUSY)],
        2,
        [],
        2,
    ),
    Case(
        "burst-keeps-bursting-while-backlog",
        queue(kind="burst", max=5),
        load(pending=16, age_s=1),
        [h("h1", BUSY), m("m1", BUSY)],
        2,
        [],
        3,
    ),
    Case(
        "burst-capped-at-max", queue(kind="burst", max=5), load(pending=99, age_s=60), [], 5, [], 5
    ),
    Case(
        "burst-retires-after-idle",
        queue(kind="burst", max=5),
        load(),
        [m("m1"), m("m2")],
        0,
        ["m1"],
        0,
        {"m1": 60, "m2": 59},
    ),
    # fully_elastic
    Case("fully-elastic-idle-is-zero", queue(kind="fully_elastic"), load(), [], 0, [], 0),
    Case("fully-elastic-from-zero", queue(kind="fully_elastic"), load(pending=1), [], 1, [], 1),
    Case(
        "fully-elastic-back-to-zero",
        queue(kind="fully_elastic"),
        load(),
        [m("m1")],
        0,
        ["m1"],
        0,
        {"m1": 61},
    ),
    # states
    Case(
        "draining-never-scales-up",
        queue(state=DRAINING),
        load(pending=40),
        [m("m1", BUSY)],
        0,
        [],
        1,
    ),
    Case(
        "draining-with-backlog-keeps-what-it-needs",
        queue(state=DRAINING),
        load(pending=8),
        [m("m1"), m("m2")],
        0,
        [],
        2,
        {"m1": 1e4, "m2": 1e4},
    ),
    Case(
        "draining-and-empty-retires-idle-at-once",
        queue(state=DRAINING),
        load(),
        [m("m1"), m("m2", BUSY)],
        0,
        ["m1"],
        0,
        {"m1": 0},
    ),
    Case(
        "archived-retires-idle-managed-only",
        queue(state=ARCHIVED),
        load(pending=50),
        [m("m1"), m("m2", BUSY), h("h1")],
        0,
        ["m1"],
        0,
        {"h1": 1e4},
    ),
    Case(
        "archived-fixed-retires-managed",
        queue(kind="fixed", state=ARCHIVED),
        load(),
        [m("m1")],
        0,
        ["m1"],
        0,
    ),
    Case(
        "paused-holds",
        queue(state=PAUSED),
        load(pending=50),
        [m("m1")],
        0,
        [],
        1,
        {"m1": 1e4},
    ),
    # what counts as up
    Case("launching-counts-as-up", queue(), load(pending=12), [m("m1", BUSY)], 0, [], 3, {}, 2),
    Case(
        "starting-counts-and-stays",
        queue(),
        load(),
        [m("m1", STARTING), m("m2", STARTING)],
        0,
        [],
        1,
    ),
    Case("retiring-does-not-count", queue(), load(pending=4), [m("m1", RETIRING)], 1, [], 1),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_policy_and_state_table(case: Case) -> None:
    snap = snapshot(
        [case.queue], case.workers, [case.load], launching={"q": case.launching}, idle_s=case.idle_s
    )
    result = run(snap)
    assert launched(result).get("q", 0) == case.launch
    assert retired(result) == case.retire
    assert explained(result, "q")[0] == case.desired


KINDS = [k.value for k in ElasticityKind]


@pytest.mark.parametrize(
    ("kind", "state"), list(itertools.product(KINDS, list(QueueState))), ids=lambda v: str(v)
)
def test_every_policy_and_state_keeps_the_invariants(kind: str, state: QueueState) -> None:
    q = queue(kind=kind, state=state, max=8 if kind != "fixed" else 0)
    workers = [m("m1"), m("m2", BUSY), h("h1")]
    result = run(
        snapshot([q], workers, [load(pending=40, age_s=100)], idle_s={"m1": 1e4, "h1": 1e4})
    )
    assert "m2" not in retired(result), "a busy daemon is never retired"
    assert "h1" not in retired(result), "a hand-launched daemon is never retired"
    if state is not ACTIVE or kind == "fixed":
        assert launches(result) == []
    if kind == "fixed" and state is not ARCHIVED:
        assert retired(result) == []
    if state is ARCHIVED:
        assert retired(result) == ["m1"]
        assert explained(result, "q")[0] == 0


def test_explanation_reports_desired_actual_and_launching() -> None:
    snap = snapshot([queue()], [m("m1", BUSY)], [load(pending=9, running=3)], launching={"q": 1})
    result = run(snap)
    assert explained(result, "q") == (3, 1, 1)
    (launch,) = launches(result)
    assert launch.count == 1
    assert launch.reason == (
        "pending 9 + running 3 at target_pending 4 → 3 → desired 3 (min 1, max 8); "
        "1 up, 1 launching → launch 1"
    )
    assert launch.inputs["desired"] == 3
    assert launch.inputs["launching"] == 1


def test_launch_carries_ownership_labels_provider_and_match() -> None:
    q = queue(provider="gpu-cloud", match={"gpu": "h100"})
    (launch,) = launches(run(snapshot([q], [], [load(pending=1)])))
    assert (launch.provider, launch.queues) == ("gpu-cloud", ["q"])
    assert launch.labels == {"gpu": "h100", "lakeshore.io/queue": "q"}
    assert launch.pool is None


def test_default_queue_daemons_get_the_empty_membership() -> None:
    (launch,) = launches(run(snapshot([queue("default")], [], [load("default", pending=1)])))
    assert launch.queues == []


def test_max_surge_spreads_a_big_scale_up_over_ticks() -> None:
    settings = ControllerSettings(max_surge=4)
    q, backlog = queue(max=10), load(pending=100)
    firsts = [
        launched(tick(snapshot([q], [], [backlog], launching={"q": n}), settings))
        for n in (0, 4, 8, 10)
    ]
    assert firsts == [{"q": 4}, {"q": 4}, {"q": 2}, {}]


def test_launches_in_flight_are_not_launched_twice_across_ticks() -> None:
    q, backlog = queue(), load(pending=12)
    assert launched(run(snapshot([q], [], [backlog]))) == {"q": 3}
    assert launched(run(snapshot([q], [], [backlog], launching={"q": 3}))) == {}
    arrived = [m("m1", STARTING), m("m2", STARTING)]
    assert launched(run(snapshot([q], arrived, [backlog], launching={"q": 1}))) == {}
    up = [m("m1", BUSY), m("m2", BUSY), m("m3", BUSY)]
    assert launched(run(snapshot([q], up, [backlog]))) == {}


def _busy_snapshot(shuffle: random.Random | None = None) -> Any:
    queues = [queue(f"q{i}", kind=k) for i, k in enumerate(KINDS * 3)]
    workers = [worker(f"w{i}", managed_for=f"q{i % 12}") for i in range(24)]
    loads = [load(f"q{i}", pending=i * 3, age_s=i * 10.0) for i in range(12)]
    if shuffle is not None:
        for items in (queues, workers, loads):
            shuffle.shuffle(items)
    return snapshot(queues, workers, loads, idle_s={f"w{i}": 100.0 * i for i in range(24)})


def test_output_is_deterministic_whatever_the_input_order() -> None:
    expected = run(_busy_snapshot())
    for seed in range(5):
        assert run(_busy_snapshot(random.Random(seed))) == expected


def test_result_round_trips_through_json() -> None:
    result = run(_busy_snapshot())
    assert result.decisions, "the snapshot is meant to produce decisions"
    decoded = msgspec.json.decode(msgspec.json.encode(result), type=TickResult)
    assert decoded == result
    assert msgspec.json.decode(msgspec.json.encode(result.decisions[0]), type=Decision)
