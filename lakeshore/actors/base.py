"""A small actor runtime: a mailbox per actor, tell, ask with a timeout, and supervision.

An actor handles one message at a time, so the state it owns needs no locks. A
:class:`~lakeshore.errors.LakeshoreError` raised by ``handle`` is the answer to the asker
(a refusal, not a crash). Any other exception is a bug: it is logged with its traceback,
the asker gets :class:`~lakeshore.errors.Internal`, and the actor is restarted — its
``started`` hook rebuilds its state from the store — before it takes the next message.

Supervision never gives up: an actor that crashes more than :data:`RESTART_BUDGET` times
within :data:`RESTART_WINDOW_S` (or whose ``started`` fails) is *down* for a back-off that
grows up to :data:`BACKOFF_S`'s cap, answering every message meanwhile with
:class:`~lakeshore.errors.Unavailable`, then restarted. :meth:`Runtime.down` names the
actors down now (``/v1/healthz`` reports them); one actor down never stops another.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from lakeshore.errors import Internal, LakeshoreError, Unavailable

log = logging.getLogger(__name__)

M = TypeVar("M")

#: Crashes an actor may have within :data:`RESTART_WINDOW_S` and be restarted at once.
RESTART_BUDGET = 10
RESTART_WINDOW_S = 60.0
#: Back-off of an actor past its budget (seconds): first, growth factor, cap.
BACKOFF_S = (1.0, 2.0, 30.0)


class Actor(Generic[M]):
    """Subclass and implement :meth:`handle`; override :meth:`started` to load state."""

    name: str = "actor"

    async def started(self) -> None:
        """Called before the first message and after every restart."""

    async def stopped(self) -> None:
        """Called once when the actor stops."""

    async def handle(self, msg: M) -> Any:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Later:
    """An answer not ready yet, which ``handle`` may return: the actor takes its next
    message at once, and the asker is answered when ``answer`` completes (with its result,
    or its :class:`~lakeshore.errors.LakeshoreError`). For a write under way whose state
    the actor has already taken in memory: a burst of them goes to the store together."""

    answer: Awaitable[Any]


@dataclass(frozen=True, slots=True)
class _Crashed:
    """Put in the inbox when a :class:`Later` answer failed with a bug."""

    error: BaseException


@dataclass(slots=True)
class _Envelope:
    msg: Any
    reply: asyncio.Future[Any] | None = field(default=None)


class ActorRef(Generic[M]):
    """The only handle other code has on an actor."""

    def __init__(
        self,
        actor: Actor[M],
        ask_timeout_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff_s: tuple[float, float, float] = BACKOFF_S,
    ) -> None:
        self.actor_name = actor.name
        self._actor = actor
        self._inbox: asyncio.Queue[_Envelope | None] = asyncio.Queue()
        self._ask_timeout_s = ask_timeout_s
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._clock, self._backoff_s = clock, backoff_s
        #: crashes within the restart window (monotonic times)
        self._crashes: deque[float] = deque()
        #: why the actor is down now (``None``: up)
        self.down: str | None = None
        #: restarts since it was spawned (each crash, and each retry after a back-off)
        self.restarts = 0
        #: answers still to come (:class:`Later`)
        self._later: set[asyncio.Future[None]] = set()
        #: the runtime is stopping it: asks are refused
        self._stopping = False

    def tell(self, msg: M) -> None:
        """Send without waiting for an answer."""
        self._inbox.put_nowait(_Envelope(msg))

    async def ask(self, msg: M, timeout_s: float | None = None) -> Any:
        """Send and wait for the answer.

        Raises:
            LakeshoreError: the actor's refusal, as it raised it.
            Unavailable: no answer within ``timeout_s`` (default: the runtime's), or the
                actor is down (restarting after repeated failures) or stopped.
        """
        if self._task is None or self._task.done() or self._stopping:
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
                if isinstance(env.msg, _Crashed):
                    if not await self._restart():
                        return
                    continue
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
                    if not await self._restart():
                        return
                else:
                    if isinstance(result, Later):
                        later = asyncio.ensure_future(self._answer_later(env, result.answer))
                        self._later.add(later)
                        later.add_done_callback(self._later.discard)
                    else:
                        _settle(env, result=result)
        finally:
            try:
                await actor.stopped()
            finally:
                self._refuse_queued()

    def _refuse_queued(self) -> None:
        """Answer the asks still queued when the actor ends (it handles no more): at once,
        not at their ask timeout."""
        while not self._inbox.empty():
            env = self._inbox.get_nowait()
            if env is not None:
                _settle(env, error=Unavailable(f"{self.actor_name} stopped"))

    async def _answer_later(self, env: _Envelope, answer: Awaitable[Any]) -> None:
        try:
            result = await answer
        except LakeshoreError as e:
            _settle(env, error=e)
        except Exception as e:
            # A bug, as if ``handle`` had raised it: the actor restarts (before its next
            # message, once those already queued are handled).
            log.exception("%s failed answering %s later; restarting", self.actor_name, env.msg)
            self._inbox.put_nowait(_Envelope(_Crashed(e)))
            _settle(env, error=Internal(f"{self.actor_name} failed; see the server log"))
        else:
            _settle(env, result=result)

    async def _restart(self) -> bool:
        """Rebuild the actor after a crash, backing off while it keeps failing.

        Returns:
            ``False`` when the runtime stopped the actor meanwhile.
        """
        delay, growth, cap = self._backoff_s
        while True:
            at = self._clock()
            self._crashes.append(at)
            while self._crashes and self._crashes[0] < at - RESTART_WINDOW_S:
                self._crashes.popleft()
            if len(self._crashes) > RESTART_BUDGET:
                self.down = (
                    f"{len(self._crashes)} failures in the last {RESTART_WINDOW_S:g} s; "
                    f"restarting in {delay:g} s"
                )
                log.error("%s is down: %s", self.actor_name, self.down)
                if not await self._refuse_for(delay):
                    return False
                delay = min(delay * growth, cap)
            self.restarts += 1
            try:
                await self._actor.started()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed to restart", self.actor_name)
                continue
            if self.down is not None:
                log.info("%s is back", self.actor_name)
            self.down = None
            return True

    async def _refuse_for(self, seconds: float) -> bool:
        """Answer every ask with Unavailable for ``seconds``; ``False`` on stop.

        A tell has no one to answer: it is kept and handled once the actor is back (a
        daemon's exit reported meanwhile must not be lost).
        """
        deadline = self._clock() + seconds
        held: list[_Envelope] = []
        try:
            while (left := deadline - self._clock()) > 0:
                try:
                    env = await asyncio.wait_for(self._inbox.get(), left)
                except TimeoutError:
                    break
                if env is None:
                    return False
                if env.reply is None:
                    held.append(env)
                else:
                    _settle(env, error=Unavailable(f"{self.actor_name} is down: {self.down}"))
            return True
        finally:
            for env in held:
                self._inbox.put_nowait(env)


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

    def __init__(
        self, ask_timeout_s: float = 10.0, *, backoff_s: tuple[float, float, float] = BACKOFF_S
    ) -> None:
        self._ask_timeout_s, self._backoff_s = ask_timeout_s, backoff_s
        self._refs: set[ActorRef[Any]] = set()
        self._timers: set[asyncio.Task[None]] = set()

    async def spawn(self, actor: Actor[M]) -> ActorRef[M]:
        """Start an actor; its ``started`` hook has run when this returns."""
        ref = ActorRef(actor, self._ask_timeout_s, backoff_s=self._backoff_s)
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
        # The messages queued before are handled; an ask from now on is refused at once
        # (one queued behind the end would wait out its timeout).
        ref._stopping = True
        ref._inbox.put_nowait(None)
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(ref._task)
        except TimeoutError:
            ref._task.cancel()
            await asyncio.gather(ref._task, return_exceptions=True)

    def down(self) -> dict[str, str]:
        """The actors down now (restarting after repeated failures, or ended), with why."""
        out: dict[str, str] = {}
        for ref in self._refs:
            if ref._task is not None and ref._task.done():
                out[ref.actor_name] = "stopped"
            elif ref.down is not None:
                out[ref.actor_name] = ref.down
        return out

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
