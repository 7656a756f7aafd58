"""Every NATS subject, stream and consumer name of Lakeshore, and nowhere else.

Names reaching here were validated at the edge (``^[a-z0-9][a-z0-9-]*$``), so they are safe
as subject tokens and stream names.
"""

from __future__ import annotations

#: Limits-retention stream that carries lifecycle events of every queue.
EVENTS_STREAM = "LS_EVENTS"
EVENTS_SUBJECTS = "ls.*.evt.>"


#: The root of every connection's reply subjects (nats-py's ``inbox_prefix`` lies under it).
INBOX_ROOT = "_INBOX"
#: Under it, every daemon's inbox, and every producer's.
DAEMON_INBOXES = f"{INBOX_ROOT}.d"
PRODUCER_INBOXES = f"{INBOX_ROOT}.p"


def daemon_inbox(namespace: str, worker_id: str) -> str:
    """The inbox prefix of a daemon's connection (its replies arrive under it)."""
    return f"{DAEMON_INBOXES}.{namespace}.{worker_id}"


def producer_inboxes(tag: str) -> str:
    """The prefix of every inbox of the producers that log in with one token (``tag``: the
    token's :func:`~lakeshore.security.grants.inbox_tag`)."""
    return f"{PRODUCER_INBOXES}.{tag}"


def producer_inbox(tag: str, nonce: str) -> str:
    """The inbox prefix of one producer's connection, named by the nonce it connects with."""
    return f"{producer_inboxes(tag)}.{nonce}"


def under(subject: str, prefix: str) -> bool:
    """Whether ``subject`` lies below ``prefix`` (a whole-token prefix, never ``prefix``
    itself)."""
    return subject.startswith(prefix + ".")


def queue_stream(namespace: str, queue: str) -> str:
    """The WorkQueue stream that holds a queue's pending and in-flight invocations."""
    return f"LS_{namespace}_{queue}"


def queue_subjects(namespace: str, queue: str) -> str:
    """The wildcard the queue's stream is bound to."""
    return f"ls.{namespace}.q.{queue}.*"


def closed_subjects(namespace: str, queue: str) -> str:
    """Where the stream of a queue that admits nothing is bound instead of
    :func:`queue_subjects` (draining, archived): no grant has it, so a publish to the
    queue's subjects finds no stream, whoever sends it; what the stream holds keeps its
    subjects, and its consumers deliver it."""
    return f"ls.{namespace}.closed.{queue}.*"


def stored_subject(namespace: str, queue: str) -> str:
    """Core NATS: a producer that published straight into the queue's stream says which
    sequences it stored (a JSON list); the control plane reads them there and records them
    (:mod:`lakeshore.services.stored`)."""
    return f"ls.{namespace}.stored.{queue}"


def stored_wildcard() -> str:
    return "ls.*.stored.*"


def level_subject(namespace: str, queue: str, level: int) -> str:
    """Subject of one priority level (fifo queues use level 0 only)."""
    return f"ls.{namespace}.q.{queue}.p{level}"


def level_consumer(level: int) -> str:
    """Durable pull consumer shared by every daemon of the queue for one level."""
    return f"p{level}"


def nudge_subject(namespace: str, queue: str) -> str:
    """Core-NATS wake-up for idle daemons after work was admitted to ``queue``."""
    return f"ls.{namespace}.nudge.{queue}"


def register_subject(namespace: str, worker_id: str) -> str:
    """Request/reply: a daemon announces itself (``WorkerRegister`` → ``Worker``)."""
    return f"ls.{namespace}.register.{worker_id}"


def heartbeat_wildcard() -> str:
    return "ls.*.hb.*"


def register_wildcard() -> str:
    return "ls.*.register.*"


def submit_wildcard() -> str:
    return "ls.*.submit.*"


def submit_subject(namespace: str, queue: str) -> str:
    """Request/reply: the SDK's fast-path submit (``FastSubmit`` → ``Submitted``)."""
    return f"ls.{namespace}.submit.{queue}"


def result_wait_wildcard() -> str:
    return "ls.*.result.*"


def result_wait_subject(namespace: str, invocation_id: str) -> str:
    """Request/reply: the SDK's fast-path result wait (``FastResult`` → ``Result`` or
    ``Job``), answered the moment the Recorder accepts the outcome."""
    return f"ls.{namespace}.result.{invocation_id}"


def heartbeat_subject(namespace: str, worker_id: str) -> str:
    return f"ls.{namespace}.hb.{worker_id}"


def held_wildcard() -> str:
    return "ls.*.held.*"


def held_subject(namespace: str, worker_id: str) -> str:
    """Request/reply: before running a redelivered invocation, a daemon asks whether an
    earlier attempt is still held by a live daemon (``HeldAsk`` → ``HeldAnswer``): a
    peer's NAK must not make a job run twice at once."""
    return f"ls.{namespace}.held.{worker_id}"


#: The publisher token of the events the control plane itself publishes (not a valid
#: worker id, so no daemon can publish as the control plane).
PLANE_PUBLISHER = "_plane"


