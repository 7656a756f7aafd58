"""Code snapshots as the API shows them (spec/code.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from msgspec import Meta, Struct

#: A snapshot's name: ``sha256:`` and 64 lowercase hex digits (:mod:`lakeshore.code.snapshot`).
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
Digest = Annotated[str, Meta(pattern=DIGEST_PATTERN)]


class CodeInfo(Struct, frozen=True, kw_only=True):
    """One stored snapshot of an org."""

    digest: str
    #: the files' sizes together
    size: int
    files: int
    stored_at: datetime | None = None
