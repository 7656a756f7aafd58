"""Creating the control plane's own JetStream streams."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js import errors as jse
from nats.js.api import StreamConfig, StreamInfo


async def ensure_stream(js: JetStreamContext, cfg: StreamConfig) -> StreamInfo:
    """Create the stream ``cfg`` names, or bring an existing one to ``cfg`` (idempotent)."""
    assert cfg.name is not None
    try:
        await js.stream_info(cfg.name)
        return await js.update_stream(cfg)
    except jse.NotFoundError:
        return await js.add_stream(cfg)
