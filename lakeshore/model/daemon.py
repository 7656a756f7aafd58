"""Messages between a daemon and the control plane over NATS."""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct

from lakeshore.model.resources import Capacity
from lakeshore.model.workers import WorkerStatus


class ClaimMark(Struct, frozen=True, array_like=True):
    """A claim's place in its daemon process's order: the process (``boot``, new at each
    start) and how many claims it had taken with this one (``n``). A heartbeat carries the
    latest mark, so a report at or past an attempt's mark was made after that claim — no
    clock is compared (a daemon's may be skewed, and the history shifts skewed times)."""

    boot: str
    n: int

    def seen_by(self, latest: ClaimMark) -> bool:
        """A report whose latest mark is ``latest`` was made after this claim (the same
        process, as far or further) or by a later process of the same worker."""
        return latest.boot != self.boot or latest.n >= self.n


class Heartbeat(Struct, frozen=True, kw_only=True):
    """Daemon → WorkerRegistry on ``ls.<ns>.hb.<worker-id>``, every ``heartbeat_s``."""

    worker_id: str
    namespace: str
    status: WorkerStatus
    #: ids of the invocations running now
    current: list[str] = []
    ts: datetime
    #: the latest claim this daemon process took (``None``: none yet)
    claims: ClaimMark | None = None
    #: the daemon's NATS credential, sent when it is past half its life to get a new one
    renew: str | None = None
    #: what is free of its resources now (``None``: it does not report resources)
    free: Capacity | None = None


class HeldAsk(Struct, frozen=True, kw_only=True):
    """Daemon → control plane on ``ls.<ns>.held.<worker-id>``, before it runs a redelivered
    invocation (a delivery count above 1)."""

    namespace: str
    invocation_id: str
    #: the delivery count of the daemon's delivery (its attempt's epoch)
    epoch: int


class Takeover(Struct, frozen=True, kw_only=True):
    """An earlier attempt whose daemon no longer holds it: the redelivery takes it over."""

    worker: str
    #: the epoch that daemon claimed
    epoch: int
    #: why it holds it no longer, e.g. ``its daemon has been silent for 12 s``
    why: str


class HeldAnswer(Struct, frozen=True, kw_only=True):
    """Who still holds an earlier attempt of the invocation; ``holder`` ``None``: nobody
    live, run it."""

    holder: str | None = None
    #: the epoch that holder claimed
    epoch: int = 0
    #: when to look again, if the holder is still running it then (seconds)
    retry_s: float = 0.0
    #: no live holder, but an earlier attempt that has not ended: the one taken over
    takeover: Takeover | None = None
    #: the fields below were read from the job's history (``False``: an answer from a
    #: control plane before them, or a holder's: nothing is known of the earlier attempts)
    history: bool = False
    #: earlier attempts that count toward ``max_attempts``: failed, timed out, crashed (a
    #: preempted or lost one does not)
    counted: int = 0
    #: earlier attempts lost in a row just before this one (each one's daemon died under it)
    lost_in_row: int = 0
    #: an earlier attempt was preempted or lost (the run sees ``LAKESHORE_PREEMPTED=1``)
    preempted: bool = False
    #: earlier attempts of any outcome: the redelivery runs as attempt ``attempts + 1``
    #: (``LAKESHORE_ATTEMPT``; a hand-back raises the delivery count, not this)
    attempts: int = 0


class StealGrant(Struct, frozen=True, kw_only=True):
    """A lease to pull from another queue after the daemon's own (the controller's)."""

    queue: str
    until: datetime


class HeartbeatReply(Struct, frozen=True, kw_only=True):
    """The daemon's queues (``Worker.queues``: ``[]`` is the default queue) and orders."""

    queues: list[str]
    retire: bool = False
    steal: list[StealGrant] = []
    #: the registry did not know this worker (e.g. deleted): the daemon re-registers
    unknown: bool = False
    #: a renewed NATS credential (answer to ``Heartbeat.renew``)
    credential: str | None = None


class DaemonControl(Struct, frozen=True, kw_only=True):
    """Control plane → daemon on ``ls.<ns>.daemon.<worker-id>.ctl``."""

    #: stop this invocation if it runs here
    cancel: str | None = None
    #: who cancelled it (the token's name), recorded on the attempt
    by: str | None = None
    #: finish the current invocations, then exit
    retire: bool = False


class DaemonJoin(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/namespaces/:ns/daemons/join``: a daemon asks how to reach NATS."""

    #: the worker id a launcher gave it; ``None``: a new one
    id: str | None = None


class BusAccess(Struct, frozen=True, kw_only=True):
    """``GET /v1/bus``: where the SDK's fast path reaches NATS (it logs in as
    ``producer/<nonce>`` with its token, the password)."""

    #: NATS server URL(s), comma-separated
    nats_url: str
    #: PEM of the CA that signs the NATS server's certificate; ``None``: NATS is plain text
    ca_pem: str | None = None
    #: whether a plain submit may be published straight into its queue's stream (the
    #: server's ``direct_submit``; the producer's grant then has its org's queue subjects)
    direct_submit: bool = False


class StoredNote(Struct, frozen=True, kw_only=True):
    """A producer's note on ``ls.<ns>.stored.<queue>`` after it published a submit straight
    into the queue's stream (``direct_submit``): where, and which invocations."""

    seqs: list[int]
    ids: list[str]


class DaemonAccess(Struct, frozen=True, kw_only=True):
    """All a daemon needs to join: where NATS is, its identity and its credential."""

    worker_id: str
    namespace: str
    #: NATS server URL(s), comma-separated
    nats_url: str
    #: the NATS password of user ``daemon``: short-lived, renewed on heartbeats
    credential: str
    expires_at: datetime
    #: PEM of the CA that signs the NATS server's certificate; ``None``: NATS is plain text
    ca_pem: str | None = None
