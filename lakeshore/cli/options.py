"""Option values that several commands parse alike: repeatable ``KEY=VALUE`` pairs
(``--label``, ``--env``) and provider settings (``--config``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click


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


def settings(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, Any]:
    """The ``callback`` of ``--config KEY=VALUE``: a value that starts with ``[`` or ``{`` is
    a YAML flow list or mapping (``hosts=[gpu1, gpu2]``), any other a string (a provider
    converts ``port=2222`` to the number it needs).

    Raises:
        click.BadParameter: not ``KEY=VALUE``, or a list or mapping that does not parse.
    """
    import yaml

    out: dict[str, Any] = {}
    for key, text in key_values(value, ctx, param).items():
        if not text.startswith(("[", "{")):
            out[key] = text
            continue
        try:
            out[key] = yaml.safe_load(text)
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None) or "not a YAML list or mapping"
            raise click.BadParameter(
                f"{key}={text}: {problem} (write a list as [a, b] and a mapping as {{k: v}})",
                ctx,
                param,
            ) from None
    return out


def key_value_pairs(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> dict[str, str]:
    """The ``callback`` of a ``multiple=True`` option of ``KEY=VALUE`` items: their dict, as
    :func:`key_values` makes it."""
    return key_values(value, ctx, param)


__all__ = ["key_value_pairs", "key_values", "settings"]
