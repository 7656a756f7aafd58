"""The ``providers:`` of a file against a namespace's live providers."""

from __future__ import annotations

from typing import Any

from lakeshore.compose.changes import (
    Change,
    CreateProvider,
    DeleteProvider,
    FieldChange,
    Op,
    PatchProvider,
)
from lakeshore.compose.live import Live
from lakeshore.compose.ownership import ours_or_free, stray, unowned
from lakeshore.compose.spec import NamespaceSpec, ProviderSpec, with_labels
from lakeshore.model import BUILTIN_PROVIDER, Provider


def provider_changes(
    ns: str, spec: NamespaceSpec, now: Live, project: str, remove_orphans: bool
) -> list[Change]:
    """Create the declared providers that are missing, patch the config and labels of
    those that differ; show (or, ``remove_orphans``, delete) the undeclared ones."""
    changes = []
    live = {p.name: p for p in now.providers}
    for name, want in spec.providers.items():
        have = live.get(name)
        labels = with_labels(want.labels, project)
        if have is None:
            changes.append(
                Change(
                    namespace=ns,
                    op=Op.CREATE,
                    subject="provider",
                    name=name,
                    summary=str(want.kind),
                    action=CreateProvider(
                        name=name, kind=want.kind, config=dict(want.config), labels=labels
                    ),
                )
            )
        else:
            changes += _patch(ns, name, want, labels, have, project)
    for p in now.providers:
        if p.name not in spec.providers and p.name != BUILTIN_PROVIDER:
            changes += stray(
                ns,
                "provider",
                p.name,
                p.labels,
                project,
                remove_orphans,
                DeleteProvider(name=p.name),
                "delete",
            )
    return changes


def same_setting(have: Any, want: Any) -> bool:
    """Whether a live provider setting is the file's: equal values of the same type,
    compared through lists and mappings. ``2222`` and ``"2222"`` differ (the CLI types
    ``--config port=2222`` as the number, as the file does), and so do ``true`` and ``1``,
    which Python's ``==`` calls equal; ``1`` and ``1.0`` are the same number."""
    if isinstance(have, dict) and isinstance(want, dict):
        return have.keys() == want.keys() and all(same_setting(have[k], want[k]) for k in have)
    if isinstance(have, list) and isinstance(want, list):
        return len(have) == len(want) and all(map(same_setting, have, want))
    numbers = (int, float)
    if isinstance(have, numbers) and isinstance(want, numbers):
        return isinstance(have, bool) is isinstance(want, bool) and have == want
    return type(have) is type(want) and have == want


def _patch(
    ns: str, name: str, want: ProviderSpec, labels: dict[str, str], have: Provider, project: str
) -> list[Change]:
    if not ours_or_free(have.labels, project):
        return [unowned(ns, "provider", name, have.labels, Op.CANNOT)]
    if have.kind != want.kind:
        return [
            Change(
                namespace=ns,
                op=Op.CANNOT,
                subject="provider",
                name=name,
                summary=f"a provider's kind is fixed: delete it (lakeshore providers rm {name}) "
                "and run up again",
                fields=[FieldChange(field="kind", old=str(have.kind), new=str(want.kind))],
            )
        ]
    fields = []
    config_differs = not same_setting(have.config, want.config)
    if config_differs:
        fields.append(FieldChange(field="config", old=have.config, new=dict(want.config)))
    if have.labels != labels:
        fields.append(FieldChange(field="labels", old=have.labels, new=labels))
    if not fields:
        return []
    action = PatchProvider(
        name=name,
        config=dict(want.config) if config_differs else None,
        labels=labels if have.labels != labels else None,
    )
    return [
        Change(
            namespace=ns, op=Op.PATCH, subject="provider", name=name, fields=fields, action=action
        )
    ]


__all__ = ["provider_changes", "same_setting"]
