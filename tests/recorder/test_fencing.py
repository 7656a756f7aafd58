"""Fenced completion as pure functions: which events count, which are stale."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lakeshore.fencing import Fence, decide, fence_batch
from lakeshore.model import EventType, InvocationEvent, InvocationState

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
S = EventType.SUBMITTED
C = EventType.CLAIMED
ST = EventType.STARTED
OK = EventType.SUCCEEDED
FAIL = EventType.FAILED
RETRY = EventType.RETRYING
CANCEL = EventType.CANCELLED
DROP = EventType.DROPPED


def ev(type_: EventType, epoch: int | None = None, inv: str = "i1") -> InvocationEvent:
    return InvocationEvent(
        namespace="ns", queue="q", invocation_id=inv, ts=T0, type=type_,
        attempt=epoch or 0, epoch=epoch, worker=None if epoch is None else f"w{epoch}",
    )  # fmt: skip


def run(events: list[tuple[EventType, int | None]]) -> tuple[list[str], InvocationState]:
    """Types as recorded (``stale:<type>`` for refused ones) and the state afterwards."""
    out = fence_batch([ev(t, e) for t, e in events], {})
    recorded = [
        f"stale:{e.detail['stale_type']}" if e.type is EventType.STALE else e.type.value
        for e in out.events
    ]
    return recorded, out.fences[("ns", "i1")].state


CASES = {
    "a run that succeeds": (
        [(S, None), (C, 1), (ST, 1), (OK, 1)],
        ["submitted", "claimed", "started", "succeeded"],
        InvocationState.SUCCEEDED,
    ),
    "a zombie's late success after a redelivery is stale": (
        [(S, None), (C, 1), (ST, 1), (C, 2), (ST, 2), (OK, 1), (OK, 2)],
        ["submitted", "claimed", "started", "claimed", "started", "stale:succeeded", "succeeded"],
        InvocationState.SUCCEEDED,
    ),
    "a second success of a finished invocation is stale": (
        [(S, None), (C, 1), (ST, 1), (OK, 1), (OK, 1)],
        ["submitted", "claimed", "started", "succeeded", "stale:succeeded"],
        InvocationState.SUCCEEDED,
    ),
    "a failure after the success is stale": (
        [(C, 2), (ST, 2), (OK, 2), (FAIL, 2)],
        ["claimed", "started", "succeeded", "stale:failed"],
        InvocationState.SUCCEEDED,
    ),
    "a superseded epoch's failure does not fail the invocation": (
        [(S, None), (C, 1), (ST, 1), (C, 2), (ST, 2), (FAIL, 1)],
        ["submitted", "claimed", "started", "claimed", "started", "stale:failed"],
        InvocationState.RUNNING,
    ),
    "a claim alone does not fence the epoch it supersedes": (
        [(C, 1), (ST, 1), (C, 2), (OK, 1)],
        ["claimed", "started", "claimed", "succeeded"],
        InvocationState.SUCCEEDED,
    ),
    "a completion whose started is not recorded yet is accepted": (
        [(S, None), (C, 1), (ST, 1), (OK, 2), (OK, 1)],
        ["submitted", "claimed", "started", "succeeded", "stale:succeeded"],
        InvocationState.SUCCEEDED,
    ),
    "retrying goes back to pending; the next claim runs again": (
        [(S, None), (C, 1), (ST, 1), (RETRY, 1)],
        ["submitted", "claimed", "started", "retrying"],
        InvocationState.PENDING,
    ),
    "a superseded retrying is stale": (
        [(C, 1), (ST, 1), (C, 2), (ST, 2), (RETRY, 1)],
        ["claimed", "started", "claimed", "started", "stale:retrying"],
        InvocationState.RUNNING,
    ),
    "a pending cancel (no epoch) wins over a later success": (
        [(S, None), (CANCEL, None), (C, 1), (ST, 1), (OK, 1)],
        ["submitted", "cancelled", "claimed", "started", "stale:succeeded"],
        InvocationState.CANCELLED,
    ),
    "a cancel of a finished invocation is stale": (
        [(S, None), (C, 1), (ST, 1), (OK, 1), (CANCEL, None)],
        ["submitted", "claimed", "started", "succeeded", "stale:cancelled"],
        InvocationState.SUCCEEDED,
    ),
    "a daemon's cancel from a superseded epoch is stale": (
        [(C, 1), (ST, 1), (C, 2), (ST, 2), (CANCEL, 1)],
        ["claimed", "started", "claimed", "started", "stale:cancelled"],
        InvocationState.RUNNING,
    ),
    "dropped while pending": (
        [(S, None), (DROP, None)],
        ["submitted", "dropped"],
        InvocationState.DROPPED,
    ),
    "dropped after finishing is stale": (
        [(S, None), (C, 1), (ST, 1), (FAIL, 1), (DROP, None)],
        ["submitted", "claimed", "started", "failed", "stale:dropped"],
        InvocationState.FAILED,
    ),
    "a claim recorded before its submit is still running": (
        [(C, 1), (S, None)],
        ["claimed", "submitted"],
        InvocationState.RUNNING,
    ),
    "an old claim arriving late does not undo a retry": (
        [(S, None), (C, 1), (ST, 1), (RETRY, 1), (C, 1)],
        ["submitted", "claimed", "started", "retrying", "claimed"],
        InvocationState.PENDING,
    ),
}


@pytest.mark.parametrize("events, recorded, state", CASES.values(), ids=CASES.keys())
def test_fencing_rules(events, recorded, state) -> None:
    assert run(events) == (recorded, state)


def test_stale_event_keeps_the_attempt_and_says_why() -> None:
    out = fence_batch([ev(C, 1), ev(ST, 1), ev(C, 2), ev(ST, 2), ev(OK, 1)], {})
    stale = out.events[-1]
    assert stale.type is EventType.STALE and out.stale == 1
    assert (stale.epoch, stale.worker, stale.invocation_id) == (1, "w1", "i1")
    assert stale.detail == {
        "stale_type": "succeeded",
        "stale_reason": "epoch 1 was superseded by epoch 2",
    }


def test_known_fences_are_the_starting_point() -> None:
    known = {("ns", "i1"): Fence(started_epoch=3, top=3 * 8 + 2)}
    out = fence_batch([ev(OK, 2), ev(OK, 3)], known)
    assert [e.type for e in out.events] == [EventType.STALE, EventType.SUCCEEDED]
    assert out.finished == [("ns", "i1")]
    assert known[("ns", "i1")].terminal is None, "the input is not mutated"


def test_finished_lists_each_invocation_once_and_only_when_it_finishes_here() -> None:
    known = {("ns", "i2"): Fence(started_epoch=1, terminal=InvocationState.SUCCEEDED)}
    events = [ev(OK, 1, "i1"), ev(OK, 1, "i1"), ev(OK, 1, "i2"), ev(C, 1, "i3")]
    out = fence_batch(events, known)
    assert out.finished == [("ns", "i1")]
    assert out.stale == 2
    assert out.fences[("ns", "i3")].state is InvocationState.RUNNING


def test_an_incoming_stale_event_is_recorded_and_changes_nothing() -> None:
    fence = Fence(started_epoch=2, top=2 * 8 + 2)
    assert decide(fence, ev(EventType.STALE, 1)) == (fence, None)


def test_an_unknown_invocation_starts_pending() -> None:
    assert Fence().state is InvocationState.PENDING and not Fence().finished
