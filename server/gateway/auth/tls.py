"""TLS for the gateway: an ``ssl.SSLContext`` from ``[auth] tls_cert``/``tls_key``, and a
self-signed certificate maker (the ``cryptography`` package, no ``openssl`` binary needed).

A self-signed certificate is for a robot on a closed network: the browser warns once
and the operator accepts it (or installs it). It names every host the operator may
type (``subjectAltName``: DNS names and IP addresses, always ``localhost``, 127.0.0.1
and ::1), uses an EC P-256 key, and is valid for 397 days (browsers refuse longer).
The key file is written 0600.

``python -m server.gateway.auth.tls CERT KEY [--host NAME_OR_IP ...]`` makes a pair by hand.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import logging
import socket
import ssl
import sys
from pathlib import Path

from server.gateway.auth.config import AuthConfig
from server.gateway.auth.users import write_atomic

log = logging.getLogger(__name__)

VALID_DAYS = 397


class TlsError(ValueError):
    """The certificate or key cannot be used (the message names the files)."""


def make_self_signed(cert_path: str | Path, key_path: str | Path, hosts: list[str] | None = None,
                     days: int = VALID_DAYS) -> None:
    """Write a self-signed certificate and its private key (PEM) for ``hosts`` (+ localhost)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    names = list(dict.fromkeys([*(hosts or []), socket.gethostname(), "localhost", "127.0.0.1", "::1"]))
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0]),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "teleop (self-signed)")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    write_atomic(Path(key_path), key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
    write_atomic(Path(cert_path), cert.public_bytes(serialization.Encoding.PEM))
    Path(cert_path).chmod(0o644)
    log.info("made a self-signed certificate for %s: %s", ", ".join(names), cert_path)


def ssl_context(cfg: AuthConfig, hosts: list[str] | None = None) -> ssl.SSLContext | None:
    """The server's TLS context, or None when TLS is off. Makes the self-signed pair when
    ``tls_self_signed`` and the files are missing. Raises :class:`TlsError` naming a bad file."""
    if not cfg.tls_enabled:
        return None
    cert, key = Path(cfg.tls_cert), Path(cfg.tls_key)
    if cfg.tls_self_signed and not (cert.exists() and key.exists()):
        make_self_signed(cert, key, hosts)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:
        raise TlsError(f"[auth] tls_cert {cert} / tls_key {key} cannot be used: {err}") from None
    return ctx


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m server.gateway.auth.tls", description="Make a self-signed certificate.")
    p.add_argument("cert", help="certificate file to write (PEM)")
    p.add_argument("key", help="private key file to write (PEM, mode 0600)")
    p.add_argument("--host", action="append", default=[], help="a DNS name or IP address clients use (repeat)")
    p.add_argument("--days", type=int, default=VALID_DAYS)
    args = p.parse_args(argv)
    make_self_signed(args.cert, args.key, args.host, args.days)
    print(f"wrote {args.cert} and {args.key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
