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
