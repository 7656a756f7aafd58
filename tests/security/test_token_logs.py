"""No token in any log line: a client that puts its token where NATS expects a user name
is refused, and neither the control plane's auth callout nor the embedded nats-server's
log (read through :mod:`lakeshore.embedded`) writes that name in clear."""

from __future__ import annotations

import logging

import nats.errors
import pytest
from nats.aio.client import Client as NatsClient
from polling import eventually

from lakeshore.security.grants import PRODUCER_USER

WAIT_S = 15.0
NS = "default"


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every record as a handler would write it: message, and a traceback's text."""
    return [r.getMessage() + (r.exc_text or "") for r in caplog.records]


@pytest.mark.parametrize("shape", ["bare", "as-nonce"])
async def test_a_token_sent_as_the_nats_user_is_in_no_log_record(
    control_plane, api, caplog: pytest.LogCaptureFixture, shape: str
) -> None:
    caplog.set_level(logging.DEBUG)
    created = (await api.post(f"/v1/namespaces/{NS}/tokens", {"description": "leak"}))[1]
    token = created["token"]
    # As the user name itself, or as a producer's nonce (a token fits its pattern) with a
    # password that is not a token: refused either way.
    user = token if shape == "bare" else f"{PRODUCER_USER}/{token}"
    nc = NatsClient()
    try:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nc.connect(
                control_plane.plane.nats_url, user=user, password="wrong", allow_reconnect=False
            )
    finally:
        await nc.close()

    # The server's own line about the refusal comes through the embedded server's log.
    server_said = await eventually(
        lambda: [m for m in _said(caplog) if "nats-server[" in m and "authentication error" in m],
        timeout_s=WAIT_S,
        what="nats-server's authentication error in the log",
    )
    refused = [m for m in _said(caplog) if m.startswith("nats: refused ")]
    assert refused, _said(caplog)
    assert all(token not in m for m in _said(caplog)), [m for m in _said(caplog) if token in m]
    expected = "an unknown user" if shape == "bare" else "a producer"
    assert f"nats: refused {expected} from" in refused[0]
    shown = '"[redacted]"' if shape == "bare" else '"producer/[redacted]"'
    assert shown in server_said[0]
