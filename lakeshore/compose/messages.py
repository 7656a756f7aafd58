"""What a problem of a compose file says: msgspec's validation errors made readable.

msgspec reports one error as ``<what> - at `$.path` `` (a mapping's key as ``[...]``, a
bad key as ``at `key` in `$.path` ``). :func:`explain` turns that into the path of the
offending value within the converted one (so that its mark can be found) and a message
that says what to write instead: the known keys for an unknown one, the choices of an
enum, the name rules for a name.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, NamedTuple

import msgspec.inspect as mi

from lakeshore.compose.marks import Path
from lakeshore.errors import InvalidName
from lakeshore.model import validate_name

_AT = re.compile(r"^(?P<what>.*?)(?: - at `(?P<path>[^`]*)`(?: in `(?P<outer>[^`]*)`)?)?$")
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


class Explained(NamedTuple):
    """Where the problem is (relative to the converted value) and what it is."""

    path: Path
    message: str
    #: the place is a mapping key (an unknown field), not a value
    key: bool = False


def explain(error: str, value: Any, type_: Any, what: str, outer: Path = ()) -> Explained:
    """Make msgspec's ``error`` (converting ``value`` to ``type_``) readable.

    Args:
        what: the entry, e.g. ``queue cpu-prep`` (the message starts with it).
        outer: the path of ``value`` within the entry (shown in the message).
    """
    found = _AT.match(error)
    assert found is not None  # the pattern matches any text
    message, at = found.group("what"), found.group("outer") or found.group("path") or "$"
    rel: list[str | int] = []
    for field, index in _SEGMENT.findall(at):
        if index == "...":
            break  # msgspec does not say which key of a mapping: point at the mapping
        rel.append(field if field else int(index))
    target = _type_at(type_, rel)
    shown = (*outer, *rel)
    unknown = re.match(r"Object contains unknown field `(.*)`", message)
    if unknown:
        known = fields_of(target) if isinstance(target, type) else ()
        where = " ".join([what or "this object", dotted(shown)]).strip()
        return Explained(
            (*rel, unknown.group(1)), unknown_key(unknown.group(1), known, where), True
        )
    label = ": ".join(x for x in (what, dotted(shown)) if x)
    missing = re.match(r"Object missing required field `(.*)`", message)
    if missing:
        return Explained(tuple(rel), f"{label}: `{missing.group(1)}` is required")
    if found.group("outer"):
        label += " (a key)"
    got = _at(value, rel)
    if "matching regex" in message and isinstance(got, str) and not found.group("outer"):
        named = [s for s in shown if isinstance(s, str)]
        try:
            validate_name(named[-1].removesuffix("s") if named else "name", got)
        except InvalidName as e:
            message = e.message
    elif message.startswith("Invalid enum value") and isinstance(target, mi.EnumType):
        message += f"; use one of {', '.join(str(m.value) for m in target.cls)}"
    elif message.startswith("Expected `object`, got `null`"):
        message += " (write {} for all the defaults)"
    text = message[:1].lower() + message[1:]
    return Explained(tuple(rel), f"{label}: {text}" if label else text)


def unknown_key(key: str, known: tuple[str, ...], where: str) -> str:
    """``unknown key 'x' in <where>: did you mean 'y'? known keys: …``"""
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key {key!r} in {where}: {hint}known keys: {', '.join(known)}"


def dotted(path: Path) -> str:
    """``a.b[2].c``"""
    return "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path).lstrip(".")


def fields_of(struct: Any) -> tuple[str, ...]:
    """A Struct class's field names (``()`` for anything else)."""
    return tuple(getattr(struct, "__struct_fields__", ()))


def kind_of(value: Any) -> str:
    """What a YAML value is, for a message: ``a list``, ``int 3``, ``nothing (null)``."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def _type_at(type_: Any, rel: list[str | int]) -> Any:
    """The msgspec type info at ``rel`` within ``type_`` (a Struct's class for a Struct)."""
    info = _unwrap(mi.type_info(type_))
    for step in rel:
        if isinstance(info, mi.StructType):
            info = next((f.type for f in info.fields if f.name == step), None)
        elif isinstance(info, mi.DictType):
            info = info.value_type
        elif isinstance(info, mi.ListType):
            info = info.item_type
        else:
            return None
        info = _unwrap(info)
    return info.cls if isinstance(info, mi.StructType) else info


def _unwrap(info: Any) -> Any:
    """A type info without its metadata, and a union as its first type other than null."""
    while isinstance(info, mi.Metadata | mi.UnionType):
        if isinstance(info, mi.Metadata):
            info = info.type
        else:
            info = next((t for t in info.types if not isinstance(t, mi.NoneType)), None)
    return info


def _at(value: Any, rel: list[str | int]) -> Any:
    for step in rel:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return None
    return value


__all__ = ["Explained", "dotted", "explain", "fields_of", "kind_of", "unknown_key"]
