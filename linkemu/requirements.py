"""What the link emulator needs from the machine, as reasons a test can skip with.

Root (or ``CAP_NET_ADMIN``/``CAP_SYS_ADMIN``: namespaces, veths, qdiscs, nftables), ``ip`` and
``tc`` (iproute2), ``nft`` (nftables) and ``/dev/net/tun``. ``scripts/install-network-tools.sh``
(called by ``make test``) installs the two packages; CI runs as root.
"""

from __future__ import annotations

import os

from linkemu import netns

TUN_DEVICE = "/dev/net/tun"


def missing() -> list[str]:
    """Why a :class:`~linkemu.Link` cannot be built here (empty: it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root (network namespaces, veth pairs, tc and nftables need root)")
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("nft", "nftables")):
        try:
            netns.tool(tool)
        except netns.NetnsError:
            problems.append(f"{tool} not found (apt-get install {package}, or scripts/install-network-tools.sh)")
    if not os.path.exists(TUN_DEVICE):
        problems.append(f"{TUN_DEVICE} missing (the kernel needs CONFIG_TUN; in a container: --device {TUN_DEVICE})")
    elif not os.access(TUN_DEVICE, os.R_OK | os.W_OK):
        problems.append(f"{TUN_DEVICE} is not readable and writable by this user")
    return problems
