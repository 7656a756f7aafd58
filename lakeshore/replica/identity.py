"""Which control plane this is: an id kept in its data dir, and the leader's URL as known."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import time
from pathlib import Path

from lakeshore.bus.lease import Lease

#: The file in the data dir that names this control plane among its peers.
REPLICA_ID_FILE = "replica-id"
#: How long a standby reuses the leader's URL it read (seconds).
LEADER_URL_CACHE_S = 0.5
#: How long an answer waits for the leader's URL to be read (seconds).
LEADER_URL_WAIT_S = 0.2
_WILDCARDS = ("", "0.0.0.0", "::")


def read_replica_id(data_dir: Path) -> str:
    """This control plane's id: made on its first start, kept with its data dir (so a
    restart takes its own lease over at once, while its file can be rebuilt)."""
    path = data_dir / REPLICA_ID_FILE
    if path.is_file():
        text = path.read_text().strip()
        if text:
            return text
    made = f"{socket.gethostname().split('.')[0][:24]}-{secrets.token_hex(4)}"
    path.write_text(made + "\n")
    path.chmod(0o600)
    return made


def advertised_api(host: str, port: int) -> str:
    """The API URL peers name for this plane when none is configured."""
    reach = socket.getfqdn() if host in _WILDCARDS else host
    return f"http://{reach}:{port}"


class LeaderUrl:
    """The leader's API URL as the lease names it, read at most every half second.

    An answer never waits long for NATS: while JetStream elects the lease stream's leader
    a read waits out its timeout, so a standby's every ``not_leader`` answer would take
    that long. A read is waited for up to ``LEADER_URL_WAIT_S``, then goes on in the
    background while the URL last read is used.
    """

    def __init__(self) -> None:
        self.lease: Lease | None = None
        self._url: str | None = None
        self._at = 0.0
        self._reading: asyncio.Task[None] | None = None

    async def get(self) -> str | None:
        lease = self.lease
        if lease is None:
            return None
        if time.monotonic() - self._at > LEADER_URL_CACHE_S:
            if self._reading is None:
                self._reading = asyncio.create_task(self._read(lease), name="leader-url")
            await asyncio.wait({self._reading}, timeout=LEADER_URL_WAIT_S)
        return self._url

    async def close(self) -> None:
        """Stop a read still under way."""
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading

    async def _read(self, lease: Lease) -> None:
        try:
            holder = await lease.leader()
        except Exception:  # NATS away: say no leader is known
            holder = None
        self._url = holder.url if holder is not None and holder.url else None
        self._at = time.monotonic()
        self._reading = None
