"""``python -m server router``: the fleet's Zenoh router, run by the Python package (``mode = "router"``; the
zenohd binary is not packaged here). Measured here: 100 robots × 10 Hz into one subscriber cost the router
1.9 % of a core (docs/fleet.md has this branch's bench).

The ``[router]`` table (a TOML file of its own, ``--config``) or the command line: ``listen`` endpoints; TLS with
the fleet's CA and the router's certificate; ``mtls`` = every client shows a certificate of the fleet's CA; then
``robots`` (certificate common names) are confined by access control to their own keys
``teleop/<fleet>/<cn>/**``, and only ``hub`` (the hub's common name) may query robots and subscribe to them all.
``max_sessions`` and ``accept_pending`` are raised from Zenoh's 1,000 and 100 for fleets. A plain ``tcp/``
endpoint is refused unless on loopback (the gateway's bind rule: no encryption, no network).

Prints ``teleop router listening on <endpoints>`` once it accepts sessions; SIGINT/SIGTERM end it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import tomllib
from typing import Annotated, Any

import msgspec
import zenoh
from msgspec import Meta

from server.gateway.fleet.config import Endpoint, Name, check_endpoints
from server.gateway.fleet.link import zenoh_config
from server.procutil import say_line

log = logging.getLogger("teleop.router")


class RouterConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The ``[router]`` table (docs/fleet.md, "The router")."""

    listen: Annotated[list[Endpoint], Meta(min_length=1, max_length=8)] = msgspec.field(
        default_factory=lambda: ["tcp/127.0.0.1:7447"])
    fleet: Name = "lab"
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    #: every client must show a certificate signed by ``ca_file``; access control by common name then
    mtls: bool = False
    #: the hub's certificate common name (may query every robot and subscribe to them all)
    hub: Name = "hub"
    #: the robots' common names (each may publish and answer only under its own keys)
    robots: Annotated[list[Name], Meta(max_length=100000)] = msgspec.field(default_factory=list)
    max_sessions: Annotated[int, Meta(ge=1, le=1_000_000)] = 10_000
    accept_pending: Annotated[int, Meta(ge=1, le=100_000)] = 1_000

    def __post_init__(self) -> None:
        check_endpoints(self.listen, "listen", self.ca_file)
        tls = any(ep.startswith("tls/") for ep in self.listen)
        if tls and not (self.cert_file and self.key_file):
            raise ValueError("cert_file and key_file: a tls/ endpoint needs the router's certificate and key")
        if self.mtls and not tls:
            raise ValueError("mtls: needs a tls/ endpoint")


def acl(cfg: RouterConfig) -> dict[str, Any]:
    """Zenoh's access control for ``cfg``: deny by default; a robot's CN may put, declare and answer under its own
    prefix and subscribe to nothing else; the hub's CN may do everything under the fleet's prefix.

    >>> rules = acl(RouterConfig(listen=["tls/127.0.0.1:7447"], ca_file="ca", cert_file="c", key_file="k",
    ...                          mtls=True, robots=["r1"]))["rules"]
    >>> [(r["id"], r["key_exprs"]) for r in rules]
    [('hub', ['teleop/lab/**']), ('robot-r1', ['teleop/lab/r1/**']), ('robot-r1-subscribers', ['teleop/lab/**'])]
    """
    everything = ["put", "delete", "declare_subscriber", "query", "reply", "declare_queryable",
                  "liveliness_token", "declare_liveliness_subscriber", "liveliness_query"]
    own = ["put", "delete", "reply", "declare_queryable", "liveliness_token"]
    rules = [{"id": "hub", "messages": everything, "flows": ["egress", "ingress"], "permission": "allow",
              "key_exprs": [f"teleop/{cfg.fleet}/**"]}]
    subjects = [{"id": "hub", "cert_common_names": [cfg.hub]}]
    policies = [{"rules": ["hub"], "subjects": ["hub"]}]
    for robot in cfg.robots:
        rules.append({"id": f"robot-{robot}", "messages": own + ["query", "declare_subscriber"],
                      "flows": ["egress", "ingress"], "permission": "allow", "key_exprs": [f"teleop/{cfg.fleet}/{robot}/**"]})
        # the router tells a robot of the hub's subscriptions (``teleop/<fleet>/**``, wider than the robot's own
        # prefix): without it a robot that was online before the hub subscribed never publishes to it (its
        # publishers filter on the subscribers they know); it learns who listens, never what anyone says
        rules.append({"id": f"robot-{robot}-subscribers", "messages": ["declare_subscriber"], "flows": ["egress"],
                      "permission": "allow", "key_exprs": [f"teleop/{cfg.fleet}/**"]})
        subjects.append({"id": f"robot-{robot}", "cert_common_names": [robot]})
        policies.append({"rules": [f"robot-{robot}", f"robot-{robot}-subscribers"], "subjects": [f"robot-{robot}"]})
    return {"enabled": True, "default_permission": "deny", "rules": rules, "subjects": subjects, "policies": policies}


def router_config(cfg: RouterConfig) -> zenoh.Config:
    extra: dict[str, Any] = {"transport/unicast/max_sessions": cfg.max_sessions,
                             "transport/unicast/accept_pending": cfg.accept_pending}
    if cfg.mtls:
        extra["access_control"] = acl(cfg)
    zc = zenoh_config("router", listen=cfg.listen, ca_file=cfg.ca_file,
                      cert_file=cfg.cert_file if cfg.mtls or cfg.cert_file else "",
                      key_file=cfg.key_file, extra=extra)
    if not cfg.mtls and cfg.cert_file:  # server-side TLS only
        zc.insert_json5("transport/link/tls/enable_mtls", "false")
    return zc


def load(path: str | None, listen: list[str]) -> RouterConfig:
    raw: dict[str, Any] = {}
    if path:
        with open(path, "rb") as f:
            raw = tomllib.load(f).get("router", {})
    if listen:
        raw["listen"] = listen
    return msgspec.convert(raw, RouterConfig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m server router", description="the fleet's Zenoh router")
    p.add_argument("--config", help="a TOML file with a [router] table (docs/fleet.md)")
    p.add_argument("--listen", action="append", default=[], help="an endpoint, e.g. tcp/127.0.0.1:7447 (repeatable)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load(args.config, args.listen)
    except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError) as err:
        print(f"teleop: router configuration error: {err}", file=sys.stderr)
        return 2
    try:
        session = zenoh.open(router_config(cfg))
    except Exception as err:  # noqa: BLE001 - zenoh's ZError: cannot listen, bad TLS files
        print(f"teleop: router cannot start: {str(err).split(' at /', 1)[0]}", file=sys.stderr)
        return 3
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    say_line(f"teleop router listening on {' '.join(cfg.listen)} (zid {session.zid()})")
    done.wait()
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
