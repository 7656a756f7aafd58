"""Global options and the one way a command talks to the API.

``--api``, ``--token``, ``--namespace/-n`` and ``--output/-o`` are accepted on every group
and every command (``lakeshore -n bob queues ls`` and ``lakeshore queues ls -n bob``). Each
given value is recorded in the invocation's shared ``ctx.meta`` as it is parsed; click
parses outer contexts before inner ones, so the innermost given value wins. The recorded
flags go to :func:`lakeshore.config.load_client_settings`, which adds the environment and
the config file below them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from lakeshore.cli import output
from lakeshore.cli.exits import ApiError
from lakeshore.errors import LakeshoreError
from lakeshore.sdk import Call, Client

if TYPE_CHECKING:
    from lakeshore.config import ClientSettings

T = TypeVar("T")

_FLAGS = "lakeshore.flags"


def _record(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is not None:
        ctx.meta.setdefault(_FLAGS, {})[param.name] = value


def _global_params() -> list[click.Parameter]:
    common = {"default": None, "expose_value": False, "callback": _record}
    return [
        click.Option(
            ["--api"],
            metavar="URL",
            help="API base URL, e.g. http://127.0.0.1:8080; one URL, or several separated by "
            "commas: the CLI follows the leader.",
            **common,
        ),
        click.Option(["--token"], metavar="TOKEN", help="Bearer token for the API.", **common),
        click.Option(["--namespace", "-n"], metavar="NS", help="Namespace to act in.", **common),
        click.Option(
            ["--output", "-o"],
            type=click.Choice(output.FORMATS),
            help="Output format: table (default), json (the API's body as is) or yaml.",
            **common,
        ),
    ]


class LakeshoreCommand(click.Command):
    """A command that also takes the global options after its name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_global_params())


class LakeshoreGroup(click.Group):
    """A group whose commands and subgroups take the global options.

    It also turns any :class:`LakeshoreError` raised below it into ``error: <message>``
    on stderr and exit status 1, so no command handles errors itself.
    """

    command_class = LakeshoreCommand
    group_class = type

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_global_params())

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LakeshoreError as err:
            raise ApiError(err) from None


def settings() -> ClientSettings:
    """The client settings of the current invocation (flags, then env, then config file)."""
    from lakeshore.config import load_client_settings

    ctx = click.get_current_context()
    return load_client_settings(dict(ctx.meta.get(_FLAGS, {})))


def run(call: Callable[[Client], Call[T]], table: Callable[[T], str]) -> None:
    """Make one API call and print its answer in the chosen output format.

    Args:
        call: builds the SDK call from a client bound to the settings.
        table: renders the typed answer for ``-o table``; ``json`` and ``yaml`` print the
            response body as the server sent it.

    Raises:
        LakeshoreError: from the SDK; :class:`LakeshoreGroup` reports it.
    """
    conf = settings()

    async def fetch() -> tuple[Call[T], Any]:
        async with Client(conf.api, conf.token, conf.namespace) as client:
            pending = call(client)
            return pending, await pending.body()

    pending, body = asyncio.run(fetch())
    # Decoded only for tables, so json/yaml still print an answer this client cannot type.
    output.emit(conf.output or "table", body, lambda: table(pending.decode(body)))


__all__ = ["LakeshoreCommand", "LakeshoreGroup", "run", "settings"]
