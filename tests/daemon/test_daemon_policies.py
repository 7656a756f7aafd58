"""The policies and the command line, without NATS."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from lakeshore.cli.daemon_run import run
from lakeshore.daemon.policies import backoff_s, persist, should_retry
from lakeshore.daemon.runner import Capture
from lakeshore.daemon.worker_main import resolve
from lakeshore.errors import TooLarge, Unavailable


def test_backoff_doubles_from_one_second_and_is_capped_at_a_minute():
    assert [backoff_s(e) for e in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff_s(10_000) == 60


@pytest.mark.parametrize(
    ("epoch", "max_attempts", "retry"), [(1, 1, False), (1, 3, True), (2, 3, True), (3, 3, False)]
)
def test_an_attempt_is_retried_while_attempts_are_left(epoch, max_attempts, retry):
    assert should_retry(epoch, max_attempts) is retry


def test_capture_keeps_the_last_bytes_and_survives_a_cut_character():
    capture = Capture(limit=2)
    capture.feed(b"ab")
    capture.feed("é!".encode())
    assert capture.text() == "\ufffd!"  # the cut left half of the 2-byte 'é'
    capture.feed(b"xyz")
    assert capture.text() == "yz"
    assert capture.stderr_text() == ""


def test_capture_keeps_a_tail_of_stderr_apart_from_stdout():
    capture = Capture(limit=3)
    capture.feed(b"out")
    capture.feed_stderr(b"err-1")
    capture.feed_stderr(b"2")
    assert (capture.text(), capture.stderr_text()) == ("out", "-12")


def test_fn_references_are_module_colon_qualname():
    assert resolve("os.path:join.__name__") == "join"
    with pytest.raises(ValueError, match="module:qualname"):
        resolve("os.path.join")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--label", "nokey"], "KEY=VALUE"),
        (["--queue", "Bad_Name"], "invalid queue name"),
        ([], "a daemon joins with a token"),
    ],
)
def test_run_rejects_bad_flags_with_usage_errors(args, message):
    env = {"LAKESHORE_NATS_URL": "", "LAKESHORE_TOKEN": "", "LAKESHORE_NATS_CREDENTIAL": ""}
    result = CliRunner().invoke(run, args, env=env)
    assert result.exit_code == 2 and message in result.output


async def test_persist_tries_again_while_the_bus_is_unavailable():
    tries: list[int] = []

    async def step() -> str:
        tries.append(len(tries))
        if len(tries) < 3:
            raise Unavailable("reconnecting")
        return "stored"

    assert await persist(step, within_s=30.0, what="put") == "stored"
    assert len(tries) == 3


async def test_persist_gives_up_after_its_bound_and_lets_other_errors_through():
    async def down() -> None:
        raise Unavailable("still down")

    with pytest.raises(Unavailable, match="still down"):
        await persist(down, within_s=0.0, what="put")
    with pytest.raises(Unavailable, match="still down"):  # a drain out of time
        await persist(down, within_s=30.0, what="put", give_up=lambda: True)

    tries = 0

    async def too_large() -> None:
        nonlocal tries
        tries += 1
        raise TooLarge("over max_payload")

    with pytest.raises(TooLarge):
        await persist(too_large, within_s=30.0, what="put")
    assert tries == 1
