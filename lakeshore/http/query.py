"""Query-string parameters, parsed the same way by every route: 400 naming the parameter
and the range it must be in, never a 500."""

from __future__ import annotations

import math
import uuid
from enum import StrEnum
from typing import TypeVar

from aiohttp import web

from lakeshore.errors import Invalid, InvalidName
from lakeshore.model import Queue, validate_name

E = TypeVar("E", bound=StrEnum)

#: The largest page a listing answers.
MAX_LIMIT = 1000


def limit(request: web.Request, default: int) -> int:
    """``?limit=``: an integer from 1 to :data:`MAX_LIMIT`."""
    raw = request.query.get("limit")
    if raw is None:
        return default
    try:
        value = int(raw.strip()) if raw.strip().isascii() else 0
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIMIT:
        raise Invalid(f"limit must be an integer from 1 to {MAX_LIMIT}, got {raw!r}")
    return value


def seconds(request: web.Request, key: str, default: float, most: float) -> float:
    """``?<key>=``: a number of seconds from 0 to ``most``."""
    raw = request.query.get(key)
    if raw is None:
        return default
    try:
        value = float(raw) if raw.strip().isascii() else -1.0
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and 0 <= value <= most):
        raise Invalid(f"{key} must be a number of seconds from 0 to {most:g}, got {raw!r}")
    return value


def flag(request: web.Request, key: str) -> bool:
    """``?<key>`` / ``?<key>=true|false|1|0``."""
    raw = request.query.get(key, "false").lower()
    if raw not in ("true", "false", "1", "0", ""):
        raise Invalid(f"query parameter {key} must be true or false, got {raw!r}")
    return raw in ("true", "1", "")


def choice(request: web.Request, key: str, *enums: type[E]) -> E | None:
    """``?<key>=`` one of the values of ``enums`` (absent or empty: ``None``)."""
    raw = request.query.get(key)
    if not raw:
        return None
    for enum in enums:
        try:
            return enum(raw)
        except ValueError:
            continue
    allowed = ", ".join(m.value for enum in enums for m in enum)
    raise Invalid(f"unknown {key} {raw!r}; use one of {allowed}")


def job_id(request: web.Request, key: str) -> str | None:
    """``?<key>=`` a job id, as ``jobs ls`` shows them (absent or empty: ``None``)."""
    raw = request.query.get(key)
    if not raw:
        return None
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise Invalid(
            f"{key} must be a job id (the id of the last job of the previous page), got {raw!r}"
        ) from None


def cursor_of(q: Queue) -> str:
    """The cursor of a queue list's page that ends with ``q``: ``<namespace>/<name>``."""
    return f"{q.namespace}/{q.name}"


def queue_cursor(request: web.Request, key: str) -> tuple[str, str] | None:
    """``?<key>=`` a queue list's cursor, ``<namespace>/<name>`` as a page's ``next`` gives
    it (absent or empty: ``None``)."""
    raw = request.query.get(key)
    if not raw:
        return None
    ns, _, name = raw.partition("/")
    try:
        return validate_name("namespace", ns), validate_name("queue", name)
    except InvalidName:
        raise Invalid(
            f"{key} must be the next of the previous page (<namespace>/<queue>), got {raw!r}"
        ) from None
