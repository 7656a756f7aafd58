"""Rendering of API answers: ``table`` for people, ``json`` and ``yaml`` for programs.

``json`` and ``yaml`` print the response body exactly as the API sent it. ``table`` renders
the typed answer: lists as aligned columns, single objects as ``key: value`` blocks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import click
import msgspec
import yaml

from lakeshore.model import (
    Elasticity,
    Namespace,
    NamespaceQuotas,
    Queue,
    QueueDetail,
    QueueEvent,
    QueueStats,
    Token,
    TokenCreated,
    Worker,
    WorkerResources,
    describe_capacity,
)

FORMATS = ("table", "json", "yaml")
_NONE = "-"
#: A duration of a minute or more shows its largest unit and the next one.
_UNITS = (("d", 86400), ("h", 3600), ("m", 60))


def emit(fmt: str, body: Any, table: Callable[[], str]) -> None:
    """Print one answer on stdout: ``body`` for json/yaml, ``table()`` otherwise."""
    if fmt == "json":
        click.echo(json.dumps(body, indent=2, ensure_ascii=False))
    elif fmt == "yaml":
        click.echo(yaml.safe_dump(body, sort_keys=False, allow_unicode=True), nl=False)
    else:
        click.echo(table())


# ---- primitives -----------------------------------------------------------------------


def cell(value: Any) -> str:
    """One value as table text: ``-`` for null, ``[a, b]`` for lists, ISO times to seconds."""
    if value is None:
        return _NONE
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return "[" + ", ".join(cell(v) for v in value) + "]"
    if isinstance(value, dict):
        return _json(value)
    return str(value)


def duration(seconds: float | None) -> str | None:
    """Seconds as people read them: ``12.3ms``, ``1.75s``, ``42s``, ``2m03s``, ``2h05m``,
    ``3d04h`` (three significant digits under ten seconds); ``None`` stays ``None``."""
    if seconds is None:
        return None
    seconds = max(seconds, 0.0)
    if seconds < 0.9995:  # above, three digits of milliseconds round to a second
        return f"{seconds * 1000:.3g}ms" if seconds else "0s"
    if seconds < 10:
        return f"{seconds:.3g}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    for (unit, size), (small, small_size) in zip(_UNITS, (*_UNITS[1:], ("s", 1)), strict=True):
        if whole >= size:
            return f"{whole // size}{unit}{whole % size // small_size:02d}{small}"
    raise AssertionError("unreachable: a minute or more has a unit")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Aligned columns separated by two spaces; the last column is not padded."""
    lines = [list(headers), *([cell(v) for v in row] for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join(
        "  ".join(text.ljust(w) for text, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def block(pairs: Iterable[tuple[str, Any]]) -> str:
    """``key: value`` lines with the values aligned."""
    texts = [(k, cell(v)) for k, v in pairs]
    width = max(len(k) for k, _ in texts) + 1
    return "\n".join(f"{k + ':':<{width}} {v}".rstrip() for k, v in texts)


def _elasticity(e: Elasticity) -> str:
    if e.kind == "fixed":
        return "fixed"
    return f"{e.kind} {e.min}..{e.max}"


# ---- queues ---------------------------------------------------------------------------

_QUEUE_COLUMNS = ("NAMESPACE", "NAME", "KIND", "STATE", "ELASTICITY", "MAX_DEPTH", "DESCRIPTION")


def queues(rows: list[Queue]) -> str:
    return table(
        _QUEUE_COLUMNS,
        (
            (
                q.namespace,
                q.name,
                q.kind,
                q.state,
                _elasticity(q.elasticity),
                q.max_depth,
                q.description,
            )
            for q in rows
        ),
    )


def queue(q: Queue) -> str:
    return queues([q])


def queue_detail(q: QueueDetail) -> str:
    """The row as ``key: value``, its elasticity object indented, then the members."""
    row = msgspec.structs.asdict(q)
    elasticity = msgspec.structs.asdict(row.pop("elasticity"))
    del row["members"]
    lines = [block([*row.items(), ("elasticity", "")]), _indent(block(elasticity.items()))]
    if not q.members:
        return "\n".join([*lines, "members: (none)"])
    members = table(
        ("ID", "NAME", "STATUS", "QUEUES", "CURRENT", "LAST_HEARTBEAT"),
        ((m.id, m.name, m.status, m.queues, m.current, m.last_heartbeat) for m in q.members),
    )
    return "\n".join([*lines, f"members: {len(q.members)}", _indent(members)])


def queue_stats(s: QueueStats) -> str:
    """The snapshot as ``key: value``; times (the ``_s`` fields) in human units, their
    keys without the suffix (``wait_p50: 1.75s``; ``-o json`` has the seconds)."""
    return block(
        (k.removesuffix("_s"), duration(v)) if k.endswith("_s") else (k, v)
        for k, v in msgspec.structs.asdict(s).items()
    )


def queue_events(events: list[QueueEvent], verbose: bool) -> str:
    headers = ("TIME", "TYPE", "ACTOR", *(("DETAIL",) if verbose else ()))
    return table(
        headers,
        (
            (e.ts, e.type, e.actor or "system", *((_detail(e.detail),) if verbose else ()))
            for e in events
        ),
    )


#: Detail keys shown after a controller decision's reason (everything is in ``-o json``).
_FACTS = ("workers", "name", "lost_name", "by_name", "until", "exit_code")


def _detail(detail: dict[str, Any] | None) -> str:
    """An event's detail; a before/after pair of rows shrinks to the fields that changed,
    and a decision (a detail with a ``reason``) reads as its reason, facts, then inputs."""
    if isinstance(detail, dict) and isinstance(detail.get("reason"), str):
        facts = [f"{k}={cell(detail[k])}" for k in _FACTS if detail.get(k) is not None]
        inputs = [f"inputs {_json(detail['inputs'])}"] if detail.get("inputs") else []
        return "; ".join([detail["reason"], *facts, *inputs])
    before, after = (detail or {}).get("before"), (detail or {}).get("after")
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return cell(detail)
    old, new = _flat(before), _flat(after)
    changed = [
        f"{k}: {_json(old.get(k))} -> {_json(new.get(k))}"
        for k in dict.fromkeys([*old, *new])
        if old.get(k) != new.get(k) and k != "updated_at"
    ]
    return "; ".join(changed) or "(no change)"


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects as dotted keys: ``{"elasticity.max": 4, …}``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def queue_deleted(body: dict[str, Any]) -> str:
    line = f"deleted queue {body['deleted']!r} from namespace {body['namespace']!r}"
    scrubbed = body.get("scrubbed") or []
    return line + (f"; removed it from {cell(scrubbed)}" if scrubbed else "")


# ---- workers, namespaces, tokens --------------------------------------------------------


def workers(rows: list[Worker]) -> str:
    columns = ("NAME", "ID", "STATUS", "QUEUES", "GPUS", "PROVIDER", "MANAGED", "CURRENT",
               "LAST_HEARTBEAT")  # fmt: skip
    return table(
        columns,
        (
            (
                w.name,
                w.id,
                w.status,
                w.queues,
                gpus_used(w),
                w.provider,
                w.managed,
                w.current,
                w.last_heartbeat,
            )  # fmt: skip
            for w in rows
        ),
    )


def gpus_used(w: Worker) -> str | None:
    """``3/4 H100`` (in use / total, and their type); ``-`` without GPUs."""
    if w.resources is None:
        return None
    total, free = w.resources.total.gpus, w.resources.free.gpus
    if not total:
        return "-"
    kinds = sorted({g.name for g in total if g.name})
    return f"{len(total) - len(free)}/{len(total)}" + (f" {'/'.join(kinds)}" if kinds else "")


def worker(w: Worker) -> str:
    pairs = msgspec.structs.asdict(w)
    # A membership edit's answer also has ``warnings``; the command prints them on stderr.
    pairs.pop("warnings", None)
    if not w.queues:
        # The empty list is how the API spells the default queue; say so for people.
        pairs["queues"] = "[]  (the default queue)"
    if pairs.get("launched_with") is None:
        pairs.pop("launched_with", None)
    resources: WorkerResources | None = pairs.pop("resources", None)
    if resources is not None:
        pairs["resources"] = describe_capacity(resources.total)
        pairs["free"] = describe_capacity(resources.free)
    text = block(pairs.items())
    if resources is not None and resources.total.gpus:
        text += "\n\n" + _gpu_rows(resources)
    return text


def _gpu_rows(r: WorkerResources) -> str:
    """One row per GPU of the daemon, free or in use."""
    free = {g.index for g in r.free.gpus}
    rows = (
        (
            g.index,
            g.name or "(declared)",
            g.uuid or None,
            None if g.memory_mib is None else f"{g.memory_mib} MiB",
            "free" if g.index in free else "in use",
        )  # fmt: skip
        for g in r.total.gpus
    )
    return table(("GPU", "NAME", "UUID", "MEMORY", "STATE"), rows)


def namespaces(rows: list[Namespace]) -> str:
    return table(("NAME", "ORG", "CREATED_AT"), ((n.name, n.org, n.created_at) for n in rows))


def namespace(n: Namespace) -> str:
    """The namespace's fields, then its quotas (``GET``: limit and usage) as a table."""
    fields = msgspec.structs.asdict(n)
    quotas: NamespaceQuotas | None = fields.pop("quotas", None)
    text = block(fields.items())
    if quotas is None:
        return text
    rows = ((name, use.limit, use.used) for name, use in msgspec.structs.asdict(quotas).items())
    return text + "\n\n" + table(("QUOTA", "LIMIT", "USED"), rows)


def tokens(rows: list[Token]) -> str:
    return table(
        ("ID", "NAMESPACE", "ADMIN", "CREATED_AT", "DESCRIPTION"),
        ((t.id, t.namespace, t.admin, t.created_at, t.description) for t in rows),
    )


def token(t: Token) -> str:
    return block(msgspec.structs.asdict(t).items())


def token_created(t: TokenCreated) -> str:
    return token(t) + "\n\nthe token is shown only once: store it now."


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.split("\n"))
