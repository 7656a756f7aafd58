from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import natsauth
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from lakeshore.errors import Invalid
from lakeshore.security.tls import (
    CA_FILE,
    CA_KEY_FILE,
    SERVER_FILE,
    SERVER_KEY_FILE,
    TlsFiles,
    client_ssl_context,
    default_hosts,
    ensure_server_tls,
)

WAIT_S = 10.0
HOSTS = ["nats.example.com", "10.1.2.3", "2001:db8::7"]


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return (
        set(san.get_values_for_type(x509.DNSName)),
        {str(ip) for ip in san.get_values_for_type(x509.IPAddress)},
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _contents(files: TlsFiles) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in files.ca.parent.iterdir()}


def test_first_call_generates_a_ca_and_a_server_cert_it_signs(tmp_path: Path) -> None:
    before = datetime.now(UTC)
    files = ensure_server_tls(tmp_path / "tls", HOSTS)

    assert files == TlsFiles(
        ca=tmp_path / "tls" / CA_FILE,
        cert=tmp_path / "tls" / SERVER_FILE,
        key=tmp_path / "tls" / SERVER_KEY_FILE,
    )
    ca, server = _cert(files.ca), _cert(files.cert)
    server.verify_directly_issued_by(ca)
    ca.verify_directly_issued_by(ca)

    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)
    assert ca.public_key().curve.name == "secp256r1"
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value == (
        x509.BasicConstraints(ca=True, path_length=0)
    )
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert ca.subject.rfc4514_string() == f"CN=Lakeshore NATS CA ({socket.gethostname()})"
    assert ca.not_valid_after_utc - before > timedelta(days=3650)

    eku = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert server.not_valid_after_utc - server.not_valid_before_utc <= timedelta(days=825)
    assert server.not_valid_after_utc - before > timedelta(days=800)
    assert before - timedelta(minutes=6) < server.not_valid_before_utc < before


def test_server_cert_names_every_host_plus_loopback(tmp_path: Path) -> None:
    files = ensure_server_tls(tmp_path, [*HOSTS, "[fd00::1]", "Upper.Example.COM."])

    dns, ips = _sans(_cert(files.cert))

    assert dns == {"nats.example.com", "upper.example.com", "localhost"}
    assert ips == {"10.1.2.3", "2001:db8::7", "fd00::1", "127.0.0.1", "::1"}


def test_keys_are_0600_and_the_created_directory_0700(tmp_path: Path) -> None:
    files = ensure_server_tls(tmp_path / "data" / "tls", HOSTS)

    assert _mode(files.ca.parent) == 0o700
    assert _mode(files.key) == 0o600
    assert _mode(files.ca.parent / CA_KEY_FILE) == 0o600
    assert sorted(p.name for p in files.ca.parent.iterdir()) == sorted(
        [CA_FILE, CA_KEY_FILE, SERVER_FILE, SERVER_KEY_FILE]
    )


def test_second_call_reuses_the_ca_and_the_server_cert(tmp_path: Path) -> None:
    first = ensure_server_tls(tmp_path, HOSTS)
    written = _contents(first)

    again = ensure_server_tls(tmp_path, HOSTS)
    fewer = ensure_server_tls(tmp_path, HOSTS[:1])

    assert again == first == fewer
    assert _contents(again) == written


def test_new_host_reissues_the_server_cert_from_the_same_ca(tmp_path: Path) -> None:
    first = ensure_server_tls(tmp_path, HOSTS)
    ca_pem, server_pem = first.ca.read_bytes(), first.cert.read_bytes()
    key_pem = first.key.read_bytes()

    second = ensure_server_tls(tmp_path, [*HOSTS, "192.168.7.9"])

    assert second.ca.read_bytes() == ca_pem
    assert second.cert.read_bytes() != server_pem
    assert second.key.read_bytes() != key_pem
    server = _cert(second.cert)
    server.verify_directly_issued_by(_cert(second.ca))
    assert "192.168.7.9" in _sans(server)[1]
    assert _mode(second.key) == 0o600


def test_server_cert_near_expiry_is_reissued(tmp_path: Path) -> None:
    files = ensure_server_tls(tmp_path, HOSTS)
    ca = _cert(files.ca)
    ca_key = serialization.load_pem_private_key(
        (tmp_path / CA_KEY_FILE).read_bytes(), password=None
    )
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    old = _cert(files.cert)
    now = datetime.now(UTC)
    expiring = (
        x509.CertificateBuilder()
        .subject_name(old.subject)
        .issuer_name(ca.subject)
        .public_key(old.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=800))
        .not_valid_after(now + timedelta(days=10))
        .add_extension(
            old.extensions.get_extension_for_class(x509.SubjectAlternativeName).value, False
        )
        .sign(ca_key, hashes.SHA256())
    )
    files.cert.write_bytes(expiring.public_bytes(serialization.Encoding.PEM))

    ensure_server_tls(tmp_path, HOSTS)

    renewed = _cert(files.cert)
    renewed.verify_directly_issued_by(ca)
    assert renewed.not_valid_after_utc - now > timedelta(days=800)


