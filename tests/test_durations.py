"""The one duration parser of ``--since``/``--every`` and the history routes."""

from __future__ import annotations

import pytest

from lakeshore.durations import parse_duration
from lakeshore.errors import Invalid


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("5m", 300), ("1h", 3600), ("2d", 172800), ("1.5h", 5400)]
)
def test_a_duration_is_a_number_and_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text, "since") == seconds


@pytest.mark.parametrize("text", ["", "5", "0s", "-1h", "1w", "1 h", "1e3s", "nan", "3651d"])
def test_anything_else_is_invalid_and_named(text: str) -> None:
    with pytest.raises(Invalid, match=r"^every must be a duration like 30s, 5m, 1h or 2d"):
        parse_duration(text, "every")
