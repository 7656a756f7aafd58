"""Event batches fit in one NATS message: cut at a count and at a size."""

from __future__ import annotations

from lakeshore.actors.admission import event_batches
from lakeshore.model import EventType, InvocationEvent, now


def _submitted(i: int, command_bytes: int = 10) -> InvocationEvent:
    return InvocationEvent(
        namespace="ns", queue="q", invocation_id=f"i-{i}", ts=now(), type=EventType.SUBMITTED,
        detail={"command": ["echo", "x" * command_bytes]},
    )  # fmt: skip


def test_nothing_makes_no_batch_and_one_event_one_batch() -> None:
    assert event_batches([]) == []
    [batch] = event_batches([_submitted(0)])
    assert [e.invocation_id for e in batch.events] == ["i-0"]


def test_batches_are_cut_at_the_count() -> None:
    batches = event_batches([_submitted(i) for i in range(25)], size=10)
    assert [len(b.events) for b in batches] == [10, 10, 5]


def test_batches_are_cut_at_the_size_and_keep_the_order() -> None:
    events = [_submitted(i, command_bytes=10_000) for i in range(150)]
    batches = event_batches(events, max_bytes=256 * 1024)
    assert len(batches) == 6 and all(len(b.events) <= 26 for b in batches)
    assert [e for b in batches for e in b.events] == events


def test_an_event_larger_than_the_size_still_gets_a_batch_of_its_own() -> None:
    events = [_submitted(0, command_bytes=50), _submitted(1, command_bytes=5_000)]
    assert [len(b.events) for b in event_batches(events, max_bytes=1_000)] == [1, 1]
