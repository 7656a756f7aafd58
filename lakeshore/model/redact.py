"""Secrets of an invocation: the values of its ``env`` are shown nowhere.

An invocation's ``env`` carries what a command needs and nobody else may read (API keys,
passwords). Its values travel in one place only: the invocation's message on its queue's
stream, which the daemon that runs it reads (NATS permissions guard that stream). They are
in no API answer, no lifecycle event and so no history row, and no log line; the keys may
appear.

The events and the answers are built from named fields, and ``env`` is none of them: a
``submitted`` event's detail lists the fields it keeps, and :class:`~lakeshore.model.Job`
has no ``env``. What remains is the ``repr`` of the Structs that hold an ``env``
(:class:`~lakeshore.model.InvocationSubmit`, :class:`~lakeshore.model.Invocation`) and of
everything that contains them (an actor's ``Submit`` message, which the runtime logs when
the actor crashes on it): their ``__repr__`` and ``__rich_repr__`` are
:func:`redacted_repr` and :func:`redacted_fields`, which mask the values with
:func:`masked_env`, the one function that masks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from msgspec import Struct

#: What an ``env`` value is shown as.
MASK = "***"


def masked_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with every value replaced by :data:`MASK`; the keys are kept, in order."""
    return dict.fromkeys(env, MASK)


def redacted_fields(struct: Struct) -> Iterator[tuple[str, Any]]:
    """``(name, value)`` of every field of ``struct``, an ``env`` field's values masked.

    The ``__rich_repr__`` of a Struct with an ``env`` (rich pretty-prints it this way).
    """
    for name in struct.__struct_fields__:
        value = getattr(struct, name)
        yield name, masked_env(value) if name == "env" else value


def redacted_repr(struct: Struct) -> str:
    """The ``__repr__`` of a Struct with an ``env``: msgspec's, the ``env`` values masked.

    Logs and error messages show Structs (and the messages that contain them) by ``repr``;
    the wire encoding is untouched, so the daemon still receives the values.
    """
    shown = ", ".join(f"{name}={value!r}" for name, value in redacted_fields(struct))
    return f"{type(struct).__name__}({shown})"


__all__ = ["MASK", "masked_env", "redacted_fields", "redacted_repr"]
