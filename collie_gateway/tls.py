"""TLS for the phone API: a certificate of one's own (``--tls-cert``/``--tls-key``), or a
self-signed one (``--tls self-signed``) made once with ``cryptography``, kept beside the
database (0600) and reused across restarts; and the SHA-256 fingerprint a phone pins (the
pairing link carries it).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import ssl
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from collie_gateway.errors import ConfigError

SELF_SIGNED_DAYS: Final = 3650  # ours: phones pin the fingerprint, so a renewal means re-pairing
_LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class Tls:
    """The certificate and key the phone API serves with, and the certificate's fingerprint
    (SHA-256 of its DER form, lowercase hex)."""

    cert: Path
    key: Path
    fingerprint: str

    def server_context(self) -> ssl.SSLContext:
        """An SSL context serving this certificate (TLS 1.2 or newer).

        Raises:
            ConfigError: the files do not make a certificate and its key.
        """
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"--tls-cert {self.cert} --tls-key {self.key}: {exc}") from None
        return context


def fingerprint(cert_pem: bytes) -> str:
    """The SHA-256 fingerprint (lowercase hex) of the first certificate of a PEM file.

    Raises:
        ValueError: no certificate in it.
    """
    certs = x509.load_pem_x509_certificates(cert_pem)
    return hashlib.sha256(certs[0].public_bytes(serialization.Encoding.DER)).hexdigest()


def load(cert: Path, key: Path) -> Tls:
    """A certificate of one's own (``--tls-cert``, ``--tls-key``), checked to load.

    Raises:
        ConfigError: a file cannot be read, or they are no certificate and key.
    """
    cert_pem = read_pem(cert, "--tls-cert")
    read_pem(key, "--tls-key")
    try:
        tls = Tls(cert, key, fingerprint(cert_pem))
    except ValueError:
        raise ConfigError(f"--tls-cert {cert}: no PEM certificate in it") from None
    tls.server_context()
    return tls


def read_pem(path: Path, option: str) -> bytes:
    """The bytes of the file ``option`` names.

    Raises:
        ConfigError: one line naming the option, the file and what is wrong.
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{option} {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{option} {path} is a folder, not a PEM file") from None
    except OSError as exc:
        raise ConfigError(f"{option} {path} cannot be read: {exc.strerror}") from None


def fingerprint_of(cert: Path, option: str = "--tls-cert") -> str:
    """The SHA-256 fingerprint of the certificate file ``cert`` (``option`` names it).

    Raises:
        ConfigError: one line naming the file and what is wrong.
    """
    try:
        return fingerprint(read_pem(cert, option))
    except ValueError:
        raise ConfigError(f"{option} {cert}: no PEM certificate in it") from None


def self_signed_paths(db_path: Path) -> tuple[Path, Path]:
    """Where the self-signed certificate and its key are kept: beside the database."""
    name = db_path.name
    return db_path.with_name(name + ".tls.crt"), db_path.with_name(name + ".tls.key")


def self_signed(db_path: Path, now: datetime, hosts: Iterable[str] = ()) -> Tls:
    """The self-signed certificate kept beside ``db_path``, made now (for loopback and
    ``hosts``) when there is none. A key that others may read is refused, not used.

    Raises:
        ConfigError: the kept files cannot be read or written, or the key is not 0600.
    """
    cert_path, key_path = self_signed_paths(db_path)
    if cert_path.exists() and key_path.exists():
        mode = stat.S_IMODE(key_path.stat().st_mode)
        if mode & 0o077:
            raise ConfigError(
                f"{key_path} may be read by others (mode {mode:o}): chmod 600 it, or delete "
                "it and its .crt to make a new certificate (phones then pair again)"
            )
        return load(cert_path, key_path)
    cert_pem, key_pem = make_self_signed(now, hosts)
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        _write_private(key_path, key_pem)
        _write_private(cert_path, cert_pem)
    except OSError as exc:
        raise ConfigError(f"cannot keep the certificate beside {db_path}: {exc}") from None
    return load(cert_path, key_path)


def make_self_signed(now: datetime, hosts: Iterable[str] = ()) -> tuple[bytes, bytes]:
    """A new self-signed certificate and its key (PEM), valid for loopback and ``hosts``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "collie-gateway")])
    alt: list[x509.GeneralName] = []
    for host in dict.fromkeys((*_LOOPBACK_NAMES, *hosts)):
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _write_private(path: Path, data: bytes) -> None:
    """Write ``path`` 0600 from its first byte, whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
