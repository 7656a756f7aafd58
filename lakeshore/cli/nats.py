"""``lakeshore nats config``: the closed bus for an operator's NATS cluster."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def nats() -> None:
    """The NATS side of Lakeshore (for a cluster you run; the embedded one needs nothing)."""


@nats.command("config")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory to write the secrets and config snippets into (created 0700).",
)
@click.option(
    "--tls-host",
    "tls_hosts",
    multiple=True,
    metavar="HOST",
    help="A name or address clients reach the nodes by (repeatable); adds a CA and server "
    "certificate and tls.conf. Without it the nodes speak plain text (loopback only!).",
)
@click.option(
    "--mount",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the NATS servers see --out, for the paths in tls.conf [default: --out].",
)
def config(out: Path, tls_hosts: tuple[str, ...], mount: Path | None) -> None:
    """Write the control plane's NATS secrets and what every NATS node includes.

    Every node's config gets `include auth.conf` (and `include tls.conf`); the control plane
    runs with `--nats-url … --nats-auth-file OUT/nats-auth.json` (and `--nats-ca-file
    OUT/tls/ca.pem`). Running it again keeps the secrets and the CA.
    """
    from lakeshore.security.natsd import write_cluster_files

    files = write_cluster_files(out, list(tls_hosts), mount)
    click.echo(f"control plane secrets: {files.secrets}  (--nats-auth-file; keep it private)")
    click.echo(f"include in every node: {files.auth_conf}")
    if files.tls_conf is not None:
        click.echo(f"include in every node: {files.tls_conf}")
        click.echo(f"CA clients verify with: {files.ca}  (--nats-ca-file)")
