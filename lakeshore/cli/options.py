"""Option values that several commands parse alike: repeatable ``KEY=VALUE`` pairs
(``--label``, ``--env``), provider settings (``--config``) and what a daemon is told it has
(``--gpus``, ``--memory``)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import click

from lakeshore.errors import LakeshoreError
from lakeshore.model import memory_bytes
from lakeshore.model.resources import parse_gpus


def key_values(
    items: Iterable[str],
    ctx: click.Context | None = None,
    param: click.Parameter | None = None,
    *,
    param_hint: str | None = None,
    secret: bool = False,
) -> dict[str, str]:
    """``KEY=VALUE`` items as a dict: a value is everything after the first ``=`` (possibly
    empty), and a repeated key keeps its last value.

    The option is named in an error by ``param`` (within ``ctx``), or by ``param_hint``
    when the items are checked after click has parsed them.

    Args:
        secret: the values are secrets (``--env``): an error does not show the item, which
            may be a value given without its key.

    Raises:
        click.BadParameter: an item without ``=`` or with an empty key; click reports it as
            a usage error (exit 2) naming the option and the expected ``KEY=VALUE`` form.
    """
    pairs = {}
    for i, item in enumerate(items, 1):
        key, sep, value = item.partition("=")
        if not sep or not key:
            got = f"item {i} (not shown: it may hold a secret)" if secret else repr(item)
            raise click.BadParameter(f"expected KEY=VALUE, got {got}", ctx, param, param_hint)
        pairs[key] = value
    return pairs


def config_value(text: str) -> Any:
    """One ``--config`` value, typed as a YAML file would type it, but only where that is
    unambiguous: a number (``2222``, ``1.5``, ``-3``, ``1e3``), ``true``/``false``,
    ``null``, a list (``[a, b]``) or a mapping (``{k: v}``, both YAML flow, so JSON too),
    or a JSON string (``"2222"``: a string that would otherwise be a number). Anything else
    is the string as written (``gpu:1``, ``04:00:00``, ``yes``, ``0755``).

    Raises:
        ValueError: a list or mapping that does not parse, or a value that starts with
            ``"`` and is not one JSON string; the message says how to write it.
    """
    import yaml

    if text.startswith(("[", "{")):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None) or "not a YAML list or mapping"
            raise ValueError(
                f"{problem} (write a list as [a, b] and a mapping as {{k: v}})"
            ) from None
    try:
        value = json.loads(text)
    except ValueError:
        if text.startswith('"'):
            raise ValueError(
                "not a JSON string (quote a whole value: K='\"2222\"' is the string 2222)"
            ) from None
        return text
    # ``NaN``, ``Infinity`` and ``1e999`` are JSON to Python, not numbers a provider wants.
    if isinstance(value, float) and not math.isfinite(value):
        return text
    return value


def settings(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, Any]:
    """The ``callback`` of ``--config KEY=VALUE``: each value typed by :func:`config_value`
    (``port=2222`` is the number 2222, ``port='"2222"'`` the string).

    Raises:
        click.BadParameter: not ``KEY=VALUE``, or a value :func:`config_value` refuses.
    """
    out: dict[str, Any] = {}
    for key, text in key_values(value, ctx, param).items():
        try:
            out[key] = config_value(text)
        except ValueError as e:
            raise click.BadParameter(f"{key}={text}: {e}", ctx, param) from None
    return out


def key_value_pairs(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> dict[str, str]:
    """The ``callback`` of a ``multiple=True`` option of ``KEY=VALUE`` items: their dict, as
    :func:`key_values` makes it."""
    return key_values(value, ctx, param)


__all__ = ["config_value", "key_value_pairs", "key_values", "settings"]


def gpus_flag(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--gpus``: refused before anything starts when it is not N, indices or none."""
    if value is not None:
        try:
            parse_gpus(value)
        except LakeshoreError as e:
            raise click.BadParameter(e.message, ctx, param) from None
    return value


def memory_flag(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--memory``: refused before anything starts without a unit."""
    if value is not None:
        try:
            if memory_bytes(value) <= 0:
                raise click.BadParameter(f"{value!r} must be more than 0", ctx, param)
        except LakeshoreError as e:
            why = e.message.replace("resources.memory ", "")
            raise click.BadParameter(why, ctx, param) from None
    return value
