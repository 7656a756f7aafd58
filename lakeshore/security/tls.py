"""TLS for the embedded nats-server: a private CA and a server certificate in the data dir.

When the embedded server listens beyond loopback it speaks TLS only. :func:`ensure_server_tls`
generates a CA and a server certificate signed by it on first start and reuses both
afterwards; clients verify the server against the CA (:func:`client_ssl_context`). A server
certificate that is about to expire or lacks a requested host is re-issued from the *same*
CA, so clients that already hold ``ca.pem`` keep trusting the server.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import socket
import ssl
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lakeshore.errors import Invalid

logger = logging.getLogger(__name__)

CA_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
SERVER_FILE = "server.pem"
SERVER_KEY_FILE = "server-key.pem"

#: Lifetime of a generated CA: clients hold it, so it should outlive many server certificates.
CA_VALIDITY = timedelta(days=3652)
#: Lifetime of a server certificate; 825 days is the most that Apple's TLS clients accept.
SERVER_VALIDITY = timedelta(days=825)
#: A server certificate with less validity left than this is re-issued.
RENEW_BEFORE = timedelta(days=30)
#: Certificates start this far in the past, so a peer whose clock is a little behind accepts.
BACKDATE = timedelta(minutes=5)
#: Names every server certificate carries, so local clients connect whatever the listen address.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

_DNS_NAME = re.compile(r"[a-z0-9_*-]+(\.[a-z0-9_*-]+)*")
_CN_MAX = 64  # RFC 5280 ub-common-name; cryptography refuses longer.
_CA_FIX = (
    "delete {ca} and {ca_key} in {dir} to generate a new ca (remote clients then need the new {ca})"
)
_SERVER_FIX = "delete {cert} and {key} in {dir} to have a new server certificate issued"

_IssuerKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the embedded nats-server's TLS material lives."""

    ca: Path
    """CA certificate (PEM) that clients verify the server with."""
    cert: Path
    """Server certificate (PEM): the leaf alone, since clients already hold the CA."""
    key: Path
    """Server private key (PEM), mode 0600."""


def ensure_server_tls(directory: Path, hosts: Sequence[str]) -> TlsFiles:
    """Make sure ``directory`` holds a CA and a fresh server certificate for ``hosts``.

    The first call creates ``directory`` (mode 0700), a CA (EC P-256, valid 10 years) and a
    server certificate it signs (valid 825 days). Later calls reuse the CA, and reuse the
    server certificate while it is valid for more than :data:`RENEW_BEFORE` and names every
    requested host; otherwise they issue a new one from the same CA. Every file is written
    atomically with mode 0600.

    Args:
        directory: where the files live; created if missing.
        hosts: DNS names and IP addresses clients may dial (``[::1]`` brackets allowed);
            :data:`LOOPBACK_HOSTS` are always added.

    Returns:
        The paths of the CA certificate, the server certificate and the server key.

    Raises:
        Invalid: a host is neither an IP address nor a DNS name; an existing file cannot be
            read, does not parse, or its key does not match its certificate; the CA expired;
            or a file cannot be written. The message names the file and how to fix it.
    """
    names = _subject_alt_names([*hosts, *LOOPBACK_HOSTS])
    directory = Path(directory)
    _make_private_dir(directory)
    now = datetime.now(UTC)
    ca_cert, ca_key = _load_or_create_ca(directory, now)
    files = TlsFiles(
        ca=directory / CA_FILE, cert=directory / SERVER_FILE, key=directory / SERVER_KEY_FILE
    )
    if not _server_cert_fresh(files, ca_cert, names, now):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue_server_cert(ca_cert, ca_key, key, names, now)
        _write_private(files.key, _key_pem(key))
        _write_private(files.cert, cert.public_bytes(serialization.Encoding.PEM))
        logger.info(
            "issued nats server certificate %s for %s, valid until %s",
            files.cert,
            ", ".join(str(n.value) for n in names),
            cert.not_valid_after_utc.date(),
        )
    return files


def client_ssl_context(ca_pem: str) -> ssl.SSLContext:
    """A client context that verifies the server against ``ca_pem`` (TLS 1.2 or later).

    Args:
        ca_pem: PEM text of the CA(s) that sign the server's certificate.

    Raises:
        Invalid: if it holds no usable certificate.
    """
    try:
        context = ssl.create_default_context(cadata=ca_pem)
    except (ssl.SSLError, ValueError) as e:
        raise Invalid(f"cannot load the NATS CA certificate: {e}") from e
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def default_hosts() -> list[str]:
    """Names and addresses this machine is likely dialled by, found without a network probe.

    The hostname, its canonical (fully qualified) name and its addresses, as the system
    resolver maps the machine's own name (normally ``/etc/hosts``). A name that does not
    resolve yields the hostname alone.
    """
    hostname = socket.gethostname()
    found = [hostname]
    try:
        infos = socket.getaddrinfo(
            hostname, None, type=socket.SOCK_STREAM, flags=socket.AI_CANONNAME
        )
    except OSError:
        infos = []
    for _family, _type, _proto, canonical, sockaddr in infos:
        found += [canonical, str(sockaddr[0])]
    # A scoped (link-local) address cannot be written into a certificate.
    return list(dict.fromkeys(h for h in found if h and "%" not in h))


def _subject_alt_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        text = host.strip().removeprefix("[").removesuffix("]")
        if not text:
            continue
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(text)))
            continue
        except ValueError:
            pass
        try:
            dns = text.rstrip(".").encode("idna").decode("ascii").lower()
        except UnicodeError:
            dns = ""
        if not _DNS_NAME.fullmatch(dns):
            raise Invalid(
                f"tls host {host!r} is neither an ip address nor a dns name; "
                "pass names like nats.example.com or addresses like 10.0.0.5"
            )
        names.append(x509.DNSName(dns))
    return list(dict.fromkeys(names))


