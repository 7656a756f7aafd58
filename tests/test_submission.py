"""The record of a submission, made from an invocation's message (lakeshore/submission.py):
what the ``submitted`` event keeps, what a claim carries, and what the Recorder makes of it."""

from __future__ import annotations

import pytest

from lakeshore import submission
from lakeshore.bus import codec
from lakeshore.daemon.events import MAX_BATCH
from lakeshore.errors import Conflict
from lakeshore.ids import new_id, submitted_at
from lakeshore.model import (
    EventBatch,
    EventType,
    Invocation,
    InvocationEvent,
    InvocationState,
    Job,
    Resources,
    now,
)
from lakeshore.services.retries import retried

MAX_PAYLOAD = 1024 * 1024  # NATS's default max_payload, the server's


def _inv(**fields) -> Invocation:
    return Invocation(
        id=new_id(), namespace="ns", queue="q", submitted_at=now(), **fields
    )  # fmt: skip


def test_the_record_keeps_the_submit_and_no_env_value() -> None:
    inv = _inv(
        fn="m:f", args=[1, "a"], kwargs={"k": 2}, env={"TOKEN": "s3cret"}, priority=3,
        timeout_s=9.0, max_attempts=2, code="sha256:" + "0" * 64,
        resources=Resources(cpus=2), idempotency_key="key", batch="b-1", retry_of="r-1",
    )  # fmt: skip
    record = submission.detail(inv, 17, keep_args=True)
    assert record["seq"] == 17 and record["fn"] == "m:f" and record["priority"] == 3
    assert (record["args"], record["kwargs"]) == ([1, "a"], {"k": 2})
    assert (record["idempotency_key"], record["batch"], record["retry_of"]) == ("key", "b-1", "r-1")
    assert record["env_keys"] == ["TOKEN"]
    assert "s3cret" not in codec.encode(record).decode()
    assert "args" not in submission.detail(inv, 17, keep_args=False)


def test_a_claim_carries_small_arguments_and_says_when_it_left_some_out() -> None:
    small = _inv(fn="m:f", args=[1])
    carried = submission.carried(small, 3, len(codec.encode(small)))
    assert carried == submission.detail(small, 3, keep_args=True), "nothing left out"
    big = _inv(fn="m:f", args=["x" * submission.MAX_CARRIED_BYTES])
    carried = submission.carried(big, 3, len(codec.encode(big)))
    assert "args" not in carried and carried["partial"] is True
    argv = _inv(command=["echo", "y" * submission.MAX_CARRIED_BYTES])
    carried = submission.carried(argv, 3, len(codec.encode(argv)))
    assert carried["command"] is None and carried["partial"] is True
    short = _inv(command=["echo", "y"], env={"V": "y" * submission.MAX_CARRIED_BYTES})
    carried = submission.carried(short, 3, len(codec.encode(short)))
    assert carried["command"] == ["echo", "y"] and "partial" not in carried, "only what is big"
    secret = _inv(fn="m:f", args=[1], env={"V": "y" * submission.MAX_CARRIED_BYTES})
    carried = submission.carried(secret, 3, len(codec.encode(secret)))
    assert carried["args"] == [1] and "partial" not in carried, "env values are not recorded"


def test_a_record_is_carried_in_full_when_a_claim_would_carry_it_as_it_is() -> None:
    def full(inv: Invocation, size: int | None = None) -> bool:
        size = len(codec.encode(inv)) if size is None else size
        record = submission.submitted(inv, 3, size, inv.submitted_at).detail
        same = submission.carried(inv, 3, size) == record
        assert submission.carried_in_full(record) is same, "as the claim's record says"
        return same

    assert full(_inv(fn="m:f", args=[1]))
    assert full(_inv(command=["echo", "y"]))
    assert not full(_inv(fn="m:f", args=["x" * submission.MAX_CARRIED_BYTES]))
    assert not full(_inv(command=["echo", "y" * submission.MAX_CARRIED_BYTES]))
    # A message over the bound of kept arguments: its record has none, the claim's says so.
    assert not full(_inv(fn="m:f", args=[1]), size=submission.MAX_KEPT_BODY_BYTES + 1)
    assert not submission.carried_in_full(None)


@pytest.mark.parametrize("over", [False, True], ids=["at the bound", "far over it"])
def test_a_daemons_batch_of_claims_carrying_the_largest_records_fits_in_one_message(over) -> None:
    # The largest message whose record is carried whole, and one far over the bound: a long
    # argv, many env keys, the longest names (the record then leaves what it must out).
    n = 100 if over else 1
    inv = _inv(
        command=["z" * (submission.MAX_CARRIED_BYTES * n)], env={f"K{i}": "" for i in range(n)},
        idempotency_key="k" * 256, resources=Resources(cpus=64, memory="512G"),
        code="sha256:" + "0" * 64, batch=new_id(), retry_of=new_id(),
    )  # fmt: skip
    size = submission.MAX_CARRIED_BYTES if not over else len(codec.encode(inv))
    record = submission.carried(inv, 2**40, size)
    assert ("partial" in record) is over
    claim = InvocationEvent(
        namespace="n" * 63, queue="q" * 63, invocation_id=inv.id, ts=now(),
        type=EventType.STARTED, attempt=1, worker=new_id(), epoch=1,
        detail={"seq": 2**40, "level": 9, "run": "r" * 32, submission.CARRIED: record},
    )  # fmt: skip
    assert len(codec.encode(EventBatch(events=[claim] * MAX_BATCH))) < MAX_PAYLOAD


def test_the_recorder_makes_the_submitted_event_from_a_claim() -> None:
    inv = _inv(fn="m:f", args=[5])
    record = submission.carried(inv, 4, 100)
    claim = InvocationEvent(
        namespace="ns", queue="q", invocation_id=inv.id, ts=now(), type=EventType.CLAIMED,
        attempt=1, worker="w", epoch=1, detail={"seq": 4, submission.CARRIED: record},
    )  # fmt: skip
    bare, made = submission.from_event(claim)
    assert bare.detail == {"seq": 4}
    assert made is not None and made.type is EventType.SUBMITTED
    assert made.ts == submitted_at(inv.id)
    assert made.detail == {**record, "recorded_from": "claim"}
    assert submission.from_event(bare) == (bare, None)


def _failed(**fields) -> Job:
    return Job(id="j1", namespace="ns", queue="q", state=InvocationState.FAILED, **fields)


def test_a_retry_submits_a_record_made_from_a_claim() -> None:
    inv = _inv(fn="m:f", args=[5], max_attempts=2)
    record = submission.carried(inv, 4, 100)
    again = retried(_failed(fn="m:f", max_attempts=2), record, None)
    assert (again.fn, again.args, again.retry_of) == ("m:f", [5], "j1")


@pytest.mark.parametrize(
    "inv",
    [
        _inv(fn="m:f", args=["x" * submission.MAX_CARRIED_BYTES]),
        _inv(command=["echo", "y" * submission.MAX_CARRIED_BYTES]),
    ],
    ids=["large arguments", "long argv"],
)
def test_a_retry_of_a_partial_record_says_why_it_cannot(inv: Invocation) -> None:
    record = submission.carried(inv, 4, len(codec.encode(inv)))
    with pytest.raises(Conflict, match="its record was made from its claim"):
        retried(_failed(fn=inv.fn, command=record["command"]), record, None)
