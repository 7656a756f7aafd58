"""The actor runtime: ask and tell, supervision (refusal vs crash, restart, stop), timers.

Small actors defined here stand in for the control plane's: their ``started`` hook
rebuilds their state from a dict that plays the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from polling import eventually

from lakeshore.actors import base
from lakeshore.actors.base import Actor, Runtime
from lakeshore.errors import Internal, Invalid, Unavailable

from .support import WAIT_S, settle


@dataclass(frozen=True)
class Add:
    n: int


@dataclass(frozen=True)
class Get:
    pass


@dataclass(frozen=True)
class Crash:
    pass


@dataclass(frozen=True)
class Refuse:
    pass


@dataclass(frozen=True)
class Hold:
    gate: asyncio.Event


class Counter(Actor[Any]):
    """Keeps a total in memory, written through to ``stored``; ``started`` reloads it."""

    name = "counter"

    def __init__(self, stored: dict[str, int]) -> None:
        self.stored = stored
        self.total = -1
        self.starts = 0
        self.handled: list[Any] = []
        self.stops: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._changed = asyncio.Condition()

    async def started(self) -> None:
        self.starts += 1
        self.total = self.stored.get("total", 0)

    async def stopped(self) -> None:
        self.stops.set_result(None)

    async def handled_count(self, count: int) -> None:
        """Return once ``count`` messages have been handed to ``handle``."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.handled) >= count)

    async def handle(self, msg: Any) -> Any:
        self.handled.append(msg)
        async with self._changed:
            self._changed.notify_all()
        match msg:
            case Add(n=n):
                self.total += n
                self.stored["total"] = self.total
                return self.total
            case Get():
                return self.total
            case Crash():
                self.total = 999  # memory the crash leaves wrong: the restart must fix it
                raise RuntimeError("a bug")
            case Refuse():
                raise Invalid("no, and here is why")
            case Hold(gate=gate):
                await gate.wait()
                return "held"


class Fragile(Counter):
    """A counter whose ``started`` fails ``failures`` times after the first start."""

    name = "fragile"

    def __init__(self, stored: dict[str, int], failures: int) -> None:
        super().__init__(stored)
        self.failures = failures

    async def started(self) -> None:
        await super().started()
        if 1 < self.starts <= 1 + self.failures:
            raise RuntimeError("the store is not back yet")


@pytest.fixture
async def fast_backoff() -> AsyncIterator[Runtime]:
    """A runtime whose actors past their restart budget are down for 0.3 s at a time."""
    rt = Runtime(ask_timeout_s=WAIT_S, backoff_s=(0.3, 1.0, 0.3))
    try:
        yield rt
    finally:
        await rt.shutdown()


async def test_ask_answers_and_tell_is_handled_in_order(runtime: Runtime) -> None:
    counter = Counter({})
    ref = await runtime.spawn(counter)
    assert counter.starts == 1  # started has run when spawn returns
    ref.tell(Add(2))
    ref.tell(Add(3))
    assert await ref.ask(Get()) == 5
    assert counter.handled == [Add(2), Add(3), Get()]


async def test_a_refusal_is_the_askers_error_and_not_a_crash(runtime: Runtime) -> None:
    counter = Counter({})
    ref = await runtime.spawn(counter)
    await ref.ask(Add(1))
    with pytest.raises(Invalid, match="no, and here is why"):
        await ref.ask(Refuse())
    assert (ref.restarts, counter.starts) == (0, 1)
    assert await ref.ask(Get()) == 1


