"""The ``[fleet]`` table: how a robot's gateway dials out to a Zenoh router and which hub it obeys (docs/fleet.md).

Off by default: a robot is an island until its profile names a router. With it on, the gateway connects out as
a Zenoh *client* (one outbound session: a robot behind NAT needs no open port), to the ``router`` endpoints in
order. ``tls/…`` endpoints use ``ca_file`` (the fleet's CA) and, for mutual TLS, ``cert_file``/``key_file`` (this
robot's certificate: the router's access control confines its common name to ``teleop/<fleet>/<robot_id>/**``).
A plain ``tcp/…`` endpoint is refused unless it is a loopback address, as the gateway's own bind rule refuses a
non-loopback address without users: a robot's link to its hub crosses networks only encrypted.

Commands are obeyed only when signed by the hub's key (``hub_public_key``, Ed25519 PEM): the router's access
control is one layer, this is the robot's own (a neighbour that reaches the router, or a misconfigured router,
still cannot make the robot move). ``max_role`` caps the role a hub may claim for its users here.

>>> FleetConfig().enabled
False
>>> FleetConfig(enabled=True, router=["tcp/10.0.0.5:7447"], hub_public_key="hub.pub")
Traceback (most recent call last):
...
ValueError: router: 'tcp/10.0.0.5:7447' is plain TCP beyond loopback; use tls/10.0.0.5:7447 with ca_file
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from server.config import Table
from server.gateway.auth.net import is_loopback_host

#: a fleet name or robot id: one key-expression chunk (no ``/``, ``*``, ``$``, ``?``, ``#``)
Name = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_-]{1,32}$")]
Endpoint = Annotated[str, Meta(min_length=5, max_length=300)]


def endpoint_host(endpoint: str) -> tuple[str, str]:
    """(protocol, host) of a Zenoh endpoint ``proto/host:port``.

    >>> endpoint_host("tcp/127.0.0.1:7447"), endpoint_host("tls/[::1]:7447"), endpoint_host("tls/hub.example:7447")
    (('tcp', '127.0.0.1'), ('tls', '::1'), ('tls', 'hub.example'))
    """
    proto, _, rest = endpoint.partition("/")
    rest = rest.split("#", 1)[0]
    host = rest.rsplit(":", 1)[0] if ":" in rest else rest
    return proto, host.strip("[]")


def check_endpoints(endpoints: list[str], key: str, ca_file: str) -> None:
    """``ValueError`` naming ``key`` for an endpoint that is neither TLS nor loopback TCP (or TLS without a CA)."""
    for ep in endpoints:
        proto, host = endpoint_host(ep)
        if proto not in ("tcp", "tls"):
            raise ValueError(f"{key}: {ep!r} must start with tcp/ or tls/")
        if not host:
            raise ValueError(f"{key}: {ep!r} has no host")
        if proto == "tcp" and not is_loopback_host(host):
            raise ValueError(f"{key}: {ep!r} is plain TCP beyond loopback; use tls/{ep[4:]} with ca_file")
        if proto == "tls" and not ca_file:
            raise ValueError(f"{key}: {ep!r} is TLS: set ca_file (the fleet's CA certificate)")


class FleetConfig(Table, frozen=True):
    """The ``[fleet]`` table of a robot's profile (docs/fleet.md)."""

    enabled: bool = False
    #: Zenoh endpoints of the router(s), tried in order: ``tls/host:7447`` (``tcp/`` on loopback only)
    router: Annotated[list[Endpoint], Meta(max_length=8)] = msgspec.field(default_factory=list)
    fleet: Name = "lab"
    #: this robot's id in the fleet (its keys: ``teleop/<fleet>/<robot_id>/…``; its certificate's common name)
    robot_id: Name = "robot"
    #: the fleet's CA (PEM); this robot's certificate and key for mutual TLS
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    #: the hub's Ed25519 public key (PEM): only commands it signed are obeyed
    hub_public_key: str = ""
    #: the highest role a hub may claim for its users on this robot
    max_role: Literal["viewer", "operator", "admin"] = "operator"
    summary_hz: Annotated[float, Meta(ge=0.1, le=10.0)] = 1.0
    #: full telemetry to a watcher at most this often (the watcher asks for its rate)
    max_watch_hz: Annotated[float, Meta(ge=1.0, le=200.0)] = 50.0
    #: a watch not renewed within this ends (the hub renews every third of it)
    watch_s: Annotated[float, Meta(ge=1.0, le=60.0)] = 6.0
    #: how often the link checks that it still has a router (a new one: everything declared again)
    check_s: Annotated[float, Meta(ge=0.05, le=10.0)] = 0.25

    def __post_init__(self) -> None:
        if not self.enabled:
            return
        if not self.router:
            raise ValueError("router: name at least one router endpoint (e.g. 'tls/fleet.example.org:7447')")
        if not self.hub_public_key:
            raise ValueError("hub_public_key: the hub's public key (PEM) is needed: a robot obeys only its hub")
        check_endpoints(self.router, "router", self.ca_file)
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file: give both (mutual TLS) or neither")
        for key in ("ca_file", "cert_file", "key_file", "hub_public_key"):
            path = getattr(self, key)
            if path and not os.path.isfile(path):
                raise ValueError(f"{key}: no such file {path!r}")


__all__ = ["FleetConfig", "check_endpoints", "endpoint_host"]
