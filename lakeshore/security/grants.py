"""What each kind of connection may do on NATS: the permissions of its user JWT (pure).

NATS matches permissions on whole subject tokens, and a queue's stream name
(``LS_<ns>_<queue>``) is one token of the JetStream API subjects, so a daemon's grant lists
the streams of its namespace one by one; a queue created later is added by disconnecting
the namespace's daemons, which reconnect at once and are granted anew
(:mod:`lakeshore.security.sessions`). Everything not listed is refused by the server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec

from lakeshore.bus import subjects

#: Connection names (``authorized_user`` in the server's connz) are
#: ``<role>/<org>/<ns>/<token-id>/<id>/<grant>``, ``<grant>`` a daemon's :func:`queues_tag`.
NAME_SEPARATOR = "/"
#: The CONNECT user of a daemon (its password: its credential) and of a producer
#: (``producer/<nonce>``; its password: a Lakeshore token).
DAEMON_USER = "daemon"
PRODUCER_USER = "producer"


class Permissions(msgspec.Struct, frozen=True, kw_only=True):
    """Subjects a connection may publish to and subscribe to (NATS wildcards)."""

    publish: list[str]
    subscribe: list[str]

    def claims(self) -> dict[str, object]:
        """The ``nats`` part of a user JWT with these permissions and no other limit."""
        return {
            "pub": {"allow": self.publish},
            "sub": {"allow": self.subscribe},
            "subs": -1,
            "data": -1,
            "payload": -1,
            "type": "user",
            "version": 2,
        }


def inbox_tag(token: str) -> str:
    """The token's part of its producers' inboxes (``_INBOX.p.<tag>.<nonce>``): the gateway
    answers a fast-path request only under the inboxes of the token it carries, so an
    answer cannot be steered to another tenant's subject. A digest, not the token: subjects
    show up in the server's monitoring."""
    return hashlib.sha256(b"lakeshore-inbox\0" + token.encode()).hexdigest()[:16]


def daemon(namespace: str, worker_id: str, queues: Iterable[str], org: str) -> Permissions:
    """A daemon: claim, renew and ack on its namespace's queue streams; events, results,
    register and heartbeat as itself; its namespace's runs' logs (publish only: it reads
    none); reading its org's code snapshots (a message get: it can neither list nor write
    them); its nudges, its control messages, its inbox."""
    publish = [
        subjects.code_read_subject(org),
        subjects.register_subject(namespace, worker_id),
        subjects.heartbeat_subject(namespace, worker_id),
        subjects.held_subject(namespace, worker_id),
        subjects.event_subject(namespace, "*", worker_id),
        subjects.result_put_subject(namespace),
        subjects.log_put_subject(namespace),
    ]
    for queue in sorted(set(queues)):
        stream = subjects.queue_stream(namespace, queue)
        publish += [
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.*",
            f"$JS.API.CONSUMER.INFO.{stream}.*",
            f"$JS.ACK.{stream}.>",
        ]
    subscribe = [
        subjects.daemon_inbox(namespace, worker_id) + ".>",
        subjects.nudge_subject(namespace, "*"),
        subjects.daemon_control_subject(namespace, worker_id),
    ]
    return Permissions(publish=publish, subscribe=subscribe)


def queues_tag(queues: Iterable[str]) -> str:
    """A short digest of the queue set a daemon was granted: named in its connection, so
    that a re-grant cuts only the connections granted before the set changed."""
    joined = "\n".join(sorted(set(queues)))
    return hashlib.sha256(joined.encode()).hexdigest()[:12]


def producer(namespaces: Iterable[str] | None, inbox: str, *, direct: bool = False) -> Permissions:
    """A producer (the SDK's fast path): submit to the queues of its org's namespaces and
    wait for their results (``None``: every namespace, for an admin token), answers on its
    own ``inbox`` (:func:`~lakeshore.bus.subjects.producer_inbox`). With ``direct``, it may
    also publish into those queues' streams itself (JetStream answers on its inbox), wake
    their daemons, and tell the control plane where it stored
    (:func:`~lakeshore.bus.subjects.stored_subject`)."""
    targets = ["*"] if namespaces is None else sorted(set(namespaces))
    publish = [
        subject
        for ns in targets
        for subject in (subjects.submit_subject(ns, "*"), subjects.result_wait_subject(ns, "*"))
    ]
    if direct:
        publish += [
            subject
            for ns in targets
            for subject in (
                subjects.queue_subjects(ns, "*"),
                subjects.nudge_subject(ns, "*"),
                subjects.stored_subject(ns, "*"),
            )
        ]
    return Permissions(publish=publish, subscribe=[inbox + ".>"])