async def test_a_crash_answers_internal_and_restart_rebuilds_state_before_the_next_message(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    stored = {"total": 7}
    counter = Counter(stored)
    ref = await runtime.spawn(counter)
    await ref.ask(Add(1))
    with caplog.at_level(logging.ERROR, logger=base.__name__):
        with pytest.raises(Internal, match="counter failed; see the server log"):
            await ref.ask(Crash())
    assert "counter crashed on Crash()" in caplog.text
    assert "RuntimeError: a bug" in caplog.text  # the traceback goes to the log
    assert (ref.restarts, counter.starts) == (1, 2)
    # the 999 the crash left in memory is gone: started() reloaded the stored total
    assert await ref.ask(Get()) == 8
    assert await ref.ask(Add(2)) == 10


async def test_messages_queued_behind_a_crash_are_answered_after_the_restart(
    runtime: Runtime,
) -> None:
    counter = Counter({"total": 1})
    ref = await runtime.spawn(counter)
    crash = asyncio.ensure_future(ref.ask(Crash()))
    after = asyncio.ensure_future(ref.ask(Get()))  # in the inbox before the crash happens
    with pytest.raises(Internal):
        await settle(crash)
    assert await settle(after) == 1


async def test_a_crash_on_a_tell_restarts_the_actor_too(runtime: Runtime) -> None:
    counter = Counter({"total": 3})
    ref = await runtime.spawn(counter)
    ref.tell(Crash())
    assert await ref.ask(Get()) == 3
    assert ref.restarts == 1


async def test_a_refused_message_does_not_count_towards_the_restart_budget(
    runtime: Runtime,
) -> None:
    ref = await runtime.spawn(Counter({}))
    for _ in range(base.RESTART_BUDGET + 5):
        with pytest.raises(Invalid):
            await ref.ask(Refuse())
    assert (ref.restarts, ref.down) == (0, None)
    assert await ref.ask(Get()) == 0


async def test_an_actor_crashing_past_its_budget_is_down_for_a_while_then_back(
    fast_backoff: Runtime,
) -> None:
    counter = Counter({"total": 5})
    ref = await fast_backoff.spawn(counter)
    for _ in range(base.RESTART_BUDGET):
        with pytest.raises(Internal):
            await ref.ask(Crash())
    assert await ref.ask(Get()) == 5  # within the budget: restarted at once
    with pytest.raises(Internal):
        await ref.ask(Crash())  # one too many within the window
    down = f"{base.RESTART_BUDGET + 1} failures in the last 60 s; restarting in 0.3 s"
    with pytest.raises(Unavailable, match=f"counter is down: {down}"):
        await ref.ask(Get())
    assert fast_backoff.down() == {"counter": down}
    back = await eventually(
        lambda: ref.ask(Get()), until=lambda total: total == 5, retry_on=(Unavailable,),
        timeout_s=WAIT_S, what="the counter to be restarted after its back-off",
    )  # fmt: skip
    assert back == 5
    assert fast_backoff.down() == {}
    assert counter.starts == base.RESTART_BUDGET + 2
    assert counter.stops.done() is False  # never stopped: supervision does not give up


async def test_a_tell_to_an_actor_that_is_down_is_handled_once_it_is_back(
    fast_backoff: Runtime,
) -> None:
    counter = Counter({})
    ref = await fast_backoff.spawn(counter)
    for _ in range(base.RESTART_BUDGET + 1):
        with pytest.raises(Internal):
            await ref.ask(Crash())
    assert fast_backoff.down()
    ref.tell(Add(3))  # e.g. a daemon's exit, reported while the registry is down
    total = await eventually(
        lambda: ref.ask(Get()), until=lambda t: t == 3, retry_on=(Unavailable,),
        timeout_s=WAIT_S, what="the told Add to be handled after the back-off",
    )  # fmt: skip
    assert total == 3


async def test_a_restart_whose_started_fails_is_tried_again(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    counter = Fragile({"total": 2}, failures=2)
    ref = await runtime.spawn(counter)
    with caplog.at_level(logging.ERROR, logger=base.__name__):
        with pytest.raises(Internal):
            await ref.ask(Crash())
        assert await ref.ask(Get()) == 2  # answered once a restart succeeded
    assert caplog.text.count("fragile failed to restart") == 2
    assert (ref.restarts, counter.starts, ref.down) == (3, 4, None)


async def test_an_actor_that_cannot_restart_is_down_and_can_still_be_stopped(
    fast_backoff: Runtime,
) -> None:
    counter = Fragile({}, failures=1_000)
    ref = await fast_backoff.spawn(counter)
    with pytest.raises(Internal):
        await ref.ask(Crash())
    with pytest.raises(Unavailable, match=r"fragile is down: \d+ failures in the last 60 s"):
        await ref.ask(Get())
    assert list(fast_backoff.down()) == ["fragile"]
    await fast_backoff.stop(ref)
    assert counter.stops.done()
    with pytest.raises(Unavailable, match="fragile is not running"):
        await ref.ask(Get())


async def test_one_actor_down_does_not_stop_another(fast_backoff: Runtime) -> None:
    broken, fine = Fragile({}, failures=1_000), Counter({})
    broken_ref, fine_ref = await fast_backoff.spawn(broken), await fast_backoff.spawn(fine)
    with pytest.raises(Internal):
        await broken_ref.ask(Crash())
    assert await fine_ref.ask(Add(1)) == 1
    assert list(fast_backoff.down()) == ["fragile"]
    assert fine_ref.down is None


async def test_an_ask_without_answer_in_time_is_unavailable(runtime: Runtime) -> None:
    counter = Counter({})
    ref = await runtime.spawn(counter)
    gate = asyncio.Event()
    held = asyncio.ensure_future(ref.ask(Hold(gate)))
    await settle(counter.handled_count(1))
    with pytest.raises(Unavailable, match=r"counter did not answer Get within 0\.05 s"):
        await ref.ask(Get(), timeout_s=0.05)
    gate.set()
    assert await settle(held) == "held"


async def test_a_failing_started_fails_spawn(runtime: Runtime) -> None:
    class Broken(Actor[Any]):
        name = "broken"

        async def started(self) -> None:
            raise Unavailable("the store is closed")

    with pytest.raises(Unavailable, match="the store is closed"):
        await runtime.spawn(Broken())


async def test_stop_lets_queued_messages_finish_then_refuses_asks(runtime: Runtime) -> None:
    counter = Counter({})
    ref = await runtime.spawn(counter)
    ref.tell(Add(1))
    ref.tell(Add(2))
    await runtime.stop(ref)
    assert counter.total == 3
    assert counter.stops.done()
    with pytest.raises(Unavailable, match="is not running"):
        await ref.ask(Get())
    await runtime.stop(ref)  # stopping again is a no-op


async def test_stop_cancels_a_message_that_does_not_finish_in_time(runtime: Runtime) -> None:
    counter = Counter({})
    ref = await runtime.spawn(counter)
    held = asyncio.ensure_future(ref.ask(Hold(asyncio.Event())))
    await settle(counter.handled_count(1))
    await runtime.stop(ref, timeout_s=0.05)
    with pytest.raises(Unavailable, match="counter is shutting down"):
        await settle(held)
    assert counter.stops.done()


async def test_an_ask_made_while_the_actor_stops_is_refused_at_once(runtime: Runtime) -> None:
    # A stopping actor finishes what was queued before the stop; an ask made meanwhile
    # is answered Unavailable at once, not left behind the end until its ask timeout.
    counter = Counter({})
    ref = await runtime.spawn(counter)
    gate = asyncio.Event()
    held = asyncio.ensure_future(ref.ask(Hold(gate)))
    await settle(counter.handled_count(1))
    stopping = asyncio.ensure_future(runtime.stop(ref, timeout_s=WAIT_S))
    await asyncio.sleep(0)  # the stop is under way: the actor still handles Hold
    assert not stopping.done()
    with pytest.raises(Unavailable, match="is not running"):
        await asyncio.wait_for(ref.ask(Get()), timeout=1.0)
    gate.set()
    assert await settle(held) == "held"
    await settle(stopping)


async def test_shutdown_stops_every_actor_and_timer() -> None:
    rt = Runtime(ask_timeout_s=WAIT_S)
    a, b = Counter({}), Counter({})
    ra, rb = await rt.spawn(a), await rt.spawn(b)
    rt.every(0.01, ra, Add(1))
    await rt.shutdown()
    assert a.stops.done() and b.stops.done()
    for ref in (ra, rb):
        with pytest.raises(Unavailable, match="is not running"):
            await ref.ask(Get())


async def test_every_sends_its_message_again_and_again(runtime: Runtime) -> None:
    counter = Counter({})
    ref = await runtime.spawn(counter)
    runtime.every(0.01, ref, Add(1))
    await settle(counter.handled_count(3))
    assert await ref.ask(Get()) >= 3


async def test_every_does_not_pile_up_ticks_behind_a_slow_handler(runtime: Runtime) -> None:
    gate = asyncio.Event()
    slow, clock = Counter({}), Counter({})
    slow_ref, clock_ref = await runtime.spawn(slow), await runtime.spawn(clock)
    runtime.every(0.01, slow_ref, Hold(gate))
    runtime.every(0.01, clock_ref, Add(1))
    await settle(slow.handled_count(1))
    # The clock ticks on the same period: while it ticks 10 more times, the slow actor's
    # first tick still runs and no second one has been sent.
    await settle(clock.handled_count(len(clock.handled) + 10))
    assert slow.handled == [Hold(gate)]
    gate.set()
    await settle(slow.handled_count(3))  # it ticks again once the slow tick was answered


async def test_a_refused_tick_is_logged_and_the_timer_keeps_going(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    counter = Counter({})
    ref = await runtime.spawn(counter)
    with caplog.at_level(logging.WARNING, logger=base.__name__):
        runtime.every(0.01, ref, Refuse())
        await settle(counter.handled_count(3))
    assert "counter tick failed: no, and here is why" in caplog.text
    assert ref.restarts == 0


async def test_a_crashing_tick_restarts_the_actor_and_the_timer_keeps_going(
    runtime: Runtime,
) -> None:
    counter = Counter({})
    ref = await runtime.spawn(counter)
    runtime.every(0.01, ref, Crash())
    await settle(counter.handled_count(2))
    assert ref.restarts >= 1
