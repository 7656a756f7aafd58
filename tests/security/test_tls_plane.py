"""``lakeshore server --nats-host`` beyond loopback: the embedded NATS speaks TLS only, with
a CA generated into the data dir, and a daemon that joins gets the CA and runs over TLS."""

from __future__ import annotations

import msgspec
import natsauth
import pytest

from lakeshore.daemon import DaemonSettings
from lakeshore.model import DaemonAccess

from . import running

# nats-py upgrades a connection to TLS over a plain stream writer that it never closes when
# a node's loss cuts the connection mid-handshake; pytest reports the writer when the
# garbage collector finds it, whichever test runs then. Nothing here depends on it.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

WAIT_S = 15.0


async def test_beyond_loopback_nats_is_tls_only_and_a_joined_daemon_uses_it(plane_factory):
    handle = await plane_factory(
        nats_url=None, nats_auth_file=None, nats_host="0.0.0.0", nats_port=0
    )
    plane = handle.plane
    assert (handle.data_dir / "tls" / "ca.pem").is_file()
    port = int(plane.nats_url.rsplit(":", 1)[1])
    info, answer = await natsauth.plain_text_answer("127.0.0.1", port)
    assert b'"tls_required":true' in info and b"PONG" not in answer

    async with handle.client() as api:
        status, body = await api.post("/v1/namespaces/default/daemons/join", {})
        assert status == 200, body
        access = msgspec.convert(body, DaemonAccess)
        assert access.ca_pem == (handle.data_dir / "tls" / "ca.pem").read_text()
        # The advertised URL names this host; the test reaches it on loopback, as a daemon
        # given `--nats-url` would (the certificate names 127.0.0.1 too).
        access = msgspec.structs.replace(access, nats_url=plane.nats_url)
        settings = DaemonSettings(access=access, name="over-tls", heartbeat_s=0.2)
        async with running.daemon(settings):
            job = await running.submit(api, "default", {"command": ["true"]})
            await running.reaches(api, job, "succeeded")
