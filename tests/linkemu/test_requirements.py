"""Where the emulator cannot run, it says why (the fixtures skip with these reasons; Link.start refuses
with them)."""

from __future__ import annotations

import pytest

from linkemu import Link, LinkError, netns, requirements


def test_every_missing_piece_is_named(monkeypatch):
    monkeypatch.setattr(requirements.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns, "_SBIN", ())
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(requirements, "TUN_DEVICE", "/nonexistent/tun")
    problems = requirements.missing()
    assert problems == [
        "not root (network namespaces, veth pairs, tc and nftables need root)",
        "ip not found (apt-get install iproute2, or scripts/install-network-tools.sh)",
        "tc not found (apt-get install iproute2, or scripts/install-network-tools.sh)",
        "nft not found (apt-get install nftables, or scripts/install-network-tools.sh)",
        "/nonexistent/tun missing (the kernel needs CONFIG_TUN; in a container: --device /nonexistent/tun)",
    ]
    with pytest.raises(LinkError, match="cannot emulate a link here: not root"):
        Link("lan").start()


def test_the_plugin_skips_with_the_reasons(monkeypatch):
    from tests.linkemu import plugin

    monkeypatch.setattr(plugin.linkemu, "missing", lambda: ["no /dev/net/tun (for the test)"])
    with pytest.raises(pytest.skip.Exception, match="the link emulator cannot run here: no /dev/net/tun"):
        plugin.skip_unless_links()
