"""``--watch [S]``: repeated snapshots against the real control plane.

The pause between two snapshots is replaced (``watch.pause``), so no test waits on the
clock: it changes the data in between, ends the watch with Ctrl-C, or does nothing.
"""

from __future__ import annotations

import json
import re

import pytest

from lakeshore.cli import watch
from lakeshore.cli.exits import API_ERROR, OK, USAGE
from lakeshore.model import QueueCreate
from lakeshore.sdk import Client


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The intervals the watch paused for; each pause returns at once."""
    seen: list[float] = []

    async def pause(interval_s: float) -> None:
        seen.append(interval_s)

    monkeypatch.setattr(watch, "pause", pause)
    return seen


def names(snapshot: str) -> list[str]:
    return [line.split()[1] for line in snapshot.strip().splitlines()[1:]]


async def test_each_snapshot_shows_the_data_as_it_is_then(cli, control_plane, monkeypatch):
    created: list[str] = []

    async def pause(interval_s: float) -> None:
        name = f"w-{len(created)}"
        async with Client(control_plane.api, control_plane.admin_token) as c:
            await c.queue_add(QueueCreate(name=name))
        created.append(name)

    monkeypatch.setattr(watch, "pause", pause)
    out = (await cli("queues", "ls", "--watch", "--interval", "0.5", "--watch-count", "3")).stdout
    snapshots = out.rstrip("\n").split("\n\n")
    assert [names(s) for s in snapshots] == [
        ["default"],
        ["default", "w-0"],
        ["default", "w-0", "w-1"],
    ]
    assert all(s.startswith("NAMESPACE  NAME") for s in snapshots)
    assert "\x1b" not in out  # not a terminal: plain snapshots, nothing redrawn


async def test_a_terminal_is_redrawn_in_place_under_a_header(cli, pauses, monkeypatch):
    monkeypatch.setattr(watch, "stdout_is_tty", lambda: True)
    out = (await cli("queues", "ls", "--watch", "--interval", "0.5", "--watch-count", "2")).stdout
    frames = out.split("\x1b[H\x1b[J")
    assert frames[0] == "" and len(frames) == 3
    for frame in frames[1:]:
        header, blank, table, *_ = frame.split("\n")
        assert re.fullmatch(
            r"Every 0\.5s: lakeshore queues ls    \d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d\d:\d\d",
            header,
        ), header
        assert blank == "" and table.startswith("NAMESPACE  NAME")
    assert pauses == [0.5]


async def test_watch_without_a_value_uses_the_default_interval(cli, pauses):
    out = (await cli("queues", "ls", "--watch", "--watch-count", "2", "-o", "json")).stdout
    first, second = (json.loads(doc) for doc in out.split("\n\n"))
    assert first == second and first["queues"][0]["name"] == "default"
    assert pauses == [watch.DEFAULT_INTERVAL_S]


@pytest.mark.parametrize(
    "args",
    [
        ("queues", "ls"),
        ("queues", "stats", "default"),
        ("jobs", "ls"),
        ("daemon", "list"),
        ("controller", "status"),
    ],
)
async def test_every_watchable_command_prints_one_snapshot_per_round(cli, pauses, args):
    plain = (await cli(*args, "-o", "json")).stdout
    out = (
        await cli(*args, "--watch", "--interval", "1", "--watch-count", "3", "-o", "json")
    ).stdout
    docs = out.split("\n\n")
    assert len(docs) == 3 and len(pauses) == 2
    assert all(set(json.loads(d)) == set(json.loads(plain)) for d in docs)


async def test_ctrl_c_ends_the_watch_with_exit_status_0(cli, monkeypatch):
    async def interrupted(interval_s: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(watch, "pause", interrupted)
    result = await cli("queues", "ls", "--watch", expect=OK)
    assert names(result.stdout) == ["default"]
    assert "Aborted" not in result.output


async def test_an_api_error_ends_the_watch_with_exit_status_1(cli, control_plane, monkeypatch):
    await cli("queues", "add", "short-lived")

    async def remove(interval_s: float) -> None:
        async with Client(control_plane.api, control_plane.admin_token) as c:
            await c.queue_rm("short-lived", False)

    monkeypatch.setattr(watch, "pause", remove)
    result = await cli(
        "queues", "stats", "short-lived", "--watch", "--watch-count", "5", expect=API_ERROR
    )
    assert result.stdout.count("\n\n") == 0 and result.stdout.strip()
    assert result.stderr.startswith("error: ") and "short-lived" in result.stderr


async def test_an_interval_below_a_tenth_of_a_second_is_a_usage_error(cli, pauses):
    result = await cli("queues", "ls", "--watch", "--interval", "0.01", expect=USAGE)
    assert "--interval" in result.stderr
    result = await cli("queues", "ls", "--interval", "1", expect=USAGE)
    assert "add --watch" in result.stderr
    assert pauses == []


async def test_watch_is_a_flag_so_it_may_come_before_the_queue_name(cli):
    out = (await cli("queues", "stats", "-w", "--watch-count", "1", "default", "-o", "json")).stdout
    assert json.loads(out)["queue"] == "default"
