"""The daemon's NATS credential: the current one, and when to ask for a new one.

A credential is short-lived; the heartbeat past half its life carries it and the answer
brings a fresh one, which the connection presents at its next (re)connect.
"""

from __future__ import annotations

import time

from lakeshore.model import DaemonAccess
from lakeshore.security.credentials import expires_at


class Credential:
    """The daemon's current credential (read by the NATS connection at each connect)."""

    def __init__(self, access: DaemonAccess) -> None:
        self._set(access.credential, int(access.expires_at.timestamp()))

    def current(self) -> str:
        return self._value

    def due(self) -> str | None:
        """The credential to renew once past half its life, else ``None``."""
        return self._value if time.time() >= self._renew_at else None

    def expired(self) -> bool:
        """Whether the current credential's life is over (by this host's clock): NATS
        refuses it, and it can no longer be renewed."""
        return time.time() >= self._expires

    def renewed(self, value: str) -> None:
        self._set(value, expires_at(value))

    def _set(self, value: str, expires: int) -> None:
        got = time.time()
        self._value = value
        self._expires = expires
        self._renew_at = got + max(0.0, expires - got) / 2
