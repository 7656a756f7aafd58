"""Names, limits and small shared types of the model."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from msgspec import Meta, Struct

from lakeshore.errors import InvalidName

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
NAME_MAX = 63
_NAME_RE = re.compile(NAME_PATTERN)

#: The reserved queue every namespace has without creating it.
DEFAULT_QUEUE = "default"
DEFAULT_QUEUE_DESCRIPTION = "Default queue (auto-created). Cannot be archived or deleted."

#: Priority levels of a ``priority`` queue: p0 … p9, 9 highest. ``fifo`` queues use p0 only.
PRIORITY_LEVELS = 10


def validate_name(what: str, value: str) -> str:
    """Check a queue, namespace, org or pool name at the edge.

    Names become NATS subject tokens and stream names, so they are restricted to
    ``^[a-z0-9][a-z0-9-]*$`` and at most 63 characters.

    Raises:
        InvalidName: with what was wrong and the rule to follow.
    """
    if not value:
        raise InvalidName(what, value, "it is empty")
    if len(value) > NAME_MAX:
        raise InvalidName(what, value, f"it has {len(value)} characters, at most {NAME_MAX}")
    if not _NAME_RE.match(value):
        raise InvalidName(
            what,
            value,
            f"use lowercase letters, digits and '-', starting with a letter "
            f"or digit ({NAME_PATTERN})",
        )
    return value


def now() -> datetime:
    return datetime.now(UTC)


NonNegInt = Annotated[int, Meta(ge=0)]

NonNegFloat = Annotated[float, Meta(ge=0)]

Name = Annotated[str, Meta(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]


class ErrorDetail(Struct, frozen=True):
    code: str
    message: str


class ErrorBody(Struct, frozen=True):
    error: ErrorDetail


# ---- request bodies -------------------------------------------------------------------