def test_deleting_the_ca_regenerates_it_and_the_server_cert(tmp_path: Path) -> None:
    files = ensure_server_tls(tmp_path, HOSTS)
    old_ca = files.ca.read_bytes()
    files.ca.unlink()
    (tmp_path / CA_KEY_FILE).unlink()

    ensure_server_tls(tmp_path, HOSTS)

    assert files.ca.read_bytes() != old_ca
    _cert(files.cert).verify_directly_issued_by(_cert(files.ca))


@pytest.mark.parametrize("name", [CA_FILE, CA_KEY_FILE, SERVER_FILE, SERVER_KEY_FILE])
def test_corrupt_file_is_invalid_and_names_the_file(tmp_path: Path, name: str) -> None:
    ensure_server_tls(tmp_path, HOSTS)
    (tmp_path / name).write_bytes(b"-----BEGIN GARBAGE-----\nnot base64\n")

    with pytest.raises(Invalid, match=rf"{re.escape(str(tmp_path / name))}\b.*delete"):
        ensure_server_tls(tmp_path, HOSTS)


def test_ca_without_its_key_is_invalid(tmp_path: Path) -> None:
    ensure_server_tls(tmp_path, HOSTS)
    (tmp_path / CA_KEY_FILE).unlink()

    with pytest.raises(Invalid, match=rf"{re.escape(str(tmp_path / CA_KEY_FILE))} is missing"):
        ensure_server_tls(tmp_path, HOSTS)


def test_host_that_is_not_a_name_or_address_is_invalid(tmp_path: Path) -> None:
    with pytest.raises(Invalid, match="'bad host!'"):
        ensure_server_tls(tmp_path / "tls", ["bad host!"])
    assert not (tmp_path / "tls").exists()


def test_default_hosts_names_this_machine_and_fit_a_certificate(tmp_path: Path) -> None:
    hosts = default_hosts()

    assert hosts[0] == socket.gethostname()
    assert len(hosts) == len(set(hosts))
    dns, ips = _sans(_cert(ensure_server_tls(tmp_path, hosts).cert))
    for host in hosts:
        try:
            assert str(ipaddress.ip_address(host)) in ips
        except ValueError:
            assert host.lower().rstrip(".") in dns


def test_client_context_without_a_usable_ca_is_invalid() -> None:
    with pytest.raises(Invalid, match="cannot load the NATS CA certificate"):
        client_ssl_context("-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n")


async def _serve_tls(files: TlsFiles) -> asyncio.Server:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.cert, files.key)

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    return await asyncio.start_server(echo, "127.0.0.1", 0, ssl=context)


@pytest.mark.parametrize("server_hostname", ["127.0.0.1", "localhost"])
@pytest.mark.parametrize("strict", [False, True])
async def test_tls_handshake_verifies_against_the_generated_ca(
    tmp_path: Path, server_hostname: str, strict: bool
) -> None:
    files = ensure_server_tls(tmp_path, HOSTS)
    context = client_ssl_context(files.ca.read_text())
    if strict:  # Python 3.13's default; requires key identifiers and key usage
        context.verify_flags |= ssl.VERIFY_X509_STRICT
    server = await _serve_tls(files)
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(WAIT_S):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname=server_hostname
            )
            writer.write(b"ping\n")
            assert await reader.readline() == b"ping\n"
            assert writer.get_extra_info("ssl_object").version() in ("TLSv1.2", "TLSv1.3")
            writer.close()
            await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()


async def test_client_trusting_another_ca_refuses_the_server(tmp_path: Path) -> None:
    files = ensure_server_tls(tmp_path / "ours", HOSTS)
    other = ensure_server_tls(tmp_path / "other", HOSTS)
    server = await _serve_tls(files)
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(WAIT_S):
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection(
                    "127.0.0.1",
                    port,
                    ssl=client_ssl_context(other.ca.read_text()),
                    server_hostname="localhost",
                )
    finally:
        server.close()
        await server.wait_closed()


async def test_nats_server_speaks_only_tls_with_these_files(
    tmp_path: Path, nats_server_factory
) -> None:
    files = ensure_server_tls(tmp_path / "tls", HOSTS)
    conf = natsauth.server_config(tmp_path / "nats.conf", tls=(files.cert, files.key))
    server = await nats_server_factory(config_file=conf)

    nc = await natsauth.plane_nats(
        server.url,
        tls=client_ssl_context(files.ca.read_text()),
        tls_hostname="127.0.0.1",
        allow_reconnect=False,
        connect_timeout=WAIT_S,
    )
    try:
        async with asyncio.timeout(WAIT_S):
            sub = await nc.subscribe("tls.check")
            await nc.publish("tls.check", b"over tls")
            assert (await sub.next_msg(timeout=WAIT_S)).data == b"over tls"
    finally:
        await nc.close()

    info, answer = await natsauth.plain_text_answer("127.0.0.1", server.port, WAIT_S)
    assert b'"tls_required":true' in info
    assert b"PONG" not in answer
