"""Row images: the messages of the state log (see :mod:`lakeshore.store.images`)."""

from __future__ import annotations

from typing import Any

import msgspec


class Image(msgspec.Struct, frozen=True, array_like=True):
    """One row as it is after a change; ``row`` is ``None`` when it was deleted."""

    kind: str
    """What the row is: a key of :data:`lakeshore.store.images.TABLES` (``queue``, ``worker``…)."""
    key: tuple[str | int | None, ...]
    """The values of the table's key columns."""
    row: dict[str, Any] | None
    """Every column's value (JSON columns as their text), or ``None``: deleted."""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Image)


def encode(image: Image) -> bytes:
    return _encoder.encode(image)


def decode(data: bytes) -> Image:
    """Raises ``msgspec.DecodeError`` / ``ValidationError`` on a foreign message."""
    return _decoder.decode(data)
