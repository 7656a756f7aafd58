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

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from lakeshore.access import Access, Caller
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
    WorkerRegister,
)
from lakeshore.services import FleetService, JobService

log = logging.getLogger(__name__)


class Gateway:
    """Answers the control plane's NATS subjects with the services HTTP also calls.

    Args:
        bus: where it subscribes (the control plane's connection).
        access: who may act on what.
        jobs: the submit workflow.
        fleet: worker registration and heartbeats.
    """

    def __init__(
        self, bus: NatsBus, *, access: Access, jobs: JobService, fleet: FleetService
    ) -> None:
        self._bus, self._access, self._jobs, self._fleet = bus, access, jobs, fleet
        self._subs: list[Any] = []

    async def start(self) -> None:
        # One task per request: a registration (or a heartbeat that changes a daemon's
        # status) waits for its row to be logged and committed, a submit to a full
        # ``block`` queue or a result wait may wait long; a fleet registering at once must
        # not queue behind each other's commits (the registry batches their writes).
        for subject, handler in (
            (subjects.register_wildcard(), self._register),
            (subjects.heartbeat_wildcard(), self._heartbeat),
            (subjects.submit_wildcard(), self._submit),
            (subjects.result_wait_wildcard(), self._result),
        ):
            answer = _answering(handler, self._bus.max_payload)
            self._subs.append(await self._bus.respond(subject, answer, concurrent=True))

    async def stop(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()
        self._subs.clear()

    async def _register(self, subject: str, data: bytes) -> Any:
        _, ns, _, worker_id = subject.split(".")
        reg = codec.decode(data, WorkerRegister)
        if (reg.namespace, reg.id) != (ns, worker_id):
            raise Forbidden(f"register on {subject} speaks for {reg.namespace}/{reg.id}")
        if await self._access.namespace(ns) is None:
            raise NamespaceNotFound(ns)
        return await self._fleet.register(reg)

    async def _heartbeat(self, subject: str, data: bytes) -> Any:
        _, ns, _, worker_id = subject.split(".")
        hb = codec.decode(data, Heartbeat)
        if (hb.namespace, hb.worker_id) != (ns, worker_id):
            raise Forbidden(f"heartbeat on {subject} speaks for {hb.namespace}/{hb.worker_id}")
        return await self._fleet.heartbeat(hb)

    async def _submit(self, subject: str, data: bytes) -> Any:
        _, ns, _, queue = subject.split(".")
        body = codec.decode(data, FastSubmit)
        caller = await self._caller(body.token, ns)
        return await self._jobs.submit(
            ns, queue, body.invocations, actor=caller.token_id, wait_s=body.wait_s
        )

    async def _result(self, subject: str, data: bytes) -> Any:
        _, ns, _, job_id = subject.split(".")
        body = codec.decode(data, FastResult)
        await self._caller(body.token, ns)
        return await self._jobs.result(ns, job_id, body.wait_s)

    async def _caller(self, token: str, ns: str) -> Caller:
        """Who the request's token is, once allowed to act on ``ns`` (as over HTTP)."""
        caller = await self._access.identify(f"Bearer {token}")
        await self._access.authorize(caller, ns)
        return caller


def _answering(
    handler: Callable[[str, bytes], Awaitable[Any]], max_payload: int
) -> Callable[[str, bytes], Awaitable[bytes]]:
    async def answer(subject: str, data: bytes) -> bytes:
        try:
            encoded = codec.encode(await handler(subject, data))
            if len(encoded) > max_payload:
                raise TooLarge(
                    f"the answer on {subject} ({len(encoded)} bytes) is larger than NATS takes "
                    f"({max_payload}); ask over HTTP"
                )
            return encoded
        except LakeshoreError as e:
            err: LakeshoreError = e
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            err = Invalid(f"invalid request on {subject}: {e}")
        except RecursionError:
            err = Invalid(f"invalid request on {subject}: JSON nested too deeply")
        except Exception:
            log.exception("unhandled error answering %s", subject)
            err = Internal("internal error; the server log has the details")
        return codec.encode(ErrorBody(ErrorDetail(err.code, err.message)))

    return answer
