"""The CLI as a user's shell runs it, against a control plane started by a test.

The CLI runs ``asyncio.run`` per command, so it runs on a thread while the control plane
keeps serving on the test's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from click.testing import CliRunner, Result

from lakeshore.cli.exits import OK
from lakeshore.cli.main import lakeshore

Invoke = Callable[..., Awaitable[Result]]
#: Bound on one CLI command (those that wait for daemons have their own --timeout).
CLI_WAIT_S = 60


def cli_for(handle: Any) -> Invoke:
    """``await cli("queues", "ls", expect=0)``: the CLI with ``handle``'s API URL and admin
    token in the environment; asserts the exit status and that no traceback was shown."""
    env = {"LAKESHORE_API": handle.api, "LAKESHORE_TOKEN": handle.admin_token}

    async def invoke(*args: str, expect: int = OK) -> Result:
        runner = CliRunner(env=env)
        async with asyncio.timeout(CLI_WAIT_S):
            result = await asyncio.to_thread(
                runner.invoke, lakeshore, list(args), prog_name="lakeshore"
            )
        assert result.exit_code == expect, (args, result.stdout, result.stderr, result.exception)
        assert "Traceback" not in result.output
        return result

    return invoke
