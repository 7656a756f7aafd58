"""Where new ssh daemons go: the usable host with the most free slots, ties in host order."""

from __future__ import annotations

import pytest

from lakeshore.model import Worker, now
from lakeshore.providers.ssh_config import Target
from lakeshore.providers.ssh_placement import HostState, place, unplaced_reason

A, B, C = (Target(name, name, 22, None) for name in ("a", "b", "c"))


def workers(count: int) -> list[Worker]:
    return [
        Worker(id=f"w-{i}", name=f"n-{i}", namespace="ns", provider="p", started_at=now())
        for i in range(count)
    ]


def hosts(plan: list[tuple[Worker, Target | None]]) -> list[str | None]:
    return [None if t is None else t.entry for _, t in plan]


@pytest.mark.parametrize(
    ("states", "slots", "count", "expected"),
    [
        ([(A, 0), (B, 0)], None, 4, ["a", "b", "a", "b"]),
        ([(A, 2), (B, 0), (C, 1)], None, 4, ["b", "b", "c", "a"]),
        ([(A, 1), (B, 0)], 2, 4, ["b", "a", "b", None]),
        ([(A, 2), (B, 2)], 2, 1, [None]),
        ([(A, "cannot reach host a: refused"), (B, 0)], 1, 2, ["b", None]),
        ([(A, 5)], None, 2, ["a", "a"]),
    ],
)
def test_each_daemon_goes_where_most_slots_are_free(
    states: list[HostState], slots: int | None, count: int, expected: list[str | None]
) -> None:
    assert hosts(place(workers(count), states, slots)) == expected


def test_the_reason_names_full_and_unusable_hosts() -> None:
    states: list[HostState] = [(A, 2), (B, "cannot reach host b: timed out after 10 s")]
    assert unplaced_reason(states, 2) == (
        "no free slot on hosts a (2 daemons each); raise slots or add hosts; "
        "cannot reach host b: timed out after 10 s"
    )
    assert unplaced_reason([(B, "host b: python3: not found")], None) == (
        "host b: python3: not found"
    )