def _make_private_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        if not directory.is_dir():
            raise Invalid(f"tls directory {directory} exists but is not a directory") from None
        return
    except OSError as e:
        raise Invalid(f"cannot create the tls directory {directory}: {e.strerror}") from e
    os.chmod(directory, 0o700)  # mkdir's mode is masked by the umask


def _load_or_create_ca(directory: Path, now: datetime) -> tuple[x509.Certificate, _IssuerKey]:
    cert_path, key_path = directory / CA_FILE, directory / CA_KEY_FILE
    fix = _CA_FIX.format(ca=CA_FILE, ca_key=CA_KEY_FILE, dir=directory)
    cert_pem = _read(cert_path, fix)
    # The key is written before the certificate, so a key without a certificate is the
    # remnant of an interrupted first start that no client can have seen yet.
    if cert_pem is None:
        return _create_ca(cert_path, key_path, now)
    key_pem = _read(key_path, fix)
    if key_pem is None:
        raise Invalid(f"tls file {key_path} is missing but {cert_path} exists; {fix}")
    cert, key = _load_cert(cert_path, cert_pem, fix), _load_key(key_path, key_pem, fix)
    if not _same_public_key(cert, key):
        raise Invalid(f"tls file {key_path} is not the key of {cert_path}; {fix}")
    if cert.not_valid_after_utc <= now:
        raise Invalid(f"tls file {cert_path} expired on {cert.not_valid_after_utc:%F}; {fix}")
    if cert.not_valid_after_utc - now < RENEW_BEFORE:
        logger.warning(
            "nats ca %s expires on %s; %s", cert_path, cert.not_valid_after_utc.date(), fix
        )
    _keep_private(key_path)
    return cert, key


def _create_ca(
    cert_path: Path, key_path: Path, now: datetime
) -> tuple[x509.Certificate, _IssuerKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _common_name("Lakeshore NATS CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    _write_private(key_path, _key_pem(key))
    _write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    logger.info("generated nats ca %s, valid until %s", cert_path, cert.not_valid_after_utc.date())
    return cert, key


def _server_cert_fresh(
    files: TlsFiles, ca: x509.Certificate, names: list[x509.GeneralName], now: datetime
) -> bool:
    """Whether the server certificate on disk can be kept as it is."""
    fix = _SERVER_FIX.format(cert=files.cert.name, key=files.key.name, dir=files.cert.parent)
    cert_pem, key_pem = _read(files.cert, fix), _read(files.key, fix)
    if cert_pem is None or key_pem is None:
        return False
    cert, key = _load_cert(files.cert, cert_pem, fix), _load_key(files.key, key_pem, fix)
    # Both can come from an interrupted re-issue (key written, certificate not yet) or from a
    # regenerated CA; the server files are derived, so a new pair repairs either.
    if not _same_public_key(cert, key):
        logger.warning("nats server key %s does not match %s; re-issuing", files.key, files.cert)
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    _keep_private(files.key)
    valid = cert.not_valid_before_utc <= now and cert.not_valid_after_utc - now > RENEW_BEFORE
    return valid and set(names) <= _cert_names(cert)


def _issue_server_cert(
    ca: x509.Certificate,
    ca_key: _IssuerKey,
    key: ec.EllipticCurvePrivateKey,
    names: list[x509.GeneralName],
    now: datetime,
) -> x509.Certificate:
    not_before = now - BACKDATE
    try:
        ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski)
    except x509.ExtensionNotFound:
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    return (
        x509.CertificateBuilder()
        .subject_name(_common_name("Lakeshore NATS server"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        # A certificate outliving its issuer would fail verification at the CA's expiry.
        .not_valid_after(min(not_before + SERVER_VALIDITY, ca.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(aki, critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _cert_names(cert: x509.Certificate) -> set[x509.GeneralName]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {
        x509.DNSName(name.value.lower()) if isinstance(name, x509.DNSName) else name for name in san
    }


def _key_usage(*, cert_sign: bool = False, digital_signature: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _common_name(what: str) -> x509.Name:
    hostname = socket.gethostname()[: _CN_MAX - len(what) - 3]
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{what} ({hostname})")])


def _read(path: Path, fix: str) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Invalid(f"cannot read the tls file {path}: {e.strerror}; {fix}") from e


def _load_cert(path: Path, pem: bytes, fix: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as e:
        raise Invalid(f"tls file {path} is not a pem certificate ({e}); {fix}") from e


def _load_key(path: Path, pem: bytes, fix: str) -> _IssuerKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise Invalid(f"tls file {path} is not an unencrypted pem key ({e}); {fix}") from e
    if not isinstance(key, _IssuerKey):
        raise Invalid(f"tls file {path} holds a {type(key).__name__}, not an ec or rsa key; {fix}")
    return key


def _same_public_key(cert: x509.Certificate, key: _IssuerKey) -> bool:
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cert.public_key().public_bytes(*spki) == key.public_key().public_bytes(*spki)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _keep_private(path: Path) -> None:
    if path.stat().st_mode & 0o077:
        logger.warning("tls key %s was readable by others; setting its mode to 0600", path)
        os.chmod(path, 0o600)


def _write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (mode 0600) so that readers see old or new, never half."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise Invalid(f"cannot write the tls file {path}: {e.strerror}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise Invalid(f"cannot write the tls file {path}: {e.strerror}") from e
