"""Which control plane this is: an id kept in its data dir, and the leader's URL as known."""

from __future__ import annotations

import secrets
import socket
import time
from pathlib import Path

from lakeshore.bus.lease import Lease

#: The file in the data dir that names this control plane among its peers.
REPLICA_ID_FILE = "replica-id"
#: How long a standby reuses the leader's URL it read (seconds).
LEADER_URL_CACHE_S = 0.5
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
    """The leader's API URL as the lease names it, read at most every half second."""

    def __init__(self) -> None:
        self.lease: Lease | None = None
        self._url: str | None = None
        self._at = 0.0

    async def get(self) -> str | None:
        if self.lease is None:
            return None
        if time.monotonic() - self._at > LEADER_URL_CACHE_S:
            try:
                holder = await self.lease.leader()
            except Exception:  # NATS away: say no leader is known
                holder = None
            self._url = holder.url if holder is not None and holder.url else None
            self._at = time.monotonic()
        return self._url
