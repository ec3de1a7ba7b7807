"""Which addresses the gateway offers as ICE host candidates, and which browser candidates it uses.

aioice (aiortc's ICE) gathers a host candidate on every interface but loopback. Two things are
wrong with that here:

- a gateway on ``127.0.0.1`` (``make run``, local mode) offers no candidate the local browser can
  reach without leaving loopback — and offers the machine's other addresses, which the server was
  told not to listen on. So the candidates follow the listening address: the bound address
  itself, every interface (loopback included) for a wildcard bind, or ``[webrtc] host_addresses``;
- Chromium names its own host candidates ``<uuid>.local`` (mDNS); aioice would resolve them with
  multicast queries on the LAN. A robot across the internet cannot resolve them anyway, and the
  browser's connectivity checks reach us regardless (we learn its address as a peer-reflexive
  candidate, RFC 8445 §7.3.1.3), so they are dropped from the offer: no multicast leaves the robot.

aioice takes the list from a module function with no parameter for it, so :func:`use_host_addresses`
replaces that function for the process (one gateway per process; the same list for every peer).
"""

from __future__ import annotations

import ipaddress
import logging
import re

log = logging.getLogger(__name__)

_WILDCARDS = {"0.0.0.0", "::", ""}
_MDNS_CANDIDATE = re.compile(r"^a=candidate:\S+ \d+ \S+ \d+ \S+\.local \d+ .*$", re.MULTILINE)


def host_addresses_for(bound_host: str, configured: list[str]) -> list[str] | None:
    """The candidate addresses: ``configured`` if given, the bound address, or None (all interfaces).

    >>> host_addresses_for("127.0.0.1", [])
    ['127.0.0.1']
    >>> host_addresses_for("0.0.0.0", []) is None
    True
    >>> host_addresses_for("10.77.1.2", ["10.0.0.5"])
    ['10.0.0.5']
    """
    if configured:
        return list(configured)
    if bound_host in _WILDCARDS:
        return None
    try:
        ipaddress.ip_address(bound_host)
    except ValueError:  # a name: let aioice find the interfaces
        return None
    return [bound_host]


def use_host_addresses(addresses: list[str] | None) -> None:
    """Make aioice gather host candidates on ``addresses`` only (None: every interface, loopback too)."""
    import aioice.ice

    original = getattr(aioice.ice, "_teleop_original_get_host_addresses", aioice.ice.get_host_addresses)
    aioice.ice._teleop_original_get_host_addresses = original

    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        if addresses is None:
            found = original(use_ipv4, use_ipv6)
            return found + (["127.0.0.1"] if use_ipv4 and "127.0.0.1" not in found else [])
        return [a for a in addresses if (":" in a and use_ipv6) or (":" not in a and use_ipv4)]

    aioice.ice.get_host_addresses = get_host_addresses
    log.info("WebRTC host candidates: %s", "every interface" if addresses is None else ", ".join(addresses))


def drop_mdns_candidates(sdp: str) -> tuple[str, int]:
    """The offer without ``*.local`` candidates, and how many were dropped.

    >>> sdp = "v=0\\r\\na=candidate:1 1 udp 2113937151 3f2a.local 50000 typ host\\r\\na=end\\r\\n"
    >>> drop_mdns_candidates(sdp)
    ('v=0\\r\\na=end\\r\\n', 1)
    """
    lines = sdp.split("\r\n")
    kept = [line for line in lines if not _MDNS_CANDIDATE.match(line)]
    return "\r\n".join(kept), len(lines) - len(kept)
