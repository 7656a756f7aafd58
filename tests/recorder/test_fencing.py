"""Fenced completion as pure functions: which events count, which are stale."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from msgspec.structs import replace

from lakeshore.fencing import Fence, decide, fence_batch, open_claim
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


def by(worker: str | None, type_: EventType, epoch: int | None = None) -> InvocationEvent:
    """An event that names ``worker`` (``None``: the control plane's)."""
    return replace(ev(type_, epoch), worker=worker)


Step = tuple[EventType, int | None] | tuple[EventType, int | None, str | None]


def run(events: list[Step]) -> tuple[list[str], InvocationState]:
    """Types as recorded (``stale:<type>`` for refused ones) and the state afterwards.

    A step ``(type, epoch)`` names worker ``w<epoch>``; ``(type, epoch, worker)`` names
    ``worker``."""
    out = fence_batch([ev(*s) if len(s) == 2 else by(s[2], s[0], s[1]) for s in events], {})
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


# Daemons "a" and "b" run attempts; "x" is another daemon of the namespace forging events.
CLAIMANT_CASES = {
    "a success from another daemon than the claimant is stale": (
        [(S, None), (C, 1, "a"), (ST, 1, "a"), (OK, 1, "x"), (OK, 1, "a")],
        ["submitted", "claimed", "started", "stale:succeeded", "succeeded"],
        InvocationState.SUCCEEDED,
    ),
    "a failure from another daemon than the one that started the attempt is stale": (
        [(ST, 2, "a"), (FAIL, 2, "x")],
        ["started", "stale:failed"],
        InvocationState.RUNNING,
    ),
    "a retrying from another daemon is stale": (
        [(C, 1, "a"), (ST, 1, "a"), (RETRY, 1, "x")],
        ["claimed", "started", "stale:retrying"],
        InvocationState.RUNNING,
    ),
    "a daemon's cancel from another daemon is stale": (
        [(C, 1, "a"), (ST, 1, "a"), (CANCEL, 1, "x")],
        ["claimed", "started", "stale:cancelled"],
        InvocationState.RUNNING,
    ),
    "a claim alone names the claimant of its epoch": (
        [(S, None), (C, 1, "a"), (OK, 1, "x")],
        ["submitted", "claimed", "stale:succeeded"],
        InvocationState.RUNNING,
    ),
    "the claimant's own completion is accepted": (
        [(C, 1, "a"), (ST, 1, "a"), (FAIL, 1, "a")],
        ["claimed", "started", "failed"],
        InvocationState.FAILED,
    ),
    "the control plane's cancel names no worker and is not checked": (
        [(S, None), (C, 1, "a"), (ST, 1, "a"), (CANCEL, None, None)],
        ["submitted", "claimed", "started", "cancelled"],
        InvocationState.CANCELLED,
    ),
    "a completion that names no worker is not checked": (
        [(C, 1, "a"), (ST, 1, "a"), (OK, 1, None)],
        ["claimed", "started", "succeeded"],
        InvocationState.SUCCEEDED,
    ),
    "a completion from an epoch without a recorded claim is accepted (lost started)": (
        [(C, 1, "a"), (ST, 1, "a"), (OK, 2, "b"), (OK, 1, "a")],
        ["claimed", "started", "succeeded", "stale:succeeded"],
        InvocationState.SUCCEEDED,
    ),
    "a completion recorded before its epoch's claim is accepted": (
        [(S, None), (OK, 1, "a"), (C, 1, "b")],
        ["submitted", "succeeded", "claimed"],
        InvocationState.SUCCEEDED,
    ),
    "a superseded claimant may still complete its attempt until a later one starts": (
        [(C, 1, "a"), (ST, 1, "a"), (C, 2, "b"), (OK, 1, "a")],
        ["claimed", "started", "claimed", "succeeded"],
        InvocationState.SUCCEEDED,
    ),
    "an attempt below the latest claim is checked against its own claimant": (
        [(C, 1, "a"), (ST, 1, "a"), (C, 2, "b"), (OK, 1, "x"), (OK, 1, "b")],
        ["claimed", "started", "claimed", "stale:succeeded", "stale:succeeded"],
        InvocationState.RUNNING,
    ),
    "a claim without a start is checked too, as are later claims": (
        [(C, 1, "a"), (ST, 1, "a"), (C, 2, "b"), (C, 3, "a"), (FAIL, 2, "a"), (OK, 3, "b")],
        ["claimed", "started", "claimed", "claimed", "stale:failed", "stale:succeeded"],
        InvocationState.RUNNING,
    ),
    "an epoch claimed twice may be completed by either claimant": (
        [(C, 1, "a"), (C, 1, "b"), (OK, 1, "x"), (OK, 1, "b"), (OK, 1, "a")],
        ["claimed", "claimed", "stale:succeeded", "succeeded", "stale:succeeded"],
        InvocationState.SUCCEEDED,
    ),
    "a superseded epoch is refused as superseded whoever sends it": (
        [(C, 1, "a"), (ST, 1, "a"), (C, 2, "b"), (ST, 2, "b"), (OK, 1, "a")],
        ["claimed", "started", "claimed", "started", "stale:succeeded"],
        InvocationState.RUNNING,
    ),
    "a retried attempt's next claim names the next claimant": (
        [(C, 1, "a"), (ST, 1, "a"), (RETRY, 1, "a"), (C, 2, "b"), (OK, 2, "a"), (OK, 2, "b")],
        ["claimed", "started", "retrying", "claimed", "stale:succeeded", "succeeded"],
        InvocationState.SUCCEEDED,
    ),
}


@pytest.mark.parametrize(
    "events, recorded, state", CLAIMANT_CASES.values(), ids=CLAIMANT_CASES.keys()
)
def test_claimant_rules(events, recorded, state) -> None:
    assert run(events) == (recorded, state)


def test_a_forged_completion_is_stale_and_names_the_claimant() -> None:
    out = fence_batch([by("w-abc", C, 2), by("w-abc", ST, 2), by("w-xyz", OK, 2)], {})
    stale = out.events[-1]
    assert (stale.type, stale.epoch, stale.worker, out.stale) == (EventType.STALE, 2, "w-xyz", 1)
    assert stale.detail == {
        "stale_type": "succeeded",
        "stale_reason": "attempt 2 was claimed by daemon w-abc, not w-xyz",
    }
    assert out.fences[("ns", "i1")].terminal is None


def test_the_reason_names_every_claimant_of_the_attempt() -> None:
    fence = Fence(started_epoch=1, top=1 * 8 + 1, claims=((1, "w-a"), (1, "w-b")))
    assert decide(fence, by("w-x", FAIL, 1)) == (
        fence,
        "attempt 1 was claimed by daemon w-a or w-b, not w-x",
    )


def test_a_fence_keeps_the_claims_of_the_epochs_a_completion_may_still_come_from() -> None:
    out = fence_batch([by("a", C, 1), by("a", ST, 1), by("b", C, 2), by("c", C, 3)], {})
    assert out.fences[("ns", "i1")].claims == ((1, "a"), (2, "b"), (3, "c"))
    out = fence_batch([by("c", ST, 3), by("b", C, 2), by(None, C, 4), by("c", ST, 3)], out.fences)
    assert out.fences[("ns", "i1")] == Fence(3, 4 * 8 + 1, None, ((3, "c"),))


def test_claims_from_the_store_fence_a_forged_completion() -> None:
    known = {("ns", "i1"): Fence(started_epoch=3, top=3 * 8 + 2, claims=((3, "w-abc"),))}
    out = fence_batch([by("w-xyz", OK, 3), by("w-abc", OK, 3)], known)
    assert [e.type for e in out.events] == [EventType.STALE, EventType.SUCCEEDED]
    assert out.finished == [("ns", "i1")]


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


def _fence(events: list[InvocationEvent]) -> Fence | None:
    fence = None
    for e in events:
        fence, _ = decide(fence, e)
    return fence


@pytest.mark.parametrize(
    ("events", "epoch", "held"),
    [
        # A running attempt holds a redelivery of a later epoch, not its own or an earlier.
        ([ev(S), ev(C, 1), ev(ST, 1)], 2, (1, "w1")),
        ([ev(S), ev(C, 1)], 3, (1, "w1")),
        ([ev(S), ev(C, 1), ev(ST, 1)], 1, None),
        # Ended: retried (its redelivery is the retry), finished, or never claimed.
        ([ev(S), ev(C, 1), ev(ST, 1), ev(RETRY, 1)], 2, None),
        ([ev(S), ev(C, 1), ev(ST, 1), ev(OK, 1)], 2, None),
        ([ev(S), ev(C, 1), ev(ST, 1), ev(FAIL, 1)], 2, None),
        ([ev(S)], 2, None),
        # The latest earlier attempt counts: 2 runs after 1 was retried.
        ([ev(S), ev(C, 1), ev(RETRY, 1), ev(C, 2), ev(ST, 2)], 3, (2, "w2")),
    ],
)
def test_an_open_claim_is_the_latest_earlier_attempt_not_yet_ended(events, epoch, held) -> None:
    assert open_claim(_fence(events), epoch) == held


def test_nothing_holds_an_unknown_invocation() -> None:
    assert open_claim(None, 2) is None


# The submission's record a claim carries (lakeshore/submission.py).
INV = "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"  # a UUIDv7: its first 48 bits are the time
RECORD = {"seq": 7, "priority": 0, "fn": "m:f", "command": None, "args": [1], "kwargs": {}}


def carrying(type_: EventType, epoch: int, inv: str = INV) -> InvocationEvent:
    """A daemon's first event of a claim, with the record of the submission it carries."""
    return replace(ev(type_, epoch, inv), detail={"seq": 7, "level": 0, "submission": RECORD})


@pytest.mark.parametrize("first", [C, ST])
def test_a_claim_records_the_submission_it_carries_when_none_is_recorded(first) -> None:
    out = fence_batch([carrying(first, 1), ev(OK, 1, INV)], {})
    made, claim, done = out.events
    assert (made.type, made.epoch, made.worker, made.queue) == (S, None, None, "q")
    assert made.detail == {**RECORD, "recorded_from": "claim"}
    assert made.ts == datetime.fromtimestamp(0x0190A3B45C6D / 1000, UTC), "the id's time"
    assert claim.type is first and claim.detail == {"seq": 7, "level": 0}, "recorded without it"
    assert done.type is OK
    assert out.fences[("ns", INV)] == Fence(1, 8 + RANK_OF[first], InvocationState.SUCCEEDED,
                                            ((1, "w1"),), submitted=True)  # fmt: skip


def test_a_claim_of_a_recorded_submission_records_only_itself() -> None:
    # recorded earlier in this batch, or before it (the known fences)
    [_, claim] = fence_batch([ev(S, None, INV), carrying(ST, 1)], {}).events
    assert claim.type is ST and claim.detail == {"seq": 7, "level": 0}
    known = {("ns", INV): Fence(submitted=True, top=0)}
    [claim] = fence_batch([carrying(ST, 2)], known).events
    assert claim.detail == {"seq": 7, "level": 0}


def test_a_claim_records_the_submission_when_only_other_events_are_recorded() -> None:
    # a control-plane cancel raced the record: something is known, but not the submission
    known = {("ns", INV): Fence(top=-1)}
    [made, claim] = fence_batch([carrying(C, 1)], known).events
    assert made.type is S and claim.type is C


def test_one_submitted_event_is_recorded_per_invocation() -> None:
    # the submit's own event after the record its claim made, a retried key announced again
    out = fence_batch([carrying(ST, 1), ev(S, None, INV), ev(S, None, INV)], {})
    assert [e.type for e in out.events] == [S, ST] and out.repeated == 2
    assert out.fences[("ns", INV)].state is InvocationState.RUNNING
    known = {("ns", INV): Fence(top=0, submitted=True)}
    out = fence_batch([ev(S, None, INV)], known)
    assert (out.events, out.repeated) == ([], 1)
    out = fence_batch([ev(S, None, INV)], {("ns", INV): Fence(top=-1)})
    assert [e.type for e in out.events] == [S], "a cancel raced it: still its first"


def test_the_control_planes_drop_and_cancel_give_up_the_record_they_carry() -> None:
    for end, made_by in ((DROP, "dropped"), (CANCEL, "cancelled")):
        gone = replace(ev(end, None, INV), detail={"seq": 7, "submission": RECORD})
        made, recorded = fence_batch([gone], {}).events
        assert (made.type, made.detail["recorded_from"]) == (S, made_by)
        assert recorded.type is end and recorded.detail == {"seq": 7}


RANK_OF = {C: 1, ST: 2}
