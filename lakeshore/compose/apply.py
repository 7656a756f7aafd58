"""Applying a plan through the SDK, change by change, in the plan's (safe) order.

The first change that fails stops the run: what was applied stays applied, and the
:class:`Outcome` says what was and what was not. Nothing is rolled back; a plan is made
against the live state, so running ``compose up`` again plans only what is left.
"""

from __future__ import annotations

from collections.abc import Callable

from msgspec import Struct

from lakeshore.compose.changes import (
    AdoptDaemons,
    ArchiveQueue,
    Change,
    CreateNamespace,
    CreateProvider,
    CreateQueue,
    DeleteProvider,
    DeleteQueue,
    EditMembership,
    LaunchDaemons,
    PatchProvider,
    PatchQueue,
    Plan,
    RetireDaemons,
    UnarchiveQueue,
)
from lakeshore.errors import Conflict, LakeshoreError
from lakeshore.model import DaemonLaunch, ProviderKind, Worker
from lakeshore.providers.external import refusal
from lakeshore.sdk import Client
from lakeshore.sdk.code import SHIPPER


class Outcome(Struct, frozen=True, kw_only=True):
    """What a run applied, and where it stopped."""

    applied: list[Change]
    #: the change that failed (``None``: every change was applied)
    failed: Change | None = None
    #: why it failed; a partly done change says what of it was done
    error: str | None = None
    #: the changes after the failed one, not attempted
    not_applied: list[Change] = []
    #: every daemon launched (their rows as the launch answered: ``starting``)
    launched: list[Worker] = []

    @property
    def ok(self) -> bool:
        return self.failed is None


async def apply(
    client: Client, plan: Plan, on_done: Callable[[Change], None] = lambda c: None
) -> Outcome:
    """Send every change of ``plan`` that has an action, in order.

    Args:
        on_done: called with each change in the plan's order, once it is applied (one
            without an action, which only informs, when it is reached); not with the
            failed change nor any after it.

    Returns:
        What was applied; on the first failure, also the failed change, its error and the
        changes with an action that were not attempted. API errors are reported there,
        not raised.
    """
    applied: list[Change] = []
    launched: list[Worker] = []
    for i, change in enumerate(plan.changes):
        if change.action is None:
            on_done(change)
            continue
        try:
            await _send(client, change, launched)
        except LakeshoreError as e:
            return Outcome(
                applied=applied,
                failed=change,
                error=e.message,
                not_applied=[c for c in plan.changes[i + 1 :] if c.action is not None],
                launched=launched,
            )
        applied.append(change)
        on_done(change)
    return Outcome(applied=applied, launched=launched)


async def _send(client: Client, change: Change, launched: list[Worker]) -> None:
    ns = change.namespace
    match change.action:
        case CreateNamespace():
            await client.namespaces_add(ns)
        case CreateProvider(name=name, kind=kind, config=config, labels=labels):
            await client.providers_add(name, kind, config, labels=labels, namespace=ns)
        case PatchProvider(name=name, config=config, labels=labels):
            await client.providers_patch(name, config=config, labels=labels, namespace=ns)
        case DeleteProvider(name=name):
            await client.providers_rm(name, namespace=ns)
        case CreateQueue(body=body, code_dir=code_dir):
            if code_dir is not None:
                await SHIPPER.ship(client, code_dir, ns)
            await client.queue_add(body, namespace=ns)
        case PatchQueue(name=name, body=body, code_dir=code_dir):
            if code_dir is not None:
                await SHIPPER.ship(client, code_dir, ns)
            await client.queue_patch(name, body, namespace=ns)
        case UnarchiveQueue(name=name):
            await client.queue_unarchive(name, namespace=ns)
        case ArchiveQueue(name=name):
            await client.queue_archive(name, namespace=ns)
        case DeleteQueue(name=name):
            await client.queue_rm(name, force=True, namespace=ns)
        case LaunchDaemons():
            await _launch(client, ns, change.action, launched)
        case RetireDaemons(workers=workers):
            done: list[str] = []
            for w in workers:
                try:
                    await client.worker_retire(w.id, namespace=ns)
                except LakeshoreError as e:
                    raise _partly("retired", done, w.name, e) from None
                done.append(w.name)
        case AdoptDaemons(workers=workers, labels=labels):
            done = []
            for w in workers:
                try:
                    await client.worker_patch(w.id, labels=labels, namespace=ns)
                except LakeshoreError as e:
                    raise _partly("adopted", done, w.name, e) from None
                done.append(w.name)
        case EditMembership(worker=w, add=add, remove=remove):
            await client.worker_queues(w.id, add=add, remove=remove, namespace=ns)
        case None:
            pass


async def _launch(client: Client, ns: str, action: LaunchDaemons, launched: list[Worker]) -> None:
    done: list[str] = []
    for name in action.names:
        body = DaemonLaunch(
            provider=action.provider,
            queues=list(action.queues),
            count=1,
            name=name,
            labels=dict(action.labels),
        )
        try:
            answer = await client.daemons_launch(body, namespace=ns)
        except Conflict as e:
            raise _partly("launched", done, name, await _by_hand(client, ns, action, e)) from None
        except LakeshoreError as e:
            raise _partly("launched", done, name, e) from None
        launched += answer.workers
        done.append(name)


async def _by_hand(client: Client, ns: str, action: LaunchDaemons, err: Conflict) -> LakeshoreError:
    """An external provider's refusal, with the commands filled with what this client
    knows (the API it talks to, every name of the group, its queues); other refusals as
    they came."""
    try:
        provider = await client.providers_show(action.provider, namespace=ns)
    except LakeshoreError:
        return err
    if provider.kind is not ProviderKind.EXTERNAL:
        return err
    api = ",".join(client.apis)
    return Conflict(refusal(provider, api=api, names=action.names, queues=action.queues))


def _partly(verb: str, done: list[str], name: str, err: LakeshoreError) -> LakeshoreError:
    before = f"{verb} {', '.join(done)}, then " if done else ""
    return LakeshoreError(f"{before}{name}: {err.message}")


__all__ = ["Outcome", "apply"]
