"""``lakeshore code``: the code snapshots of the namespace's org (spec/code.md)."""

from __future__ import annotations

import asyncio

import click

from lakeshore.cli import output
from lakeshore.cli.context import LakeshoreGroup, run, settings
from lakeshore.cli.jobs import short_digest
from lakeshore.code.snapshot import DIGEST_PREFIX, human_size
from lakeshore.errors import Invalid, SnapshotNotFound
from lakeshore.model import CodeInfo
from lakeshore.sdk import Client

_COLUMNS = ("DIGEST", "SIZE", "FILES", "JOBS", "UNFINISHED", "LAST USED", "STORED")


@click.group(cls=LakeshoreGroup)
def code() -> None:
    """Code snapshots: what `submit --code DIR` and `@udf(code=...)` ship.

    Snapshots belong to the org: every namespace of it runs them. One no pending or running
    job names is deleted the server's code_retention_days after its last use.
    """


@code.command("ls")
def ls() -> None:
    """List the org's snapshots, the most recently used first."""
    run(lambda c: c.code_ls(), _table)


@code.command("show")
@click.argument("digest", metavar="DIGEST")
def show(digest: str) -> None:
    """Show one snapshot: its size, files and the jobs that use it.

    DIGEST may be cut short (as `code ls` and `jobs show` print it) while it names one.
    """
    full = digest if len(digest) == len(DIGEST_PREFIX) + 64 else _resolve(digest)
    run(lambda c: c.code_info(full), _block)


def _resolve(prefix: str) -> str:
    """The one stored digest that starts with ``prefix`` (with or without ``sha256:``)."""
    conf = settings()

    async def listed() -> list[CodeInfo]:
        async with Client(conf.api, conf.token, conf.namespace) as client:
            return await client.code_ls()

    wanted = prefix if prefix.startswith(DIGEST_PREFIX) else DIGEST_PREFIX + prefix
    found = [i.digest for i in asyncio.run(listed()) if i.digest.startswith(wanted)]
    if not found:
        raise SnapshotNotFound(f"no code snapshot of this org starts with {prefix!r}")
    if len(found) > 1:
        raise Invalid(
            f"{prefix!r} names {len(found)} snapshots ({', '.join(found[:3])}…): give more of it"
        )
    return found[0]


def _table(rows: list[CodeInfo]) -> str:
    return output.table(
        _COLUMNS,
        (
            (
                short_digest(i.digest),
                human_size(i.size),
                i.files,
                i.jobs,
                i.unfinished,
                i.last_used,
                i.stored_at,
            )  # fmt: skip
            for i in rows
        ),
    )


def _block(info: CodeInfo) -> str:
    return output.block(
        [
            ("digest", info.digest),
            ("size", f"{human_size(info.size)} in {info.files:,} files"),
            ("stored", info.stored_at),
            ("jobs", f"{info.jobs} ({info.unfinished} not finished)"),
            ("first used", info.first_used),
            ("last used", info.last_used),
        ]
    )
