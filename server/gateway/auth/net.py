"""Addresses: who the client is behind proxies, whether it is local, Host and Origin parsing, bind checks.

Pure functions on strings and :mod:`ipaddress` objects, so every rule is a doctest.

``X-Forwarded-For`` is a list each proxy appends to, so only its right end is
trustworthy: walk it from the right, skipping our own trusted proxies, and the first
address that is not one is the client (what nginx's ``real_ip_recursive`` does). A
peer that is not a trusted proxy is the client, whatever headers it sends.

>>> trusted = parse_networks(["127.0.0.1"], "trusted_proxies")
>>> client_address("127.0.0.1", "203.0.113.9, 10.0.0.7", trusted)
'10.0.0.7'
>>> client_address("192.0.2.1", "10.0.0.7", trusted)       # not a proxy of ours: ignored
'192.0.2.1'
>>> is_local_network("10.0.0.7"), is_local_network("203.0.113.9"), is_local_network("::ffff:192.168.1.2")
(True, False, True)
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Iterable

from server.gateway.auth.config import parse_networks

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Loopback, RFC 1918, link-local, IPv6 unique-local. Not 100.64/10 (carrier-grade NAT: other customers).
LOCAL_NETWORKS: tuple[IPNetwork, ...] = parse_networks(
    ["127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
     "169.254.0.0/16", "fe80::/10", "fc00::/7"], "local networks")

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
FORWARDING_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP", "X-Forwarded-Host", "X-Forwarded-Proto")


class BindRefused(ValueError):
    """Listening beyond this machine without any user would hand the robot to the network."""


@functools.lru_cache(maxsize=4096)  # every request parses its peer two or three times: memoise (bounded)
def parse_ip(text: str | None) -> IPAddress | None:
    """An address without brackets, zone or IPv4-mapping; ``None`` when it is not one.

    >>> parse_ip("::ffff:10.1.2.3"), parse_ip("fe80::1%eth0"), parse_ip("host")
    (IPv4Address('10.1.2.3'), IPv6Address('fe80::1'), None)
    """
    if not text:
        return None
    text = text.strip().strip("[]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def in_networks(addr: str | IPAddress | None, networks: Iterable[IPNetwork]) -> bool:
    ip = parse_ip(addr) if isinstance(addr, str) or addr is None else addr
    return ip is not None and any(ip.version == n.version and ip in n for n in networks)


def client_address(peer: str | None, forwarded_for: str | None, trusted: Iterable[IPNetwork]) -> str:
    """The client's address: ``peer``, or from ``X-Forwarded-For`` when ``peer`` is a trusted proxy."""
    trusted = tuple(trusted)
    peer_ip = parse_ip(peer)
    if peer_ip is None:
        return peer or ""
    if not forwarded_for or not in_networks(peer_ip, trusted):
        return str(peer_ip)
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        ip = parse_ip(hop)
        if ip is None:
            return str(peer_ip)  # garbage in the chain: believe only the proxy itself
        if not in_networks(ip, trusted):
            return str(ip)
    return str(parse_ip(hops[0])) if hops else str(peer_ip)


def is_local_network(addr: str | None, extra: Iterable[IPNetwork] = ()) -> bool:
    """Is ``addr`` on this machine or the local network (for the dashboard's banner)?"""
    return in_networks(addr, LOCAL_NETWORKS + tuple(extra))


def is_loopback(addr: str | None) -> bool:
    ip = parse_ip(addr)
    return ip is not None and ip.is_loopback


def is_loopback_host(host: str) -> bool:
    """Does listening on ``host`` stay on this machine?

    >>> [is_loopback_host(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "", "::", "robot.lan")]
    [True, True, True, False, False, False, False]
    """
    host = host.strip().strip("[]").lower().rstrip(".")
    if host in LOOPBACK_NAMES:
        return True
    return is_loopback(host)


def check_bind(host: str, users_configured: bool) -> None:
    """Refuse to listen beyond loopback while there is no user (raises :class:`BindRefused`).

    >>> check_bind("127.0.0.1", False)
    >>> check_bind("0.0.0.0", True)
    >>> check_bind("0.0.0.0", False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    server.gateway.auth.net.BindRefused: refusing to listen on 0.0.0.0 with no user configured: ...
    """
    if users_configured or is_loopback_host(host):
        return
    shown = host or "all interfaces"
    raise BindRefused(
        f"refusing to listen on {shown} with no user configured: anyone who can reach this "
        "address could drive the robot. Add an admin first:\n"
        "    python -m server users add NAME --role admin\n"
        "(it asks for a password), then start again; or listen on 127.0.0.1 "
        "(local mode: only this machine, no login). See docs/deploy.md.")


@functools.lru_cache(maxsize=1024)
def split_host(value: str) -> tuple[str, int | None]:
    """``Host`` header → (lower-case name or address without brackets, port or None).

    >>> split_host("[::1]:8080"), split_host("Robot.LAN."), split_host("10.0.0.2:80")
    (('::1', 8080), ('robot.lan', None), ('10.0.0.2', 80))
    >>> split_host("a:b")
    Traceback (most recent call last):
    ...
    ValueError: bad port in 'a:b'
    """
    value = value.strip()
    port_text = None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError(f"unclosed bracket in {value!r}")
        host, rest = value[1:end], value[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"junk after the address in {value!r}")
            port_text = rest[1:]
    elif value.count(":") == 1:
        host, port_text = value.split(":")
    else:
        host = value  # a name, an IPv4 address, or a bare IPv6 address (no port possible)
    port = None
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"bad port in {value!r}")
        port = int(port_text)
    host = host.lower().rstrip(".")
    if not host or any(c.isspace() or c in "/\\@?#" for c in host):
        raise ValueError(f"bad host in {value!r}")
    return host, port


@functools.lru_cache(maxsize=1024)
def parse_origin(value: str) -> tuple[str, str, int] | None:
    """``Origin`` header → (scheme, host, port) with the default port filled in; None for ``null``/garbage.

    >>> parse_origin("http://127.0.0.1:8080"), parse_origin("https://Robot.lan"), parse_origin("null")
    (('http', '127.0.0.1', 8080), ('https', 'robot.lan', 443), None)
    """
    value = value.strip()
    scheme, sep, rest = value.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https") or not rest or "/" in rest:
        return None
    try:
        host, port = split_host(rest)
    except ValueError:
        return None
    return scheme, host, port or (443 if scheme == "https" else 80)


def host_allowed(host: str, bound_host: str, extra: Iterable[str]) -> bool:
    """The DNS-rebinding guard. ``host`` is the Host header's name part (:func:`split_host`).

    Allowed: any IP literal (a rebinding attack needs a DNS *name* the attacker controls;
    a browser that asked for an IP literal connected to that very address), the
    localhost names (browsers resolve them to loopback themselves), the name we were
    told to bind, and the configured names (``"name"``, ``"*.suffix"``, or ``"*"``).

    >>> host_allowed("192.168.1.20", "0.0.0.0", []), host_allowed("localhost", "127.0.0.1", [])
    (True, True)
    >>> host_allowed("attacker.rebind.example", "127.0.0.1", [])
    False
    >>> host_allowed("robot.example.org", "0.0.0.0", ["*.example.org"])
    True
    """
    if parse_ip(host) is not None:
        return True
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    bound = bound_host.strip().strip("[]").lower().rstrip(".")
    if bound and host == bound:
        return True
    for pattern in extra:
        pattern = pattern.strip().lower().rstrip(".")
        if pattern == "*" or pattern == host:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
    return False
