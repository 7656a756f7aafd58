"""The progress line of long waits: redrawn in place on a terminal, plain lines otherwise."""

from __future__ import annotations

import asyncio

import pytest
from clirunner import cli_for

from lakeshore.actors.recorder import WaitRecorded
from lakeshore.bus import subjects
from lakeshore.cli.exits import API_ERROR
from lakeshore.cli.progress import BAR_WIDTH, Progress


def test_plain_lines_name_what_is_done_and_skip_repeats(capsys: pytest.CaptureFixture[str]):
    with Progress(tty=False) as progress:
        progress.count("registered", [], 3)
        progress.count("registered", [], 3)
        progress.count("registered", ["prep-00", "prep-01"], 3)
        progress.count("registered", ["prep-00", "prep-01", "prep-02"], 3)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "0/3 registered",
        "2/3 registered (prep-00, prep-01)",
        "3/3 registered (prep-00, prep-01, prep-02)",
    ]
    assert "\r" not in err and "\x1b" not in err


def test_a_terminal_redraws_one_line_with_a_bar(capsys: pytest.CaptureFixture[str]):
    with Progress(tty=True) as progress:
        progress.count("registered", ["a"], 4)
        progress.count("registered", ["a", "b"], 4)
    err = capsys.readouterr().err
    half = "#" * (BAR_WIDTH // 2) + " " * (BAR_WIDTH // 2)
    assert err == (
        f"\r[{'#' * (BAR_WIDTH // 4)}{' ' * (BAR_WIDTH - BAR_WIDTH // 4)}] 1/4 registered (a)"
        f"\x1b[K\r[{half}] 2/4 registered (a, b)\x1b[K\n"
    )


def test_a_status_without_a_count_has_no_bar(capsys: pytest.CaptureFixture[str]):
    with Progress(tty=True) as progress:
        progress.show("daemon solo: retiring")
    assert capsys.readouterr().err == "\rdaemon solo: retiring\x1b[K\n"


def test_an_error_ends_the_redrawn_line_before_it_is_reported(capsys):
    with pytest.raises(RuntimeError), Progress(tty=True) as progress:
        progress.count("registered", [], 2)
        raise RuntimeError("lost")
    assert capsys.readouterr().err.endswith("0/2 registered\x1b[K\n")


def test_nothing_shown_leaves_nothing_to_end(capsys: pytest.CaptureFixture[str]):
    with Progress(tty=True):
        pass
    assert capsys.readouterr().err == ""


async def test_jobs_result_wait_shows_the_state_it_waits_in(control_plane, js, isolated):
    cli = cli_for(control_plane)
    await cli("queues", "add", "cpu-prep")
    job_id = (await cli("submit", "--queue", "cpu-prep", "--", "echo", "hi")).stdout.strip()
    last = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    async with asyncio.timeout(10):
        await (await control_plane.plane.parts.recorder.ask(WaitRecorded(last)))
    result = await cli("jobs", "result", job_id, "--wait", "0.3", expect=API_ERROR)
    waiting, error = result.stderr.splitlines()
    assert waiting.startswith(f"{job_id}: pending, attempt ")
    assert error.startswith(f"error: invocation {job_id} has not finished: it is pending")
    assert result.stdout == ""
