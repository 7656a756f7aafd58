"""``lakeshore submit``: put one invocation on a queue, a command or a ``module:qualname``.

Without ``--wait`` it prints the invocation id on stdout. With ``--wait`` it prints the
result instead (a command's stdout on stdout and its stderr on stderr, live as the command
writes them; a function's value as JSON) and exits 1 if the invocation failed; the id then
goes to stderr. Server warnings
go to stderr as ``warning: …`` lines. ``-o json``/``yaml`` print the submit answer, or with
``--wait`` the result, as the API sent it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click
import msgspec

from lakeshore.cli import output
from lakeshore.cli.context import LakeshoreCommand, settings
from lakeshore.cli.jobs import print_log, show_result
from lakeshore.cli.options import key_values
from lakeshore.cli.params import QUEUE_NAME
from lakeshore.code.snapshot import directory_of
from lakeshore.errors import NotFound, Unavailable
from lakeshore.model import (
    DEFAULT_MAX_LOST,
    DEFAULT_STOP_GRACE_S,
    MAX_LOST,
    MAX_STOP_GRACE_S,
    InvocationSubmit,
    Resources,
    check_resources,
)
from lakeshore.sdk import Client
from lakeshore.sdk.code import SHIPPER
from lakeshore.sdk.invocation import poll_result


def _json_option(value: str | None, name: str, kind: type) -> Any:
    if value is None:
        return kind()
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not valid JSON ({e})", param_hint=name) from None
    if not isinstance(parsed, kind):
        what = "array" if kind is list else "object"
        raise click.BadParameter(f"must be a JSON {what}, got {value!r}", param_hint=name)
    return parsed


def build(
    command: tuple[str, ...],
    fn: str | None,
    args: str | None,
    kwargs: str | None,
    env: tuple[str, ...],
    **options: Any,
) -> InvocationSubmit:
    """The invocation the flags describe.

    Raises:
        click.UsageError: not exactly one of a command and ``--fn``, or a flag that belongs
            to the other kind (exit 2).
    """
    if bool(command) == bool(fn):
        raise click.UsageError(
            "give exactly one of a command (after --) or --fn module:qualname, e.g. "
            "`lakeshore submit --queue Q -- echo hi` or `lakeshore submit --queue Q --fn m:f`"
        )
    if fn and env:
        raise click.UsageError("--env is for commands; a function's inputs go in --kwargs")
    if command and (args is not None or kwargs is not None):
        raise click.UsageError("--args and --kwargs go with --fn, not with a command")
    given = {k: v for k, v in options.items() if v is not None}
    if command:
        return InvocationSubmit(
            command=list(command), env=key_values(env, param_hint="--env", secret=True), **given
        )
    return InvocationSubmit(
        fn=fn,
        args=_json_option(args, "--args", list),
        kwargs=_json_option(kwargs, "--kwargs", dict),
        **given,
    )


@click.command(
    "submit",
    cls=LakeshoreCommand,
    context_settings={"allow_interspersed_args": False},
    epilog="Everything after the command's first word is its own: put lakeshore's options "
    "before it, and `--` before a command that starts with a dash.",
)
@click.option(
    "--queue", "-q", required=True, metavar="Q", type=QUEUE_NAME, help="The queue to submit to."
)
@click.option("--fn", metavar="MODULE:QUALNAME", help="A function the daemon imports and calls.")
@click.option("--args", metavar="JSON", help="--fn's positional arguments, a JSON array.")
@click.option("--kwargs", metavar="JSON", help="--fn's keyword arguments, a JSON object.")
@click.option("--env", multiple=True, metavar="KEY=VALUE", help="Set for the command; repeatable.")
@click.option("--priority", type=click.IntRange(0, 9), help="0-9, higher first (priority queues).")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    metavar="S",
    help="Kill a run after S seconds (a failed attempt).",
)
@click.option(
    "--stop-grace-s",
    type=click.FloatRange(0, MAX_STOP_GRACE_S),
    metavar="S",
    help="A stopped run (cancel, timeout) gets SIGTERM, then SIGKILL S seconds later "
    f"(default {DEFAULT_STOP_GRACE_S:g}).",
)
@click.option(
    "--max-attempts", type=click.IntRange(1, 100), help="Tries before it fails (default 1)."
)
@click.option(
    "--max-lost",
    type=click.IntRange(1, MAX_LOST),
    metavar="N",
    help="Fail it as lost_too_often after N lost attempts in a row (the daemon running it "
    f"died each time; default {DEFAULT_MAX_LOST}).",
)
@click.option("--idempotency-key", metavar="K", help="Submitting the same key again is a no-op.")
@click.option(
    "--gpus", type=click.IntRange(0), metavar="N", help="GPUs the run holds, its own (0-64)."
)
@click.option("--gpu-type", metavar="T", help="The GPUs' type, e.g. H100 (with --gpus).")
@click.option("--cpus", type=float, metavar="C", help="CPUs the run holds (default 1).")
@click.option("--memory", metavar="SIZE", help="Memory the run holds, with a unit: 16G, 512M.")
@click.option(
    "--code",
    metavar="DIR",
    help="Ship DIR's files: the run has them first on sys.path and as its working "
    "directory, on any host (uploaded once per change; .lakeshoreignore leaves files out).",
)
@click.option("--wait", is_flag=True, help="Wait for the result, print it, exit 1 if it failed.")
@click.argument("command", nargs=-1, metavar="[--] CMD [ARGS]...")
def submit(
    wait: bool,
    queue: str,
    code: str | None,
    gpus: int | None,
    gpu_type: str | None,
    cpus: float | None,
    memory: str | None,
    **flags: Any,
) -> None:
    """Submit a command or a function call to a queue.

    \b
      lakeshore submit --queue cpu-prep --wait -- echo hello
      lakeshore submit --queue cpu-prep --fn tasks:double --args '[21]'
      lakeshore submit --queue cpu-prep --code . --fn tasks:double --args '[21]'
      lakeshore submit --queue training-h100 --gpus 2 --gpu-type H100 -- python train.py
    """
    spec = build(**flags)
    asked = {"gpus": gpus, "gpu_type": gpu_type, "cpus": cpus, "memory": memory}
    if given := {k: v for k, v in asked.items() if v is not None}:
        resources = msgspec.convert(given, Resources)
        check_resources("submit", resources)
        spec = msgspec.structs.replace(spec, resources=resources)
    directory = None if code is None else directory_of(code)
    conf = settings()
    fmt = conf.output or "table"

    async def go() -> None:
        async with Client(conf.api, conf.token, conf.namespace) as client:
            shipped = spec
            if directory is not None:
                digest = await SHIPPER.ship(client, directory, None)
                shipped = msgspec.structs.replace(spec, code=digest)
            call = client.submit(queue, shipped)
            body = await call.body()
            answer = call.decode(body)
            for warning in answer.warnings:
                click.echo(f"warning: {warning}", err=True)
            if not wait:
                output.emit(fmt, body, lambda: "\n".join(answer.ids))
                return
            [inv_id] = answer.ids
            click.echo(f"submitted {inv_id} to queue {answer.queue}; waiting", err=True)
            printed = False
            if spec.command is not None and fmt == "table":
                # A command's output as it comes (the result's tails would come at the end).
                printed = await _stream(client, inv_id, answer.namespace)
            result, result_body = await poll_result(client, inv_id, namespace=answer.namespace)
        show_result(result, result_body, fmt, printed=printed)

    asyncio.run(go())


async def _stream(client: Client, inv_id: str, namespace: str) -> bool:
    """Print a command's live log until it ends; ``False`` (nothing printed) when this
    control plane serves no logs, so the result's output is printed instead."""
    try:
        await print_log(client, inv_id, namespace=namespace, follow=True, ended_lines=True)
    except (NotFound, Unavailable):
        return False
    return True


__all__ = ["build", "submit"]
