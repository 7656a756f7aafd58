"""The control plane's NATS front door: register, heartbeat and the SDK's fast path (submit,
and the result wait answered the moment the Recorder accepts an outcome).

Like the HTTP layer it is thin: decode, check, call the service HTTP calls too, encode the
answer (or an ``ErrorBody``). NATS's permissions (see docs/security.md) let a daemon publish
only on subjects that end with its own worker id, so a register or heartbeat is checked to
speak for the daemon its subject names; a fast-path request carries the same bearer token
as HTTP, checked on every request (a revoked token stops at once). An answer larger than
NATS takes is refused with ``too_large`` and the SDK asks over HTTP instead.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from lakeshore.access import Access
from lakeshore.bus import codec, subjects
from lakeshore.bus.nats import NatsBus
from lakeshore.errors import (
    Forbidden,
    Internal,
    Invalid,
    LakeshoreError,
    NamespaceNotFound,
    TooLarge,
)
from lakeshore.model import (
    ErrorBody,
    ErrorDetail,
    FastResult,
    FastSubmit,
    Heartbeat,
    HeldAsk,
    Namespace,
    WorkerRegister,
)
from lakeshore.security import grants
from lakeshore.security.replies import SteeredReplies
from lakeshore.services import FleetService, JobService

log = logging.getLogger(__name__)


#: Who sends a route's requests, which decides the inbox its answer must go to.
DAEMON, PRODUCER = "daemon", "producer"


@dataclass(frozen=True, slots=True)
class Route:
    """One kind of request the gateway answers."""

    #: what it is called in logs and metrics
    name: str
    #: the subjects it is asked on
    wildcard: str
    #: :data:`DAEMON` (its subject names the worker) or :data:`PRODUCER` (its body carries
    #: a token)
    asker: str
    #: what its body decodes to
    body: type


#: Every request the gateway answers (the tenancy probes send each of them).
ROUTES = (
    Route("register", subjects.register_wildcard(), DAEMON, WorkerRegister),
    Route("heartbeat", subjects.heartbeat_wildcard(), DAEMON, Heartbeat),
    Route("held", subjects.held_wildcard(), DAEMON, HeldAsk),
    Route("submit", subjects.submit_wildcard(), PRODUCER, FastSubmit),
    Route("result", subjects.result_wait_wildcard(), PRODUCER, FastResult),
)


class Gateway:
    """Answers the control plane's NATS subjects with the services HTTP also calls.

    Every answer goes only under the asker's own inbox: a daemon's
    (:func:`~lakeshore.bus.subjects.daemon_inbox`, the worker its subject names) or the
    producers' of the token its body carries (:func:`~lakeshore.bus.subjects.producer_inboxes`).
    Anything else is dropped before it is acted on (:mod:`lakeshore.security.replies`).

    Args:
        bus: where it subscribes (the control plane's connection).
        access: who may act on what.
        jobs: the submit workflow.
        fleet: worker registration and heartbeats.
        steered: counts and logs the dropped requests.
    """

    def __init__(
        self,
        bus: NatsBus,
        *,
        access: Access,
        jobs: JobService,
        fleet: FleetService,
        steered: SteeredReplies | None = None,
    ) -> None:
        self._bus, self._access, self._jobs, self._fleet = bus, access, jobs, fleet
        self._steered = steered or SteeredReplies()
        self._subs: list[Any] = []

    async def start(self) -> None:
        # One task per request: a registration (or a heartbeat that changes a daemon's
        # status) waits for its row to be logged and committed, a submit to a full
        # ``block`` queue or a result wait may wait long; a fleet registering at once must
        # not queue behind each other's commits (the registry batches their writes).
        handlers: dict[str, Callable[[str, Any, str], Awaitable[Any]]] = {
            "register": self._register,
            "heartbeat": self._heartbeat,
            "held": self._held,
            "submit": self._submit,
            "result": self._result,
        }
        for route in ROUTES:
            daemons = route.asker == DAEMON
            answer = _answering(route, handlers[route.name], self._steered, self._bus.max_payload)
            self._subs.append(
                await self._bus.respond(
                    route.wildcard,
                    answer,
                    replies_under=subjects.DAEMON_INBOXES if daemons else subjects.PRODUCER_INBOXES,
                    steered=functools.partial(self._drop, route),
                    concurrent=True,
                )
            )

    def _drop(self, route: Route, subject: str, reply: str) -> None:
        who = f"a {route.asker}"
        if route.asker == DAEMON:
            who, _ = asker_inbox(route, subject, None)
        self._steered.drop(route.name, who, subject, reply)

    async def stop(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()
        self._subs.clear()

    async def _register(self, subject: str, reg: WorkerRegister, reply: str) -> Any:
        _, ns, _, worker_id = subject.split(".")
        if (reg.namespace, reg.id) != (ns, worker_id):
            raise Forbidden(f"register on {subject} speaks for {reg.namespace}/{reg.id}")
        if await self._access.namespace(ns) is None:
            raise NamespaceNotFound(ns)
        return await self._fleet.register(reg)

    async def _heartbeat(self, subject: str, hb: Heartbeat, reply: str) -> Any:
        _, ns, _, worker_id = subject.split(".")
        if (hb.namespace, hb.worker_id) != (ns, worker_id):
            raise Forbidden(f"heartbeat on {subject} speaks for {hb.namespace}/{hb.worker_id}")
        return await self._fleet.heartbeat(hb)

    async def _held(self, subject: str, ask: HeldAsk, reply: str) -> Any:
        _, ns, _, _ = subject.split(".")
        if ask.namespace != ns:
            raise Forbidden(f"held on {subject} asks of namespace {ask.namespace}")
        return await self._jobs.holder(ns, ask.invocation_id, ask.epoch)

    async def _submit(self, subject: str, body: FastSubmit, reply: str) -> Any:
        _, ns, _, queue = subject.split(".")
        caller = await self._access.identify(f"Bearer {body.token}")
        await self._access.authorize(caller, ns)
        return await self._jobs.submit(
            ns, queue, body.invocations, actor=caller.token_id, wait_s=body.wait_s
        )

    async def _result(self, subject: str, body: FastResult, reply: str) -> Any:
        _, ns, _, job_id = subject.split(".")
        namespace = await self._caller(body.token, ns)
        # A producer's reply is ``_INBOX.p.<tag>.<nonce>.<id>``: the connection is its nonce.
        connection = ".".join(reply.split(".")[:4])
        return await self._jobs.result(
            ns, job_id, body.wait_s, org=namespace.org, asker=f"connection {connection}"
        )

    async def _caller(self, token: str, ns: str) -> Namespace:
        """``ns``, once the request's token may act on it (as over HTTP)."""
        caller = await self._access.identify(f"Bearer {token}")
        return await self._access.authorize(caller, ns)


def asker_inbox(route: Route, subject: str, body: Any) -> tuple[str, str]:
    """``(who, inbox)``: who asks on ``subject`` with ``body``, and the inbox prefix its
    answer must lie under."""
    if route.asker == DAEMON:
        _, ns, _, worker_id = subject.split(".")
        return f"daemon {ns}/{worker_id}", subjects.daemon_inbox(ns, worker_id)
    tag = grants.inbox_tag(body.token)
    return f"the producers of token digest {tag}", subjects.producer_inboxes(tag)


def _answering(
    route: Route,
    handle: Callable[[str, Any, str], Awaitable[Any]],
    steered: SteeredReplies,
    max_payload: int,
) -> Callable[[str, bytes, str], Awaitable[bytes | None]]:
    async def answer(subject: str, data: bytes, reply: str) -> bytes | None:
        try:
            body = codec.decode(data, route.body)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            err: LakeshoreError = Invalid(f"invalid request on {subject}: {e}")
        except RecursionError:
            err = Invalid(f"invalid request on {subject}: JSON nested too deeply")
        else:
            who, inbox = asker_inbox(route, subject, body)
            if not subjects.under(reply, inbox):
                steered.drop(route.name, who, subject, reply)
                return None
            try:
                encoded = codec.encode(await handle(subject, body, reply))
                if len(encoded) > max_payload:
                    raise TooLarge(
                        f"the answer on {subject} ({len(encoded)} bytes) is larger than NATS "
                        f"takes ({max_payload}); ask over HTTP"
                    )
                return encoded
            except LakeshoreError as e:
                err = e
            except Exception:
                log.exception("unhandled error answering %s", subject)
                err = Internal("internal error; the server log has the details")
        # An undecodable request names no asker: its error goes to an inbox of the route's
        # kind of client (``respond`` checked that much), where only a client that knows the
        # inbox's random part could read it.
        return codec.encode(ErrorBody(ErrorDetail(err.code, err.message)))

    return answer
