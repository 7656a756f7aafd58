"""``lakeshore compose``: make the live system match ``lakeshore.yaml`` (docs/compose.md).

``diff`` prints the plan and changes nothing; ``up`` applies it (providers, then queues,
then daemons) and waits for the daemons it launched; ``down`` retires the file's daemon
groups and archives its queues (``--rm``: deletes them and its providers). Only objects
labelled with the project are ever taken down or patched back; others are shown as
``? unmanaged`` and left alone. Running daemons of no project that match a group are
adopted only with ``--adopt``; without it the group launches none beside them. ``down``
refuses (changing nothing) to take away a queue that daemons it does not own still serve,
unless ``--force``.

Exit status: 0 done (``diff``: in sync), 1 an error (an invalid file: every problem as
``FILE:LINE:COL: …`` on stderr, nothing sent; an API error; a change that failed or
cannot be applied), 2 a usage error, 3 (``diff``) changes are pending.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
import msgspec

from lakeshore.cli import output
from lakeshore.cli.context import LakeshoreGroup, settings
from lakeshore.cli.daemon import wait_registered
from lakeshore.cli.exits import API_ERROR, OK
from lakeshore.compose import (
    DEFAULT_FILE,
    ComposeFileInvalid,
    Declared,
    Outcome,
    Plan,
    apply,
    load,
    plan_down,
    plan_up,
    read_live,
    schema,
)
from lakeshore.compose.changes import Change, Op
from lakeshore.compose.display import change_lines, header, plan_text
from lakeshore.compose.live import Live
from lakeshore.compose.serving import served_by_others
from lakeshore.config import ClientSettings
from lakeshore.errors import InvalidName, LakeshoreError
from lakeshore.model import Worker, validate_name
from lakeshore.sdk import Client

T = TypeVar("T")

#: ``compose diff``: the live system differs from the file (for CI).
CHANGES_PENDING = 3


def _project(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return validate_name("project", value)
    except InvalidName as e:
        raise click.BadParameter(e.message, ctx, param) from None


_FILE = click.option(
    "-f",
    "--file",
    "path",
    default=DEFAULT_FILE,
    show_default=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The compose file.",
)
_PROJECT = click.option(
    "-p",
    "--project-name",
    "project",
    callback=_project,
    metavar="NAME",
    help="Project name [default: the file's `project`, else its directory's name].",
)
_ORPHANS = click.option(
    "--remove-orphans",
    is_flag=True,
    help="Retire/archive/delete what this project created that the file no longer declares.",
)
_ADOPT = click.option(
    "--adopt",
    is_flag=True,
    help="Adopt running daemons of no project that match a daemon group (its provider, "
    "queues and names): label them as the project's and count them toward `count`.",
)


@click.group(cls=LakeshoreGroup)
def compose() -> None:
    """Declare providers, queues and daemons in lakeshore.yaml; make the system match.

    Everything compose creates is labelled lakeshore.io/project=<project>; objects
    without that label are never changed, only shown as `? unmanaged`.
    """


@compose.command("diff")
@_FILE
@_PROJECT
@_ORPHANS
@_ADOPT
@click.pass_context
def diff(
    ctx: click.Context, path: str, project: str | None, remove_orphans: bool, adopt: bool
) -> None:
    """Show what `up` would change; change nothing.

    Exit status 0 when in sync, 3 when changes are pending, 1 on an error.
    """
    conf = settings()
    declared = _load(path, project, conf)

    async def go(client: Client) -> Plan:
        live = await read_live(client, declared.namespaces)
        return plan_up(declared, live, remove_orphans=remove_orphans, adopt=adopt)

    plan = _run(conf, go)
    body = {**msgspec.to_builtins(plan), "pending": plan.pending}
    output.emit(conf.output or "table", body, lambda: plan_text(plan))
    ctx.exit(CHANGES_PENDING if plan.pending else OK)


@compose.command("up")
@_FILE
@_PROJECT
@_ORPHANS
@_ADOPT
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait until every daemon launched has registered (progress on stderr).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="With --wait: give up (exit 1) after this many seconds.",
)
def up(
    path: str,
    project: str | None,
    remove_orphans: bool,
    adopt: bool,
    wait: bool,
    timeout_s: float,
) -> None:
    """Create, patch, launch and retire until the system matches the file.

    Applied in order: providers, then queues, then daemons. A second `up` changes
    nothing. If a change fails, the ones before it stay applied and the rest are listed;
    run `up` again to finish. A daemon group that running daemons of no project match
    launches none beside them (`!`) unless --adopt.
    """
    conf = settings()
    declared = _load(path, project, conf)
    _apply(
        conf,
        declared,
        lambda live: plan_up(declared, live, remove_orphans=remove_orphans, adopt=adopt),
        wait=wait,
        timeout_s=timeout_s,
    )


@compose.command("down")
@_FILE
@_PROJECT
@click.option(
    "--rm",
    "rm",
    is_flag=True,
    help="Delete the queues (rm --force) and the file's providers instead of archiving.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Archive (or delete) a queue even while daemons this project does not own serve it.",
)
def down(path: str, project: str | None, rm: bool, force: bool) -> None:
    """Retire the file's daemons and archive its queues.

    Only what the file declares and this project created (its label) is taken down;
    providers are left unless --rm. A queue that daemons this project does not own still
    serve is not taken away unless --force: down then names them and changes nothing.
    """
    conf = settings()
    declared = _load(path, project, conf)
    _apply(
        conf,
        declared,
        lambda live: plan_down(declared, live, rm=rm),
        wait=False,
        check=None if force else _refuse_served,
    )


@compose.command("schema")
def schema_() -> None:
    """Print the JSON Schema of lakeshore.yaml (for editors' completion)."""
    conf = settings()
    doc = schema()
    output.emit(conf.output or "json", doc, lambda: json.dumps(doc, indent=2))


# ---- helpers ----------------------------------------------------------------------------


def _load(path: str, project: str | None, conf: ClientSettings) -> Declared:
    """The checked file; on problems, each on stderr and exit 1 (nothing is sent)."""
    try:
        # The file's ${NAME} references are the user's shell variables.
        return load(path, project=project, namespace=conf.namespace, env=os.environ)
    except ComposeFileInvalid as e:
        for line in e.message.splitlines():
            click.echo(line, err=True)
        n = len(e.problems)
        click.echo(f"error: {n} problem{'s' * (n != 1)} in {path}; nothing was sent", err=True)
        raise click.exceptions.Exit(API_ERROR) from None


def _run(conf: ClientSettings, go: Callable[[Client], Awaitable[T]]) -> T:
    async def main() -> T:
        async with Client(conf.api, conf.token, conf.namespace) as client:
            return await go(client)

    return asyncio.run(main())


class _Printer:
    """Prints changes under their namespace's header, the header once per run of them."""

    def __init__(self, project: str, enabled: bool) -> None:
        self.project, self.enabled = project, enabled
        self._ns: str | None = None
        #: the changes printed so far
        self.printed: list[Change] = []

    def __call__(self, change: Change) -> None:
        self.printed.append(change)
        if not self.enabled:
            return
        if change.namespace != self._ns:
            self._ns = change.namespace
            click.echo(header(change.namespace, self.project))
        for line in change_lines(change):
            click.echo("  " + line)


def _refuse_served(plan: Plan, live: dict[str, Live]) -> list[str]:
    """``down``: why the plan must not be applied (queues others' daemons serve)."""
    several = len(plan.namespaces) > 1
    return [f"compose down: {s.message(several)}" for s in served_by_others(plan, live)]


def _apply(
    conf: ClientSettings,
    declared: Declared,
    make_plan: Callable[[dict[str, Live]], Plan],
    *,
    wait: bool,
    timeout_s: float = 0,
    check: Callable[[Plan, dict[str, Live]], list[str]] | None = None,
) -> None:
    """Plan against the live state, apply, report; exit 1 if anything was left undone.

    Args:
        check: what stops the whole plan before anything is sent (each on stderr, exit 1).
    """
    fmt = conf.output or "table"
    printer = _Printer(declared.project, fmt == "table")

    async def go(client: Client) -> tuple[Plan, Outcome] | list[str]:
        live = await read_live(client, declared.namespaces)
        plan = make_plan(live)
        refused = check(plan, live) if check is not None else []
        if refused:
            return refused
        outcome = await apply(client, plan, printer)
        if wait and outcome.ok and outcome.launched:
            await _wait(conf, outcome.launched, timeout_s)
        return plan, outcome

    done = _run(conf, go)
    if isinstance(done, list):
        for reason in done:
            click.echo(f"error: {reason}", err=True)
        click.echo("nothing was changed", err=True)
        raise click.exceptions.Exit(API_ERROR)
    plan, outcome = done
    shown = [c for c in plan.changes if c.action is None]
    cannot = [c for c in shown if c.op is Op.CANNOT]
    if fmt != "table":
        output.emit(fmt, _outcome_body(plan, outcome, shown), str)
    else:
        # What only informs is printed in its place; after a failure, the rest of it here.
        for change in shown:
            if not any(c is change for c in printer.printed):
                printer(change)
        if not outcome.applied and outcome.ok:
            click.echo("no changes" if not cannot else "no changes applied")
    if not outcome.ok:
        assert outcome.failed is not None
        _report_failure(outcome)
    if cannot:
        n = len(cannot)
        click.echo(f"error: {n} change{'s' * (n != 1)} cannot be applied (! above)", err=True)
    if not outcome.ok or cannot:
        raise click.exceptions.Exit(API_ERROR)


def _report_failure(outcome: Outcome) -> None:
    assert outcome.failed is not None
    failed = "; ".join(change_lines(outcome.failed))
    click.echo(f"error: {failed}: {outcome.error}", err=True)
    click.echo(f"applied: {len(outcome.applied)} change(s) (listed above)", err=True)
    click.echo("not applied:", err=True)
    for change in [outcome.failed, *outcome.not_applied]:
        for line in change_lines(change):
            click.echo("  " + line, err=True)
    click.echo("run the same command again to finish: it plans only what is left", err=True)


def _outcome_body(plan: Plan, outcome: Outcome, shown: list[Change]) -> dict[str, Any]:
    def changes(items: list[Change]) -> list[Any]:
        return msgspec.to_builtins(items)

    return {
        "project": plan.project,
        "applied": changes(outcome.applied),
        "failed": msgspec.to_builtins(outcome.failed),
        "error": outcome.error,
        "not_applied": changes(outcome.not_applied),
        "shown": changes(shown),
        "launched": [w.name for w in outcome.launched],
    }


async def _wait(conf: ClientSettings, launched: list[Worker], timeout_s: float) -> None:
    """Wait, within one deadline, until each launched daemon has registered (per
    namespace: the worker list is read per namespace)."""
    by_ns: dict[str, list[Worker]] = {}
    for w in launched:
        by_ns.setdefault(w.namespace, []).append(w)
    deadline = time.monotonic() + timeout_s
    for ns, workers in by_ns.items():
        async with Client(conf.api, conf.token, ns) as client:
            left = max(deadline - time.monotonic(), 0.001)
            try:
                await wait_registered(client, workers, left)
            except LakeshoreError as e:
                raise LakeshoreError(
                    f"{e.message}; everything else was applied (run `compose up` again once "
                    "the daemons are fixed)"
                ) from None


__all__ = ["CHANGES_PENDING", "compose"]
