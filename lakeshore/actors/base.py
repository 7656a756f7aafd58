"""A small actor runtime: a mailbox per actor, tell, ask with a timeout, and supervision.

An actor handles one message at a time, so the state it owns needs no locks. A
:class:`~lakeshore.errors.LakeshoreError` raised by ``handle`` is the answer to the asker
(a refusal, not a crash). Any other exception is a bug: it is logged with its traceback,
the asker gets :class:`~lakeshore.errors.Internal`, and the actor is restarted — its
``started`` hook rebuilds its state from the store — before it takes the next message.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from lakeshore.errors import Internal, LakeshoreError, Unavailable

log = logging.getLogger(__name__)

M = TypeVar("M")

#: A supervised actor that crashes more often than this in a row is stopped.
MAX_RESTARTS = 10


class Actor(Generic[M]):
    """Subclass and implement :meth:`handle`; override :meth:`started` to load state."""

    name: str = "actor"

    async def started(self) -> None:
        """Called before the first message and after every restart."""

    async def stopped(self) -> None:
        """Called once when the actor stops."""

    async def handle(self, msg: M) -> Any:
        raise NotImplementedError


@dataclass(slots=True)
class _Envelope:
    msg: Any
    reply: asyncio.Future[Any] | None = field(default=None)


class ActorRef(Generic[M]):
    """The only handle other code has on an actor."""

    def __init__(self, actor: Actor[M], ask_timeout_s: float) -> None:
        self.actor_name = actor.name
        self._actor = actor
        self._inbox: asyncio.Queue[_Envelope | None] = asyncio.Queue()
        self._ask_timeout_s = ask_timeout_s
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.restarts = 0

    def tell(self, msg: M) -> None:
        """Send without waiting for an answer."""
        self._inbox.put_nowait(_Envelope(msg))

    async def ask(self, msg: M, timeout_s: float | None = None) -> Any:
        """Send and wait for the answer.

        Raises:
            LakeshoreError: the actor's refusal, as it raised it.
            Unavailable: no answer within ``timeout_s`` (default: the runtime's).
        """
        if self._task is None or self._task.done():
            raise Unavailable(f"{self.actor_name} is not running")
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inbox.put_nowait(_Envelope(msg, reply))
        limit = self._ask_timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(limit):
                return await asyncio.shield(reply)
        except TimeoutError:
            raise Unavailable(
                f"{self.actor_name} did not answer {type(msg).__name__} within {limit:g} s"
            ) from None

    async def _run(self) -> None:
        actor = self._actor
        try:
            await actor.started()
        except BaseException as e:
            self._ready.set_exception(e)
            raise
        self._ready.set_result(None)
        try:
            while (env := await self._inbox.get()) is not None:
                try:
                    result = await actor.handle(env.msg)
                except LakeshoreError as e:
                    _settle(env, error=e)
                except asyncio.CancelledError:
                    _settle(env, error=Unavailable(f"{self.actor_name} is shutting down"))
                    raise
                except Exception:
                    log.exception("%s crashed on %s; restarting", self.actor_name, env.msg)
                    _settle(env, error=Internal(f"{self.actor_name} failed; see the server log"))
                    self.restarts += 1
                    if self.restarts > MAX_RESTARTS:
                        log.error(
                            "%s restarted %d times; stopping it", self.actor_name, self.restarts - 1
                        )
                        return
                    await actor.started()
                else:
                    _settle(env, result=result)
        finally:
            await actor.stopped()


def _settle(env: _Envelope, *, result: Any = None, error: BaseException | None = None) -> None:
    if env.reply is None or env.reply.done():
        if error is not None and env.reply is None and not isinstance(error, LakeshoreError):
            log.error("unanswered failure: %s", error)
        return
    if error is not None:
        env.reply.set_exception(error)
    else:
        env.reply.set_result(result)


class Runtime:
    """Owns every actor task; stopping the runtime stops them all within a bound."""

    def __init__(self, ask_timeout_s: float = 10.0) -> None:
        self._ask_timeout_s = ask_timeout_s
        self._refs: set[ActorRef[Any]] = set()
        self._timers: set[asyncio.Task[None]] = set()

    async def spawn(self, actor: Actor[M]) -> ActorRef[M]:
        """Start an actor; its ``started`` hook has run when this returns."""
        ref = ActorRef(actor, self._ask_timeout_s)
        ref._task = asyncio.create_task(ref._run(), name=actor.name)
        try:
            await ref._ready
        except BaseException:
            await asyncio.gather(ref._task, return_exceptions=True)
            raise
        self._refs.add(ref)
        return ref

    async def stop(self, ref: ActorRef[Any], timeout_s: float = 5.0) -> None:
        """Let the actor finish the messages already queued, then stop it."""
        self._refs.discard(ref)
        if ref._task is None or ref._task.done():
            return
        ref._inbox.put_nowait(None)
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(ref._task)
        except TimeoutError:
            ref._task.cancel()
            await asyncio.gather(ref._task, return_exceptions=True)

    def every(self, interval_s: float, ref: ActorRef[M], msg: M) -> None:
        """Tell ``ref`` ``msg`` every ``interval_s`` until shutdown (ticks do not pile up:
        the next one is sent only after the previous was handled)."""

        async def tick() -> None:
            while True:
                await asyncio.sleep(interval_s)
                try:
                    await ref.ask(msg)
                except LakeshoreError as e:
                    log.warning("%s tick failed: %s", ref.actor_name, e)

        task = asyncio.create_task(tick(), name=f"tick:{ref.actor_name}")
        self._timers.add(task)

    async def shutdown(self, timeout_s: float = 5.0) -> None:
        for task in self._timers:
            task.cancel()
        await asyncio.gather(*self._timers, return_exceptions=True)
        self._timers.clear()
        await asyncio.gather(*(self.stop(r, timeout_s) for r in list(self._refs)))
