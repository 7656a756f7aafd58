"""Building and checking a queue's elasticity object (spec/elasticity.md).

The rules that are more than a field's own type or range live here, so that a create and
a PATCH give the same answer for the same object.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lakeshore.errors import Invalid
from lakeshore.model import Elasticity, ElasticityKind, validate_name

#: The default ``min`` per kind when the object does not give one.
_DEFAULT_MIN = {ElasticityKind.ELASTIC: 1}


def build(fields: dict[str, Any]) -> Elasticity:
    """Build a complete elasticity object from a partial one and check it.

    Omitted fields take their defaults for the kind (``elastic`` defaults ``min`` to 1).

    Raises:
        Invalid: a field has the wrong type or range, is unknown, or the combination is
            inconsistent; the message names the field as ``$.elasticity.<field>``.
    """
    fields = dict(fields)
    unknown = sorted(set(fields) - set(Elasticity.__struct_fields__))
    if unknown:
        known = ", ".join(Elasticity.__struct_fields__)
        raise Invalid(f"unknown elasticity field(s) {', '.join(unknown)}; known fields: {known}")
    try:
        kind = ElasticityKind(fields.get("kind", ElasticityKind.FIXED))
    except ValueError:
        choices = ", ".join(k.value for k in ElasticityKind)
        raise Invalid(
            f"unknown elasticity kind {fields.get('kind')!r}; use one of {choices}"
        ) from None
    fields.setdefault("min", _DEFAULT_MIN.get(kind, 0))
    try:
        elasticity = msgspec.convert(fields, Elasticity)
    except msgspec.ValidationError as e:
        raise Invalid(str(e).replace("`$", "`$.elasticity")) from None
    check(elasticity)
    return elasticity


def merge(current: Elasticity, patch: dict[str, Any]) -> Elasticity:
    """Apply a PATCH of the elasticity object: given fields replace, others are kept.

    When the kind changes and the patch gives no ``min``, the new kind's default ``min``
    applies (a fixed queue's 0 would otherwise make every ``elastic`` patch fail).
    """
    merged = msgspec.structs.asdict(current)
    if "kind" in patch and patch["kind"] != current.kind and "min" not in patch:
        merged.pop("min")
    merged.update(patch)
    return build(merged)


def check(e: Elasticity) -> None:
    """Reject combinations the controller could not honour.

    Raises:
        Invalid: with the offending values and the fix.
    """
    if e.max < e.min:
        raise Invalid(f"elasticity max ({e.max}) must be ≥ min ({e.min})")
    if e.kind is ElasticityKind.ELASTIC and e.min < 1:
        raise Invalid(
            f"elasticity kind 'elastic' keeps at least one daemon: min must be ≥ 1 (got "
            f"{e.min}); use 'fully_elastic' to scale to zero"
        )
    if e.kind is not ElasticityKind.FIXED and e.max < 1:
        raise Invalid(
            f"elasticity kind {e.kind.value!r} needs max ≥ 1: give the most daemons the "
            "controller may run (CLI: --max N; HTTP: elasticity.max)"
        )
    if e.pool is not None:
        validate_name("pool", e.pool)
    for label in e.match:
        if not label:
            raise Invalid("elasticity match labels must be non-empty strings")
