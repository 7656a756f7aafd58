"""``desired`` and ``idle_wait_s`` on their own, and the order of a tick's output."""

from __future__ import annotations

import msgspec
import pytest
from controller_support import load, queue, run, snapshot, worker

from lakeshore.controller import GrantSteal, Launch, MarkLost, Retire, desired, idle_wait_s
from lakeshore.model import QueueState, WorkerStatus
from lakeshore.model.resources import DaemonGpus
from lakeshore.providers.capacity import gres_gpus


@pytest.mark.parametrize(
    ("kind", "elasticity", "backlog", "managed", "hand", "expected"),
    [
        ("fixed", {}, (50, 50, 1e4), 3, 0, 0),
        ("elastic", {"min": 2, "max": 5}, (0, 0, None), 0, 9, 2),
        ("elastic", {"max": 5, "target_pending": 3}, (7, 0, 0.0), 0, 9, 3),
        ("fully_elastic", {"max": 5}, (0, 0, None), 4, 0, 0),
        ("fully_elastic", {"max": 5}, (1, 0, 0.0), 0, 0, 1),
        ("burst", {"max": 5, "burst_after_s": 30}, (12, 0, 29.0), 0, 0, 0),
        ("burst", {"max": 5, "burst_after_s": 30}, (12, 0, 30.0), 0, 1, 2),
        ("burst", {"max": 5, "burst_after_s": 30}, (12, 0, 30.0), 0, 9, 0),
        ("burst", {"max": 5, "min": 1, "burst_after_s": 30}, (12, 0, 30.0), 0, 9, 1),
        ("burst", {"max": 5, "burst_after_s": 30}, (0, 8, None), 2, 0, 2),
        ("burst", {"max": 5, "burst_after_s": 30}, (0, 0, None), 2, 0, 0),
    ],
    ids=[
        "fixed-zero",
        "elastic-min",
        "elastic-target-pending",
        "fully-elastic-zero",
        "fully-elastic-first-pending",
        "burst-before-burst-after",
        "burst-sized-less-hand",
        "burst-hand-baseline-suffices",
        "burst-min-is-a-floor-while-bursting",
        "burst-continues-while-running",
        "burst-ends-with-the-backlog",
    ],
)
def test_desired_by_policy(
    kind: str,
    elasticity: dict[str, object],
    backlog: tuple[int, int, float | None],
    managed: int,
    hand: int,
    expected: int,
) -> None:
    pending, running, age = backlog
    want, why = desired(
        queue(kind=kind, **elasticity), load("q", pending, running, age), managed, hand
    )
    assert want == expected, why
    assert why


@pytest.mark.parametrize(
    ("kind", "state", "backlog", "wait"),
    [
        ("elastic", QueueState.ACTIVE, 0, 60.0),
        ("fixed", QueueState.ACTIVE, 0, None),
        ("elastic", QueueState.PAUSED, 0, None),
        ("elastic", QueueState.DRAINING, 3, 60.0),
        ("elastic", QueueState.DRAINING, 0, 0.0),
        ("fixed", QueueState.ARCHIVED, 3, 0.0),
    ],
)
def test_idle_wait_by_policy_and_state(
    kind: str, state: QueueState, backlog: int, wait: float | None
) -> None:
    assert idle_wait_s(queue(kind=kind, state=state), load("q", pending=backlog)) == wait


def test_burst_reason_says_what_it_waits_for() -> None:
    _, why = desired(queue(kind="burst", burst_after_s=30), load("q", 4, 0, 12.5), 0, 0)
    assert why == "burst: oldest pending 12.5s < burst_after_s 30s → 0"


def test_decisions_come_lost_retire_steal_launch_and_retire_by_cost_weight() -> None:
    queues = [
        queue("a", cost_weight=1.0),
        queue("b", cost_weight=3.0),
        queue("s", "fixed", steal_delay_s=5.0),
        queue("z", "fully_elastic"),
    ]
    workers = [
        worker("a1", managed_for="a"),
        worker("a2", managed_for="a"),
        worker("b1", managed_for="b"),
        worker("b2", managed_for="b"),
        worker("gone", heartbeat_age_s=60, status=WorkerStatus.BUSY, queues=["x"]),
        worker("lender", queues=["x"]),
    ]
    idle = {"a1": 900, "a2": 900, "b1": 900, "b2": 900}
    loads = [load("s", pending=1, age_s=9), load("z", pending=1)]
    result = run(snapshot(queues, workers, loads, idle_s=idle))
    kinds = [type(d) for d in result.decisions]
    assert kinds == [MarkLost, Retire, Retire, GrantSteal, Launch]
    retires = [d for d in result.decisions if isinstance(d, Retire)]
    assert [r.queue for r in retires] == ["b", "a"]


@pytest.mark.parametrize(
    ("asks", "per_daemon", "pending", "expected", "says"),
    [
        # 3 x 2 GPUs at 2 per daemon: 3 daemons, though target_pending 100 sizes 1.
        (((2, None, 3),), DaemonGpus(2), 3, 3, "6 GPUs at 2 per daemon → 3"),
        # 4 x 1 GPU at 4 per daemon: 1; with 2 more asking none, the count sizes 1 too.
        (((1, None, 4),), DaemonGpus(4), 6, 1, "4 GPUs at 4 per daemon → 1"),
        # A request bigger than any daemon of the provider counts for nothing.
        (((4, None, 2),), DaemonGpus(2), 2, 0, "2 that no daemon of my-gpu (2 GPUs) could hold"),
        # A type the provider's daemons are not.
        (((1, "A100", 3),), DaemonGpus(2, "h100"), 3, 0, "3 that no daemon of my-gpu"),
        (((1, "H100", 3),), DaemonGpus(2, "h100"), 3, 2, "3 GPUs at 2 per daemon → 2"),
        # A provider without GPUs launches nothing for GPU work.
        (((1, None, 5),), DaemonGpus(), 5, 0, "5 that no daemon of my-gpu (0 GPUs) could hold"),
    ],
)
def test_gpu_work_sizes_by_the_gpus_each_daemon_brings(
    asks, per_daemon, pending, expected, says
) -> None:
    q = queue(kind="fully_elastic", max=8, target_pending=100, provider="my-gpu")
    backlog = msgspec.structs.replace(load("q", pending, 0), gpu_asks=asks)
    want, why = desired(q, backlog, 0, 0, per_daemon)
    assert want == expected, why
    assert says in why, why


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:4", DaemonGpus(4)),
        ("gpu:h100:4", DaemonGpus(4, "h100")),
        ("gpu", DaemonGpus(1)),
        ("shard:2,gpu:a100:8", DaemonGpus(8, "a100")),
        ("shard:2", DaemonGpus()),
        (None, DaemonGpus()),
    ],
)
def test_a_slurm_providers_gres_says_what_each_daemon_brings(gres, expected) -> None:
    assert gres_gpus(gres) == expected
