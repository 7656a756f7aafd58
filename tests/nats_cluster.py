"""deploy/nats/*.conf as a 3-node JetStream cluster on loopback (the production shape, with
the closed bus and TLS), for the tests that lose nodes."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import natsauth
from polling import eventually

from lakeshore.embedded import NatsServer

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
CONFS = sorted((DEPLOY / "nats").glob("n*.conf"))


#: ``await start(store_dir=None, port=0, extra_args=(), config_file=None)``: a started node.
NatsServerFactory = Callable[..., Awaitable[NatsServer]]


@contextlib.asynccontextmanager
async def nats_nodes(tmp: Path) -> AsyncIterator[NatsServerFactory]:
    """Start nats-servers (each stopped on exit): the ``nats_server_factory`` fixture, and
    bench/failover.py's nodes.

    Pass the ``store_dir`` and ``port`` of a stopped server to restart it with its data. The
    config defaults to the session's closed bus; a cluster node's own includes it.
    """
    async with contextlib.AsyncExitStack() as stack:
        count = 0

        async def start(
            store_dir: Path | None = None,
            port: int = 0,
            extra_args: Sequence[str] = (),
            config_file: Path | None = None,
        ) -> NatsServer:
            nonlocal count
            count += 1
            store = store_dir or tmp / f"nats-{count}"
            config = config_file or natsauth.server_config(tmp / f"nats-{count}.conf")
            server = NatsServer(
                store, config_file=config, port=port, server_name=f"test-{count}",
                extra_args=extra_args,
            )  # fmt: skip
            stack.push_async_callback(server.stop)
            await server.start()
            return server

        yield start


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_conf(conf: Path, tmp: Path, cluster_ports: list[int], index: int) -> Path:
    """The deploy config with loopback addresses, free ports and a temporary store."""
    text = conf.read_text()
    # The store comes from -sd (the launcher's flag), which may not be given twice.
    text = text.replace("store_dir: /data/nats\n", "")
    text = re.sub(r"listen: 0\.0\.0\.0:6222", f"listen: 127.0.0.1:{cluster_ports[index]}", text)
    text = re.sub(r"http: .*\n", "", text)
    for i, port in enumerate(cluster_ports):
        text = text.replace(f"nats-route://nats-{i + 1}:6222", f"nats-route://127.0.0.1:{port}")
    out = tmp / conf.name
    out.write_text(text)
    return out


@dataclass
class Cluster:
    nodes: list[Any]
    #: every node's client URL, comma-separated
    url: str
    files: Any
    confs: list[Path]
    stores: list[Path]

    def node_named(self, server_name: str) -> Any:
        """The node JetStream calls ``server_name`` (``test-<n>``, its start order)."""
        return self.nodes[int(server_name.rsplit("-", 1)[1]) - 1]


async def start_cluster(nats_server_factory: Any, tmp: Path) -> Cluster:
    """Three nodes of the deploy configs, each with its own store, JetStream ready."""
    assert len(CONFS) == 3
    files = natsauth.cluster_files(tmp / "secrets")
    cluster_ports = [free_port() for _ in CONFS]
    confs = [local_conf(c, tmp, cluster_ports, i) for i, c in enumerate(CONFS)]
    stores = [tmp / f"store-{i}" for i in range(len(confs))]
    nodes = await asyncio.gather(
        *(
            nats_server_factory(store_dir=s, config_file=c)
            for s, c in zip(stores, confs, strict=True)
        )
    )
    cluster = Cluster(list(nodes), ",".join(n.url for n in nodes), files, confs, stores)
    nc = await natsauth.plane_nats(cluster.url, ca_pem=files.ca.read_text())
    try:
        await eventually(
            lambda: nc.jetstream().account_info(),
            retry_on=(Exception,),
            timeout_s=60,
            every_s=0.2,
            what="a JetStream meta leader in the cluster",
        )
    finally:
        await nc.close()
    return cluster
