"""The Structs of ``lakeshore.yaml``: what a team declares, per namespace.

A file declares one namespace (``namespace: X`` and the sections at the top) or several
(``namespaces: {X: {providers, queues, daemons}, …}``). Every Struct forbids unknown
fields, so a typo is an error with its line and column (:mod:`lakeshore.compose.loader`),
never a silent no-op. The elasticity object is derived from the server's own
:class:`~lakeshore.model.Elasticity`, field for field, with every field optional: an
omitted field takes the server's default for the kind, as a ``queues add`` would.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from lakeshore.elasticity import build
from lakeshore.model import (
    BUILTIN_PROVIDER,
    MAX_LAUNCH,
    Elasticity,
    OnFull,
    ProviderKind,
    QueueDefaults,
    QueueKind,
)
from lakeshore.model.names import MAX_ENTRIES, Depth, Labels, Name, Text

#: The label every object compose creates carries: the project's name.
PROJECT_LABEL = "lakeshore.io/project"
#: The label a compose daemon carries besides the project's: its group (the ``daemons:`` key).
DAEMON_LABEL = "lakeshore.io/daemon"
#: Labels compose sets itself; a file may not set them.
RESERVED_LABELS = (PROJECT_LABEL, DAEMON_LABEL)

#: The file ``-f`` reads when none is given.
DEFAULT_FILE = "lakeshore.yaml"


def _doc(text: str) -> Meta:
    return Meta(description=text)


#: ``elasticity:`` of a queue: every field of the server's elasticity object, optional.
ElasticitySpec = msgspec.defstruct(
    "ElasticitySpec",
    [(f.name, f.type | UnsetType, UNSET) for f in msgspec.structs.fields(Elasticity)],
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    module=__name__,
)
ElasticitySpec.__doc__ = (
    "How the controller sizes the queue's fleet (spec/elasticity.md). Omitted fields take "
    "the server's defaults for the kind: fixed, min 0 (elastic: 1), max 0, provider local."
)


class ProviderSpec(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A provider: where daemons are started (ssh hosts, a Slurm partition, …)."""

    kind: Annotated[ProviderKind, _doc("local, external, ssh or slurm; fixed once created")]
    config: Annotated[
        dict[str, Any],
        Meta(max_length=MAX_ENTRIES, description="the provider's settings, kept as given"),
    ] = {}
    labels: Annotated[Labels, _doc("merged with lakeshore.io/project")] = {}


class QueueSpec(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A queue: every field `lakeshore queues add` takes. Omitted fields are the defaults,
    and `compose up` sets a live queue back to them."""

    kind: Annotated[QueueKind, _doc("fifo or priority; fixed once created")] = QueueKind.FIFO
    description: Text = ""
    max_depth: Annotated[Depth | None, _doc("most unfinished invocations; null: none")] = None
    on_full: Annotated[OnFull, _doc("what a submit to a full queue does")] = OnFull.REJECT
    elasticity: ElasticitySpec = ElasticitySpec()  # type: ignore[valid-type]
    labels: Annotated[Labels, _doc("merged with lakeshore.io/project")] = {}
    code: Annotated[
        str | None,
        _doc(
            "a directory (relative to the file) its invocations run in when they name no "
            "code of their own: shipped as a snapshot by `compose up`; null: none"
        ),
    ] = None
    defaults: Annotated[
        QueueDefaults | None,
        _doc("what its invocations get when they name none: resources {gpus, gpu_type, …}"),
    ] = None


class DaemonSpec(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A group of daemons kept at `count`, labelled lakeshore.io/daemon=<key>: named
    `<name>` for one daemon, `<name>-00` … for several."""

    provider: Annotated[Name, _doc("where they run: local or a provider")] = BUILTIN_PROVIDER
    queues: Annotated[
        list[Name],
        Meta(max_length=MAX_ENTRIES, description="the queues they pull from; []: default"),
    ] = []
    count: Annotated[int, Meta(ge=0, le=MAX_LAUNCH, description="how many to keep running")] = 1
    labels: Annotated[Labels, _doc("merged with lakeshore.io/project and /daemon")] = {}
    name: Annotated[Name | None, _doc("their names' stem; default: the key")] = None


class NamespaceSpec(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What one namespace should have."""

    providers: dict[Name, ProviderSpec] = {}
    queues: dict[Name, QueueSpec] = {}
    daemons: dict[Name, DaemonSpec] = {}


class ComposeFile(NamespaceSpec, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """lakeshore.yaml: the providers, queues and daemons of one namespace (the sections
    at the top, in `namespace`) or of several (`namespaces`, and no sections at the top)."""

    project: Annotated[
        Name | None, _doc("labels what this file creates; default: the file's directory")
    ] = None
    namespace: Annotated[
        Name | None, _doc("the namespace of the top sections; default: the CLI's (-n)")
    ] = None
    namespaces: Annotated[
        dict[Name, NamespaceSpec] | None, _doc("several namespaces, each with its sections")
    ] = None

    def by_namespace(self, default: str) -> dict[str, NamespaceSpec]:
        """Each declared namespace's sections; ``default`` names the top sections' namespace
        when the file names none."""
        if self.namespaces is not None:
            return dict(self.namespaces)
        top = NamespaceSpec(providers=self.providers, queues=self.queues, daemons=self.daemons)
        return {self.namespace or default: top}


def desired_elasticity(spec: QueueSpec) -> Elasticity:
    """The complete elasticity object the server makes of the file's partial one.

    Raises:
        Invalid: as :func:`lakeshore.elasticity.build` (the server's own check).
    """
    return build(given(spec.elasticity))


def given(struct: Any) -> dict[str, Any]:
    """The fields of a Struct that the file gave (not ``UNSET``), as JSON-ready values."""
    return msgspec.to_builtins(struct)


def daemon_stem(key: str, spec: DaemonSpec) -> str:
    """The daemons' names' stem: ``name``, else the group's key."""
    return spec.name or key


def with_labels(labels: dict[str, str], project: str, group: str | None = None) -> dict[str, str]:
    """``labels`` plus the ones compose sets: the project's, and the daemon group's."""
    out = {**labels, PROJECT_LABEL: project}
    if group is not None:
        out[DAEMON_LABEL] = group
    return out


__all__ = [
    "DAEMON_LABEL",
    "DEFAULT_FILE",
    "PROJECT_LABEL",
    "RESERVED_LABELS",
    "ComposeFile",
    "DaemonSpec",
    "ElasticitySpec",
    "NamespaceSpec",
    "ProviderSpec",
    "QueueSpec",
    "daemon_stem",
    "desired_elasticity",
    "given",
    "with_labels",
]
