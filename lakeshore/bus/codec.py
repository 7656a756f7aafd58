"""The one wire codec: msgspec JSON, with a decoder built once per type."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

_encoder = msgspec.json.Encoder()
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def decode(data: bytes, type_: type[T]) -> T:
    """Decode ``data`` as ``type_``.

    Raises:
        msgspec.ValidationError / msgspec.DecodeError: the payload does not match.
    """
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    return decoder.decode(data)
