"""What the pinned nats-server does for a completion fenced in the log (issue 26, Option C
of ``notes/hot-path-design.md``; measured in ``bench/fenced_ledger.py``, whose ledger this
is): the facts the design stands on, held by the server the project ships, before any of it
is built.

Per invocation, a ledger stream holds ``claim.<id>`` and ``result.<id>``. A claim is
stored only while no result exists; a completion only while its claim is the newest; a
retried completion is stored once; a stored result is republished on a core subject, a
refused one is not.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.js.errors import APIError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from fenced_ledger import WRONG_LAST_SEQUENCE, Ledger, claim, complete  # noqa: E402


@pytest.fixture
async def ledger(js) -> AsyncIterator[Ledger]:
    token = uuid.uuid4().hex[:8]
    made = Ledger(f"LSLT_{token}", f"lslt{token}")
    await made.add(js)
    try:
        yield made
    finally:
        await js.delete_stream(made.name)


async def test_only_the_newest_claims_completion_is_stored_and_only_once(js, ledger) -> None:
    first = await claim(js, ledger, "a")
    second = await claim(js, ledger, "a")  # a takeover: the first holder is stale now
    with pytest.raises(APIError) as stale:
        await complete(js, ledger, "a", first, b"stale")
    assert stale.value.err_code == WRONG_LAST_SEQUENCE
    stored = await complete(js, ledger, "a", second, b"ok")
    # The same holder's retry (its ack was lost): acknowledged, not stored again.
    assert await complete(js, ledger, "a", second, b"ok") == stored
    held = (await js.stream_info(ledger.name)).state.messages
    assert held == 3  # two claims, one result
    with pytest.raises(APIError) as late:
        await claim(js, ledger, "a")  # a redelivery after the result: nothing to run
    assert late.value.err_code == WRONG_LAST_SEQUENCE
    last = await js.get_last_msg(ledger.name, ledger.result("a"))
    assert last.data == b"ok" and last.seq == stored


async def test_a_stored_result_is_pushed_and_a_refused_one_is_not(js, ledger) -> None:
    heard: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()

    async def on(msg) -> None:
        await heard.put((msg.subject, msg.data))

    sub = await js._nc.subscribe(ledger.done(">"), cb=on)  # noqa: SLF001
    try:
        old = await claim(js, ledger, "b")
        new = await claim(js, ledger, "b")
        with pytest.raises(APIError):
            await complete(js, ledger, "b", old, b"stale")
        await complete(js, ledger, "b", new, b"ok")
        subject, data = await asyncio.wait_for(heard.get(), 10)
        assert (subject, data) == (ledger.done("b"), b"ok")  # not the refused one first
        assert heard.empty()
    finally:
        await sub.unsubscribe()
