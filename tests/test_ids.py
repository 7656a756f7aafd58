"""Invocation ids carry their submission time (UUIDv7), which the metrics read back."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from lakeshore.ids import new_id, submitted_at


def test_an_id_carries_the_millisecond_it_was_made_in() -> None:
    # The id keeps whole milliseconds: its time may be up to 1 ms before ``before``.
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    made = submitted_at(new_id())
    after = datetime.now(UTC)
    assert made is not None and before <= made <= after


def test_ids_that_are_not_uuid7_carry_no_time() -> None:
    assert submitted_at("not-an-id") is None
    assert submitted_at(str(uuid.uuid4())) is None


def test_every_spelling_of_an_id_carries_the_same_time() -> None:
    # The canonical spelling is read directly; the others go through ``uuid.UUID``.
    i = new_id()
    spellings = [i, i.upper(), i.replace("-", ""), "{" + i + "}", f"urn:uuid:{i}"]
    assert {submitted_at(s) for s in spellings} == {submitted_at(i)}
    assert submitted_at(i) == datetime.fromtimestamp((uuid.UUID(i).int >> 80) / 1000, UTC)
    assert submitted_at(i[:14] + "4" + i[15:]) is None  # version 4
    assert submitted_at(i[:-1] + "z") is None  # not hex
