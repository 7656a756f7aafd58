"""``--watch/-w [--interval S]``: ask the API again and again, like ``kubectl get -w`` or
``watch``.

On a terminal each snapshot redraws the screen in place under a header line with the
command, the interval and the time. Elsewhere (a pipe, a file, click's runner) snapshots
follow one another, separated by a blank line. Ctrl-C ends the watch with exit status 0;
an API error ends it like any command's (``error: …`` on stderr, exit 1).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click

from lakeshore.cli import output
from lakeshore.cli.context import run as run_once
from lakeshore.cli.context import settings
from lakeshore.sdk import Call, Client

T = TypeVar("T")

#: Seconds between two snapshots unless ``--interval`` says otherwise.
DEFAULT_INTERVAL_S = 2.0
_WATCH = "lakeshore.watch"
_INTERVAL = "lakeshore.watch_s"
_COUNT = "lakeshore.watch_count"
#: Cursor home, then erase to the end of the screen: the next snapshot draws over the last.
_REDRAW = "\x1b[H\x1b[J"


def _record(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            ctx.meta[key] = value

    return callback


def option(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--watch/-w``, ``--interval S`` (and the hidden ``--watch-count N`` tests stop
    it with) to a command whose body calls :func:`run`."""
    f = click.option(
        "--watch-count",
        type=click.IntRange(min=1),
        hidden=True,
        expose_value=False,
        callback=_record(_COUNT),
        help="With --watch: stop after N snapshots.",
    )(f)
    f = click.option(
        "--interval",
        type=click.FloatRange(min=0.1),
        default=None,
        metavar="S",
        expose_value=False,
        callback=_record(_INTERVAL),
        help=f"With --watch: seconds between two snapshots (default {DEFAULT_INTERVAL_S:g}).",
    )(f)
    # A flag, not an option with an optional value: ``queues stats --watch NAME`` must not
    # read NAME as a number of seconds.
    return click.option(
        "--watch",
        "-w",
        is_flag=True,
        default=None,
        expose_value=False,
        callback=_record(_WATCH),
        help="Show it again and again (every --interval seconds) until Ctrl-C.",
    )(f)


def stdout_is_tty() -> bool:
    """Whether stdout is a terminal (click's runner and pipes are not)."""
    return sys.stdout.isatty()


async def pause(interval_s: float) -> None:
    """The wait between two snapshots (a test replaces it to change data in between)."""
    await asyncio.sleep(interval_s)


def run(call: Callable[[Client], Call[T]], table: Callable[[T], str]) -> None:
    """:func:`lakeshore.cli.context.run`, repeated while ``--watch`` was given.

    Raises:
        LakeshoreError: from the SDK, ending the watch; :class:`LakeshoreGroup` reports it.
    """
    ctx = click.get_current_context()
    if not ctx.meta.get(_WATCH):
        if _INTERVAL in ctx.meta:
            raise click.UsageError("--interval is for --watch: add --watch (or -w)")
        run_once(call, table)
        return
    interval_s = ctx.meta.get(_INTERVAL, DEFAULT_INTERVAL_S)
    count = ctx.meta.get(_COUNT)
    conf = settings()
    fmt = conf.output or "table"
    tty = stdout_is_tty()
    title = f"Every {interval_s:g}s: {ctx.command_path}"

    async def loop() -> None:
        async with Client(conf.api, conf.token, conf.namespace) as client:
            for i in itertools.count() if count is None else range(count):
                if i:
                    await pause(interval_s)
                pending = call(client)
                body = await pending.body()
                if tty:
                    # color=True: the screen codes go out even where click would strip them.
                    click.echo(_REDRAW + _header(title) + "\n", color=True)
                elif i:
                    click.echo()
                _emit(fmt, pending, body, table)

    try:
        asyncio.run(loop())
    except KeyboardInterrupt:
        # Ctrl-C is how a watch is meant to end: a success, not click's "Aborted!".
        if tty:
            click.echo()


def _emit(fmt: str, pending: Call[T], body: Any, table: Callable[[T], str]) -> None:
    output.emit(fmt, body, lambda: table(pending.decode(body)))


def _header(title: str) -> str:
    return f"{title}    {datetime.now().astimezone().isoformat(sep=' ', timespec='seconds')}"


__all__ = ["DEFAULT_INTERVAL_S", "option", "pause", "run", "stdout_is_tty"]
