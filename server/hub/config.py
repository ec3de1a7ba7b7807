"""The hub's ``[hub]`` table (its other tables are the gateway's own: ``[server]`` where it listens, ``[auth]``
its users, sessions and TLS, ``[observability]`` its log). docs/fleet.md, "The hub".

Per-robot permissions: ``[hub.robots.<id>]`` ``view`` and ``drive`` list hub users (``"*"``: everyone); a robot
not listed takes ``default_view`` and ``default_drive``. They narrow the roles, never widen them: a viewer never
drives, whatever the list says, and each robot's own lease and ``max_role`` still decide there.

>>> HubConfig(router=["tcp/127.0.0.1:7447"], key_file=__file__).may("r3", "bob", "drive")
True
>>> HubConfig(router=["tcp/127.0.0.1:7447"], key_file=__file__,
...           robots={"r3": RobotAccess(drive=["alice"])}).may("r3", "bob", "drive")
False
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from server.config import Table
from server.gateway.fleet.config import Endpoint, Name, check_endpoints

UserList = Annotated[list[Annotated[str, Meta(min_length=1, max_length=64)]], Meta(max_length=10000)]


class RobotAccess(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Who may watch and who may drive one robot through the hub."""

    view: UserList = msgspec.field(default_factory=lambda: ["*"])
    drive: UserList = msgspec.field(default_factory=lambda: ["*"])


class HubConfig(Table, frozen=True):
    """The ``[hub]`` table (docs/fleet.md)."""

    #: the router(s) (needed by ``python -m server hub``; a robot's profile has no use for this table)
    router: Annotated[list[Endpoint], Meta(max_length=8)] = msgspec.field(default_factory=list)
    fleet: Name = "lab"
    #: the hub's Ed25519 private key (PEM): it signs every request; the robots hold its public key
    key_file: str = ""
    ca_file: str = ""
    cert_file: str = ""
    tls_key_file: str = ""
    default_view: UserList = msgspec.field(default_factory=lambda: ["*"])
    default_drive: UserList = msgspec.field(default_factory=lambda: ["*"])
    robots: dict[Name, RobotAccess] = msgspec.field(default_factory=dict)
    #: a robot's request answered within this, or 504
    request_timeout_s: Annotated[float, Meta(gt=0, le=60)] = 3.0
    #: the rate a dashboard watching one robot gets its full telemetry at
    watch_hz: Annotated[float, Meta(ge=1, le=200)] = 20.0
    #: events kept per robot for GET /api/fleet/{id}/events
    events_kept: Annotated[int, Meta(ge=10, le=100000)] = 500
    #: where the fleet's events are written (one MCAP file per robot per UTC day, server/hub/events.py; "" for none)
    events_dir: str = "state/fleet-events"
    check_s: Annotated[float, Meta(ge=0.05, le=10.0)] = 0.25

    def __post_init__(self) -> None:
        check_endpoints(self.router, "router", self.ca_file)
        if bool(self.cert_file) != bool(self.tls_key_file):
            raise ValueError("cert_file and tls_key_file: give both (mutual TLS) or neither")
        for key in ("key_file", "ca_file", "cert_file", "tls_key_file"):
            path = getattr(self, key)
            if path and not os.path.isfile(path):
                raise ValueError(f"{key}: no such file {path!r}")

    def check_hub(self) -> None:
        """What the hub process needs besides the defaults (``ValueError`` naming the key)."""
        if not self.router:
            raise ValueError("hub.router: name at least one router endpoint")
        if not self.key_file:
            raise ValueError("hub.key_file: the hub's Ed25519 private key (python -m server fleet-certs makes one)")

    def may(self, robot: str, user: str, what: Literal["view", "drive"]) -> bool:
        access = self.robots.get(robot)
        names = getattr(access, what) if access is not None else \
            (self.default_view if what == "view" else self.default_drive)
        return "*" in names or user in names


__all__ = ["HubConfig", "RobotAccess"]
