"""The production shape: deploy/nats/*.conf as a 3-node JetStream cluster, queues at R3,
with the closed bus on: ``lakeshore nats config`` writes the secrets and TLS files every node
includes, the control plane authenticates with them and speaks TLS."""

from __future__ import annotations

import asyncio

import natsauth
import pytest
from nats_cluster import start_cluster
from polling import eventually

from lakeshore.actors.directory import CreateQueue
from lakeshore.config import ServerSettings
from lakeshore.errors import Unavailable
from lakeshore.model import QueueCreate
from lakeshore.plane import ControlPlane

# nats-py upgrades a connection to TLS over a plain stream writer that it never closes when
# a node's loss cuts the connection mid-handshake; pytest reports the writer when the
# garbage collector finds it, whichever test runs then. Nothing here depends on it.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


async def test_deploy_cluster_serves_r3_queues_through_a_node_loss(nats_server_factory, tmp_path):
    cluster = await start_cluster(nats_server_factory, tmp_path)
    nodes, files = cluster.nodes, cluster.files
    assert files.ca is not None
    url = ",".join(n.url for n in nodes)
    # Plain text is refused: every node speaks TLS only.
    for node in nodes:
        info, answer = await natsauth.plain_text_answer("127.0.0.1", node.port)
        assert b'"tls_required":true' in info and b"PONG" not in answer
    settings = ServerSettings(
        data_dir=tmp_path / "plane",
        port=0,
        nats_url=url,
        replicas=3,
        nats_auth_file=files.secrets,
        nats_ca_file=files.ca,
    )

    async def started() -> ControlPlane:
        # Unavailable: no JetStream meta leader yet, the cluster is still electing one.
        plane = ControlPlane(settings)
        await plane.start()
        return plane

    plane = await eventually(
        started,
        retry_on=(Unavailable,),
        timeout_s=60,
        every_s=0.2,
        what="a control plane started on the cluster",
    )
    try:
        await plane.parts.directory.ask(CreateQueue("default", QueueCreate(name="train"), None))
        nc = await natsauth.plane_nats(url, ca_pem=files.ca.read_text())
        js = nc.jetstream()
        si = await js.stream_info("LS_default_train")
        assert si.config.num_replicas == 3 and len(si.cluster.replicas) == 2
        for i in range(20):
            await js.publish("ls.default.q.train.p0", b"%d" % i, headers={"Nats-Msg-Id": str(i)})
        leader = si.cluster.leader
        [victim] = [n for n in nodes if f"test-{nodes.index(n) + 1}" == leader] or nodes[:1]
        await victim.kill()
        # One bound of 30 s for both waits.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        await eventually(
            lambda: js.publish(
                "ls.default.q.train.p0", b"after", headers={"Nats-Msg-Id": "after"}, timeout=2
            ),
            retry_on=(Exception,),
            timeout_s=30,
            every_s=0.2,
            what="a publish accepted after the leader's loss",
        )
        await eventually(
            lambda: js.stream_info("LS_default_train"),
            until=lambda si: si.state.messages == 21,
            timeout_s=deadline - loop.time(),
            every_s=0.1,
            what="21 messages in LS_default_train",
        )
        await nc.close()
    finally:
        await plane.stop()
