"""``python -m server fleet-certs --out DIR --router-host HOST --robots r1 r2 …``: the keys of a lab fleet.

Writes a CA (``ca.pem``, ``ca.key``: keep the key off the robots), the router's certificate for ``--router-host``
(``router.pem``/``router.key``; names and IP addresses as subject alternative names, checked by every client),
the hub's (``hub.pem``/``hub.key``, common name ``hub``) and one per robot (``<id>.pem``/``<id>.key``, common name
the robot id: the router's access control confines that name to ``teleop/<fleet>/<id>/**``), and the hub's
Ed25519 signing pair (``hub-sign.key`` for the hub, ``hub-sign.pub`` for every robot's ``hub_public_key``).
EC P-256 certificates, valid ``--days`` (default 825); private keys mode 0600. For a production fleet use your
own CA; docs/fleet.md has the openssl lines that do the same.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from server.gateway.fleet.trust import new_keypair


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    out: list[x509.GeneralName] = []
    for n in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(out)


def make_fleet_certs(out: Path, router_hosts: list[str], robots: list[str], hub: str = "hub",
                     days: int = 825) -> None:
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "teleop fleet CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    (out / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(out / "ca.key", ca_key)

    def leaf(name: str, cn: str, sans: list[str], server: bool) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else \
            [ExtendedKeyUsageOID.CLIENT_AUTH]
        cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=days))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
                .add_extension(_san(sans or [cn]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        (out / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(out / f"{name}.key", key)

    leaf("router", router_hosts[0], router_hosts, server=True)
    leaf("hub", hub, [hub], server=False)
    for robot in robots:
        leaf(robot, robot, [robot], server=False)
    new_keypair(out / "hub-sign.key", out / "hub-sign.pub")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m server fleet-certs", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the files")
    p.add_argument("--router-host", action="append", required=True, help="the router's name or address (repeatable)")
    p.add_argument("--robots", nargs="+", default=[], help="robot ids (their certificates' common names)")
    p.add_argument("--hub", default="hub", help="the hub's common name (default: hub)")
    p.add_argument("--days", type=int, default=825)
    args = p.parse_args(argv)
    make_fleet_certs(Path(args.out), args.router_host, args.robots, args.hub, args.days)
    print(f"fleet certificates in {args.out}: ca.pem, router, {args.hub}, {', '.join(args.robots) or 'no robots'}; "
          "hub-sign.key (the hub) and hub-sign.pub (every robot)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
