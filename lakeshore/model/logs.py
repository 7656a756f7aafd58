"""The lines of ``GET …/jobs/:id/logs``: a run's output chunks, a retry followed, the end.

The route answers NDJSON, one of these per line, told apart by ``kind``. A client decodes
each line with :data:`LOG_LINE` (unknown kinds of a newer server: skip them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from msgspec import Struct

#: The streams of a run's output, as its chunks name them.
LogStream = Literal["out", "err"]


class LogChunk(Struct, frozen=True, kw_only=True, tag="chunk", tag_field="kind"):
    """Output a run wrote, in the order it wrote it."""

    #: 1, 2, … per attempt, without gaps: ``after=seq`` resumes after this one
    seq: int
    #: the attempt (the claim's epoch) that wrote it
    attempt: int
    #: ``out`` (stdout) or ``err`` (stderr, and the daemon's own notes of dropped output)
    stream: LogStream
    #: when the daemon read its first byte
    time: datetime
    #: the bytes as UTF-8 (a chunk never ends inside a character; invalid bytes: U+FFFD)
    text: str


class LogAttempt(Struct, frozen=True, kw_only=True, tag="attempt", tag_field="kind"):
    """A follow moves on to the job's next attempt (a retry, or a run requeued after its
    daemon was lost)."""

    attempt: int
    #: the attempt it leaves
    previous: int


class LogEnd(Struct, frozen=True, kw_only=True, tag="end", tag_field="kind"):
    """The last line: what was stored was sent (without ``follow``), or the job ended."""

    #: the job's state when the answer ended (a follow ends only on a final state)
    state: str
    #: the attempt read last
    attempt: int


LogLine = LogChunk | LogAttempt | LogEnd
#: The type to decode one line of the route's answer as.
LOG_LINE = LogLine
