"""Code snapshots as the API shows them (spec/code.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from msgspec import Meta, Struct

#: A snapshot's name: ``sha256:`` and 64 lowercase hex digits (:mod:`lakeshore.code.snapshot`).
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
Digest = Annotated[str, Meta(pattern=DIGEST_PATTERN)]


class CodeUse(Struct, frozen=True, kw_only=True):
    """How an org's jobs use one snapshot (from the jobs' history)."""

    #: jobs submitted with it
    jobs: int = 0
    #: of them, not finished (a pending or running job keeps its snapshot)
    unfinished: int = 0
    #: the first of their events, and the last
    first_used: datetime | None = None
    last_used: datetime | None = None
    #: queues whose invocations run in it when they name none (it is kept while any does)
    queues: int = 0


class CodeInfo(CodeUse, frozen=True, kw_only=True):
    """One stored snapshot of an org, and how its jobs use it."""

    digest: str
    #: the files' sizes together
    size: int
    files: int
    stored_at: datetime | None = None


class CodeList(Struct, frozen=True, kw_only=True):
    """``GET …/code``: the org's snapshots, the most recently used first."""

    snapshots: list[CodeInfo]
