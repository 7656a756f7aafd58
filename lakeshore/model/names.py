"""Names, limits and small shared types of the model."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from msgspec import Meta, Struct

from lakeshore.errors import Invalid, InvalidName

#: Lowercase letters, digits and ``-``, starting and ending with a letter or digit (every
#: name that matches also matches spec/queues.md's ``^[a-z0-9][a-z0-9-]*$``).
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
NAME_MAX = 63
_NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
#: For msgspec's schema checks, which search: ``$`` alone would match before a final newline.
_NAME_SCHEMA = NAME_PATTERN[:-1] + r"(?!\n)$"

#: The reserved queue every namespace has without creating it.
DEFAULT_QUEUE = "default"
DEFAULT_QUEUE_DESCRIPTION = "Default queue (auto-created). Cannot be archived or deleted."

#: Priority levels of a ``priority`` queue: p0 … p9, 9 highest. ``fifo`` queues use p0 only.
PRIORITY_LEVELS = 10


def validate_name(what: str, value: str) -> str:
    """Check a queue, namespace, org or pool name at the edge.

    Names become NATS subject tokens and stream names, so they are restricted to
    :data:`NAME_PATTERN` (the whole value: a final newline is not a name's) and at most
    63 characters.

    Raises:
        InvalidName: with what was wrong and the rule to follow.
    """
    if not value:
        raise InvalidName(what, value, "it is empty")
    if len(value) > NAME_MAX:
        raise InvalidName(what, value, f"it has {len(value)} characters, at most {NAME_MAX}")
    if not _NAME_RE.fullmatch(value):
        raise InvalidName(
            what,
            value,
            f"use lowercase letters, digits and '-', starting and ending with a letter "
            f"or digit ({NAME_PATTERN})",
        )
    return value


def check_depth(what: str, value: Any) -> None:
    """Refuse JSON values nested deeper than :data:`MAX_JSON_DEPTH` (they would exhaust the
    recursion of every decoder that reads them later: the daemon's, the store's).

    Raises:
        Invalid: naming ``what`` and the limit.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise Invalid(
                f"{what} is nested more than {MAX_JSON_DEPTH} levels deep; flatten it or pass "
                "a reference (a path or URL) instead"
            )
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def check_stop_grace(what: str, value: float) -> None:
    """Refuse a ``stop_grace_s`` outside 0–:data:`MAX_STOP_GRACE_S` seconds.

    Raises:
        Invalid: naming ``what``, the field, the range and the value.
    """
    if not 0 <= value <= MAX_STOP_GRACE_S:  # also false for NaN
        raise Invalid(
            f"{what}: stop_grace_s must be between 0 and {MAX_STOP_GRACE_S:g} seconds "
            f"(got {value:g})"
        )


def check_max_lost(what: str, value: int) -> None:
    """Refuse a ``max_lost`` outside 1–:data:`MAX_LOST`.

    Raises:
        Invalid: naming ``what``, the field, the range and the value.
    """
    if not 1 <= value <= MAX_LOST:
        raise Invalid(f"{what}: max_lost must be between 1 and {MAX_LOST} (got {value})")


def now() -> datetime:
    return datetime.now(UTC)


# ---- limits: every number, size and count a request may carry (400 beyond, naming it) --

#: Most invocations a queue may hold (``max_depth``).
MAX_DEPTH = 1_000_000_000
#: Most controller-managed daemons of a queue (``elasticity.min`` / ``max``).
MAX_FLEET = 1_000
#: Largest ``elasticity.target_pending``.
MAX_TARGET_PENDING = 1_000_000
#: Longest delay of an elasticity rule (``scale_down_idle_s`` …): one week (seconds).
MAX_DELAY_S = 7 * 24 * 3600.0
#: Longest ``timeout_s`` of an invocation: 30 days (seconds).
MAX_TIMEOUT_S = 30 * 24 * 3600.0
#: How long a stopped run has between SIGTERM and SIGKILL unless it says (seconds).
DEFAULT_STOP_GRACE_S = 10.0
#: Longest ``stop_grace_s`` of an invocation: one hour (seconds).
MAX_STOP_GRACE_S = 3600.0
#: Lost attempts in a row (each one's daemon died under it) after which an invocation
#: fails as ``lost_too_often`` unless it says.
DEFAULT_MAX_LOST = 3
#: Largest ``max_lost`` of an invocation.
MAX_LOST = 100
#: Largest ``elasticity.cost_weight``.
MAX_COST_WEIGHT = 1_000_000.0
#: Longest free text (descriptions).
MAX_TEXT = 1_024
#: Most entries of a label, match, env or config object, and of a list of queue names.
MAX_ENTRIES = 64
#: Longest label key and value.
MAX_LABEL = 253
#: Deepest nesting of JSON values a request may carry (``args``, ``kwargs``, ``config``).
MAX_JSON_DEPTH = 64

NonNegInt = Annotated[int, Meta(ge=0)]

NonNegFloat = Annotated[float, Meta(ge=0)]

Text = Annotated[str, Meta(max_length=MAX_TEXT)]
LabelKey = Annotated[str, Meta(min_length=1, max_length=MAX_LABEL)]
LabelValue = Annotated[str, Meta(max_length=MAX_LABEL)]
Labels = Annotated[dict[LabelKey, LabelValue], Meta(max_length=MAX_ENTRIES)]
Depth = Annotated[int, Meta(ge=1, le=MAX_DEPTH)]
Delay = Annotated[float, Meta(ge=0, le=MAX_DELAY_S)]

Name = Annotated[str, Meta(min_length=1, max_length=NAME_MAX, pattern=_NAME_SCHEMA)]


class ErrorDetail(Struct, frozen=True, omit_defaults=True):
    code: str
    message: str
    #: ``not_leader`` only: the API URL of the leader now, when one is known
    leader_url: str | None = None


class ErrorBody(Struct, frozen=True):
    error: ErrorDetail


# ---- request bodies -------------------------------------------------------------------
