"""Time-ordered invocation ids (UUIDv7, RFC 9562): sorting ids sorts by submission time."""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from datetime import UTC, datetime

_lock = threading.Lock()
_last_ms = 0
_counter = 0
#: A UUIDv7 as :func:`new_id` writes it (read without building a ``UUID``: the Recorder
#: reads two per run).
_CANONICAL_V7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


def new_id() -> str:
    """A UUIDv7 string; ids made in one process are strictly increasing.

    Within one millisecond a 12-bit counter (``rand_a``) keeps the order; the remaining
    62 bits are random.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            _counter += 1
            if _counter > 0xFFF:
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms, _counter = ms, 0
        counter = _counter
    rand_b = int.from_bytes(os.urandom(8)) & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand_b
    return str(uuid.UUID(int=value))


def submitted_at(invocation_id: str) -> datetime | None:
    """The submission time an id made by :func:`new_id` carries (its first 48 bits, in
    milliseconds); ``None`` for an id that is not a UUIDv7."""
    if _CANONICAL_V7.fullmatch(invocation_id):
        return datetime.fromtimestamp(int(invocation_id[:8] + invocation_id[9:13], 16) / 1000, UTC)
    try:
        u = uuid.UUID(invocation_id)
    except ValueError:
        return None
    if u.version != 7:
        return None
    return datetime.fromtimestamp((u.int >> 80) / 1000, UTC)
