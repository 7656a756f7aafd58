"""The control plane's NATS front door: register, heartbeat and the SDK's submit fast path.

Like the HTTP layer it is thin: decode, check, ask the owning actor, encode the answer (or
an ``ErrorBody``). Daemons are trusted by being on the NATS network; a fast-path submit
carries the same bearer token as HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from lakeshore.actors.directory import Lookup
from lakeshore.actors.queue import Submit
from lakeshore.actors.workers import Beat, Register
from lakeshore.bus import codec, subjects
from lakeshore.errors import Internal, Invalid, LakeshoreError, NamespaceNotFound
from lakeshore.model import ErrorBody, ErrorDetail, FastSubmit, Heartbeat, WorkerRegister

if TYPE_CHECKING:
    from lakeshore.plane import ControlPlane

log = logging.getLogger(__name__)


class Gateway:
    def __init__(self, plane: ControlPlane) -> None:
        self._plane = plane
        self._subs: list[Any] = []

    async def start(self) -> None:
        bus = self._plane.bus
        for subject, handler in (
            (subjects.register_wildcard(), self._register),
            (subjects.heartbeat_wildcard(), self._heartbeat),
            (subjects.submit_wildcard(), self._submit),
        ):
            self._subs.append(await bus.respond(subject, _answering(handler)))

    async def stop(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()
        self._subs.clear()

    async def _register(self, subject: str, data: bytes) -> Any:
        ns = subject.split(".")[1]
        reg = codec.decode(data, WorkerRegister)
        if reg.namespace != ns:
            raise Invalid(f"register on {subject} names namespace {reg.namespace!r}")
        if await self._plane.access.namespace(ns) is None:
            raise NamespaceNotFound(ns)
        return await self._plane.workers.ask(Register(reg))

    async def _heartbeat(self, subject: str, data: bytes) -> Any:
        return await self._plane.workers.ask(Beat(codec.decode(data, Heartbeat)))

    async def _submit(self, subject: str, data: bytes) -> Any:
        _, ns, _, queue = subject.split(".")
        body = codec.decode(data, FastSubmit)
        plane = self._plane
        caller = await plane.access.identify(f"Bearer {body.token}")
        await plane.access.authorize(caller, ns)
        ref = await plane.directory.ask(Lookup(ns, queue))
        return await ref.ask(
            Submit(body.invocations, caller.token_id, body.wait_s),
            timeout_s=body.wait_s + plane.settings.ask_timeout_s,
        )


def _answering(
    handler: Callable[[str, bytes], Awaitable[Any]],
) -> Callable[[str, bytes], Awaitable[bytes]]:
    async def answer(subject: str, data: bytes) -> bytes:
        try:
            return codec.encode(await handler(subject, data))
        except LakeshoreError as e:
            err: LakeshoreError = e
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            err = Invalid(f"invalid request on {subject}: {e}")
        except Exception:
            log.exception("unhandled error answering %s", subject)
            err = Internal("internal error; the server log has the details")
        return codec.encode(ErrorBody(ErrorDetail(err.code, err.message)))

    return answer
