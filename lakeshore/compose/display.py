"""A plan as people read it: a header per namespace, then one line per change (a patch:
one line per field), each starting with its symbol (``+ ~ - ! ?``).

    namespace default (project demo)
      + provider my-gpu (ssh)
      + queue training-h100 (priority, elastic 1..8 on my-gpu pool gpu)
      ~ queue cpu-prep: max_depth: 500 → 1000
      + daemons prep: launch prep-00 prep-01 on local
      ? unmanaged queue scratch
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from lakeshore.compose.changes import SYMBOLS, Change, Op, Plan

_INDENT = "  "
#: How a count of each op reads in the last line of ``diff``.
_COUNTED = {
    Op.CREATE: "to create",
    Op.PATCH: "to change",
    Op.REMOVE: "to remove",
    Op.CANNOT: "cannot be applied",
}


def header(namespace: str, project: str) -> str:
    return f"namespace {namespace} (project {project})"


def change_lines(change: Change) -> list[str]:
    """The change's lines, without indentation."""
    symbol = SYMBOLS[change.op]
    if change.op in (Op.UNMANAGED, Op.ORPHAN):
        line = f"{symbol} {change.op} {change.subject} {change.name}"
        return [line + (f" ({change.summary})" if change.summary else "")]
    head = f"{symbol} {change.subject} {change.name}"
    if not change.fields:
        if change.op is Op.CREATE and change.subject in ("provider", "queue"):
            return [f"{head} ({change.summary})"]
        return [f"{head}: {change.summary}" if change.summary else head]
    lines = [f"{head}: {f.field}: {value(f.old)} → {value(f.new)}" for f in change.fields]
    if change.op is Op.CANNOT:
        return [*lines, f"{_INDENT}{_INDENT}{change.summary}"]
    if change.summary:
        lines = [f"{head}: {change.summary} ({line.split(': ', 1)[1]})" for line in lines]
    return lines


def value(v: Any) -> str:
    """A field's value: JSON, as in the file (``null``, ``"text"``, ``{"gpu": "h100"}``)."""
    return json.dumps(v, ensure_ascii=False, default=str)


def plan_text(plan: Plan) -> str:
    """The whole plan (``compose diff``): a header per namespace and its lines (``in sync``
    when it has none), then how many changes are pending, if any."""
    out = []
    for ns in plan.namespaces:
        out.append(header(ns, plan.project))
        mine = [c for c in plan.changes if c.namespace == ns]
        lines = [line for c in mine for line in change_lines(c)]
        out += [_INDENT + line for line in lines] or [f"{_INDENT}in sync"]
    if plan.pending:
        out.append(counts(plan))
    return "\n".join(out)


def counts(plan: Plan) -> str:
    """``2 to create, 1 to change`` (what is only shown, ``?``, is not counted)."""
    n = Counter(c.op for c in plan.changes)
    parts = [f"{n[op]} {text}" for op, text in _COUNTED.items() if n[op]]
    return ", ".join(parts) if parts else "in sync: no changes"


__all__ = ["change_lines", "counts", "header", "plan_text", "value"]