def event_subject(namespace: str, queue: str, publisher: str = PLANE_PUBLISHER) -> str:
    """Where ``publisher`` (a worker id, or :data:`PLANE_PUBLISHER`) publishes events of
    ``queue``: a daemon's permissions allow only its own id here."""
    return f"ls.{namespace}.evt.{queue}.{publisher}"


def daemon_control_subject(namespace: str, worker_id: str) -> str:
    return f"ls.{namespace}.daemon.{worker_id}.ctl"


#: Limits-retention stream of runs' live output (stdout and stderr), one subject per attempt.
LOGS_STREAM = "LS_LOGS"
LOGS_SUBJECTS = "ls.*.log.>"


def log_subject(namespace: str, invocation_id: str, attempt: int | str) -> str:
    """Where the daemon running an attempt publishes its output (``attempt``: the claim's
    epoch; ``"*"``: every attempt's)."""
    return f"ls.{namespace}.log.{invocation_id}.{attempt}"


def log_put_subject(namespace: str) -> str:
    """Every log subject of ``namespace``: what its daemons may publish to."""
    return f"ls.{namespace}.log.>"


#: KV bucket with invocation results.
RESULTS_BUCKET = "LS_RESULTS"
#: The JetStream stream behind it.
RESULTS_STREAM = f"KV_{RESULTS_BUCKET}"
#: Durable consumer of the events stream that the Recorder pulls from.
RECORDER_CONSUMER = "recorder"


def result_key(namespace: str, invocation_id: str, epoch: int) -> str:
    """Results are keyed per attempt, so a stale attempt never overwrites the accepted one."""
    return f"{namespace}.{invocation_id}.{epoch}"


def event_subject_parts(subject: str) -> tuple[str, str, str] | None:
    """``(namespace, queue, publisher)`` of an :func:`event_subject`; ``None`` for any other
    subject."""
    parts = subject.split(".")
    if len(parts) != 5 or parts[0] != "ls" or parts[2] != "evt":
        return None
    return parts[1], parts[3], parts[4]


def result_put_subject(namespace: str) -> str:
    """Where a daemon stores the results of ``namespace`` (the bucket's subjects)."""
    return f"$KV.{RESULTS_BUCKET}.{namespace}.>"


def result_subject(namespace: str, invocation_id: str, epoch: int | str) -> str:
    """The subject a result is put on (what ``kv.put`` publishes to); ``epoch`` ``"*"``:
    every attempt's."""
    return f"$KV.{RESULTS_BUCKET}.{namespace}.{invocation_id}.{epoch}"


def pull_subject(namespace: str, queue: str, level: int) -> str:
    """JetStream API subject of a pull request on one level's consumer (a daemon's claim)."""
    return f"$JS.API.CONSUMER.MSG.NEXT.{queue_stream(namespace, queue)}.{level_consumer(level)}"


#: KV bucket of the control planes' leader lease (history 1, per-message TTL, no limit
#: markers: see :mod:`lakeshore.bus.lease`).
LEASE_BUCKET = "LS_LEASE"
#: The one key of :data:`LEASE_BUCKET`.
LEASE_KEY = "leader"
#: The control planes' state stream: row images, one subject per row (outside ``ls.``,
#: whose second token is a namespace's name).
STATE_STREAM = "LS_STATE"
STATE_PREFIX = "lsstate"
STATE_SUBJECTS = f"{STATE_PREFIX}.>"
#: Subject of the epoch records in the state stream, the fence every leader write is
#: checked against (no row kind is called ``epoch``).
STATE_EPOCH_SUBJECT = f"{STATE_PREFIX}.epoch"


#: The control plane's room in JetStream's store (:mod:`lakeshore.bus.reserve`): filler it
#: gives up when the store is full, so that its own writes go on (outside ``ls.``).
RESERVE_STREAM = "LS_RESERVE"
RESERVE_PREFIX = "lsreserve"


def reserve_subject(part: str = "room") -> str:
    """A subject of the reserve stream: ``room`` holds the filler, ``probe`` the small write
    that tells whether the store is under its limit once the filler is back."""
    return f"{RESERVE_PREFIX}.{part}"


def lease_stream(bucket: str = LEASE_BUCKET) -> str:
    """The JetStream stream behind a KV bucket."""
    return f"KV_{bucket}"


def lease_subject(bucket: str = LEASE_BUCKET, key: str = LEASE_KEY) -> str:
    """The subject a KV key is written on (what ``kv.create`` publishes to)."""
    return f"$KV.{bucket}.{key}"


#: An org's code snapshots (spec/code.md): one JetStream Object Store bucket per org.
CODE_BUCKET_PREFIX = "LS_CODE_"


def code_bucket(org: str) -> str:
    """The Object Store bucket holding ``org``'s code snapshots, one object per digest."""
    return f"{CODE_BUCKET_PREFIX}{org}"


def code_stream(org: str) -> str:
    """The stream behind :func:`code_bucket` (nats-py's ``OBJ_<bucket>``)."""
    return f"OBJ_{code_bucket(org)}"


def code_read_subject(org: str) -> str:
    """The one JetStream API subject a daemon reads its org's snapshots by (a message get:
    an object's meta by subject, then its chunks one by one)."""
    return f"$JS.API.STREAM.MSG.GET.{code_stream(org)}"
