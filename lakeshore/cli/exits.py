"""Exit statuses of ``lakeshore`` and the one place an SDK error becomes one.

The contract (spec/api.md, "CLI"): 0 on success, 1 on an API error with its message on
stderr, 2 on a usage error (click's own); and 3 when a running daemon is refused for good.
No traceback is ever printed for an API error.
"""

from __future__ import annotations

import click

from lakeshore.errors import LakeshoreError

OK = 0
#: the API answered an error, or could not be reached
API_ERROR = 1
#: bad flags or arguments, reported by click with the command's usage
USAGE = 2
#: ``lakeshore daemon run`` only: NATS refuses the daemon for good — its token was
#: revoked, or its credential expired — and it stopped (``token revoked: …`` on stderr);
#: starting it again with the same token would be refused too
REFUSED = 3


def exit_code(err: LakeshoreError) -> int:
    """The exit status for an SDK error.

    Every :class:`LakeshoreError` is ``API_ERROR``: the spec fixes 1 for all of them (an
    unreachable API included), so scripts tell failures apart by the message, not the code.
    """
    return API_ERROR


class ApiError(click.ClickException):
    """An SDK error on its way out of click: ``error: <message>`` on stderr."""

    def __init__(self, err: LakeshoreError) -> None:
        super().__init__(err.message)
        self.exit_code = exit_code(err)

    def show(self, file: object = None) -> None:
        click.echo(f"error: {self.message}", err=True)
