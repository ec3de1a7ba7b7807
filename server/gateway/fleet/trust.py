"""End-to-end trust between the hub and its robots: every request the hub sends is signed with its Ed25519 key,
and a robot obeys only what that key signed, once (docs/fleet.md, "Security model").

Why a signature besides the router's mutual TLS and access control: those are the router's decisions, and a
router can be misconfigured, replaced or reached by a neighbour on the same network (the hostile-neighbour test
sends commands from an unauthenticated Zenoh client straight through a router). A robot must not move for
anything but its hub. The signed request carries the hub user's identity and role, so the robot's own permission
and lease checks run on that; the hub's boot id and a counter that only grows make a captured request worthless
a second time (Zenoh delivers one session's queries in order, so a strictly growing counter loses nothing).
Ed25519 (``cryptography``): ~50 µs to verify here, well inside a 50 Hz command budget.

>>> from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
>>> key = Ed25519PrivateKey.generate()
>>> signer, verifier = Signer(key), Verifier(key.public_key())
>>> payload, sig = signer.sign({"op": "command", "robot": "r1"})
>>> verifier.open(payload, sig)["op"]
'command'
>>> verifier.open(payload, sig)
Traceback (most recent call last):
...
server.gateway.fleet.trust.Untrusted: replayed request (counter 1 after 1 from this hub)
>>> verifier.open(payload.replace(b"r1", b"r2"), sig)
Traceback (most recent call last):
...
server.gateway.fleet.trust.Untrusted: bad signature: not signed by the hub's key
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from server.errors import ApiError

#: a request bigger than this is refused before its signature is checked (a trajectory goes over HTTP)
MAX_REQUEST_BYTES = 256 * 1024
#: hub boots remembered (a hub restarted this many times since the robot started: the oldest is forgotten)
MAX_BOOTS = 64


class Untrusted(ApiError):
    status = 401
    code = "untrusted"


class Signer:
    """The hub's side: signs requests with its private key, numbering them from a fresh boot id."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self.key = key
        self.boot = secrets.token_hex(8)
        self.counter = itertools.count(1)

    @classmethod
    def from_file(cls, path: str | Path) -> "Signer":
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path}: not an Ed25519 private key")
        return cls(key)

    def sign(self, request: dict[str, Any]) -> tuple[bytes, bytes]:
        """(payload, signature) of ``request`` with the hub's boot id, the next counter and the wall time."""
        payload = orjson.dumps({**request, "hub": self.boot, "n": next(self.counter), "t": time.time()})
        return payload, self.key.sign(payload)


class Verifier:
    """The robot's side: the hub's public key and the last counter seen from each hub boot."""

    def __init__(self, key: Ed25519PublicKey) -> None:
        self.key = key
        self.last: OrderedDict[str, int] = OrderedDict()

    @classmethod
    def from_file(cls, path: str | Path) -> "Verifier":
        key = serialization.load_pem_public_key(Path(path).read_bytes())
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"{path}: not an Ed25519 public key")
        return cls(key)

    def open(self, payload: bytes, signature: bytes | None, *, replay_ok: bool = False) -> dict[str, Any]:
        """The request if the hub signed it and it is new (``replay_ok``: an e-stop, harmless twice, is taken out
        of order too); raises :class:`Untrusted` saying why not."""
        if len(payload) > MAX_REQUEST_BYTES:
            raise Untrusted(f"request of {len(payload)} bytes is over {MAX_REQUEST_BYTES}", code="too_large",
                            status=413)
        if not signature:
            raise Untrusted("unsigned request: only the hub's signed requests are obeyed")
        try:
            self.key.verify(signature, payload)
        except InvalidSignature:
            raise Untrusted("bad signature: not signed by the hub's key") from None
        try:
            request = orjson.loads(payload)
        except orjson.JSONDecodeError as err:  # signed garbage: a hub bug
            raise Untrusted(f"signed request is not JSON: {err}", code="malformed", status=400) from None
        if not isinstance(request, dict) or not isinstance(request.get("hub"), str) \
                or not isinstance(request.get("n"), int):
            raise Untrusted("signed request has no hub boot id and counter", code="malformed", status=400)
        boot, n = request["hub"], request["n"]
        last = self.last.get(boot, 0)
        if n <= last and not replay_ok:
            raise Untrusted(f"replayed request (counter {n} after {last} from this hub)", code="replayed")
        if n > last:
            self.last[boot] = n
            self.last.move_to_end(boot)
            while len(self.last) > MAX_BOOTS:
                self.last.popitem(last=False)
        return request


def new_keypair(private_path: Path, public_path: Path) -> None:
    """Write a fresh Ed25519 pair: the hub's private key (mode 0600) and the public key its robots trust."""
    key = Ed25519PrivateKey.generate()
    private_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    private_path.chmod(0o600)
    public_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo))


__all__ = ["MAX_REQUEST_BYTES", "Signer", "Untrusted", "Verifier", "new_keypair"]
