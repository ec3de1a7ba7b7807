"""``python -m linkemu``: ``up`` in the foreground, then ``status``, ``set``, ``blackout`` and ``exec``
from other processes through its control socket, and SIGTERM tears everything down."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading

import pytest

from linkemu import PROFILES, netns
from tests.conftest import REPO
from tests.linkemu.plugin import skip_unless_links


def cli(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "linkemu", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)


def test_profiles_lists_every_named_profile():
    out = cli("profiles")
    assert out.returncode == 0, out.stderr
    for name in PROFILES:
        assert re.search(rf"^{name}: uplink ", out.stdout, re.M), out.stdout


def test_a_command_without_a_running_link_says_so():
    out = cli("status", "--link", "no-such-link")
    assert out.returncode == 2
    assert "no link is up" in out.stderr


def test_up_then_change_it_from_outside_then_sigterm():
    skip_unless_links()
    up = subprocess.Popen([sys.executable, "-m", "linkemu", "up", "lan"], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        for line in up.stdout:
            lines.append(line)
            if "Ctrl-C to tear down" in line:
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(60), "".join(lines)
        robot = re.search(r"ip netns exec (\S+-robot) ", "".join(lines))[1]
        which = robot.removesuffix("-robot")
        assert robot in netns.existing()

        status = cli("status", "--link", which)
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith("lan: ")

        assert cli("set", "bad", "--link", which).stdout.startswith("bad: ")
        dark = cli("blackout", "2", "--link", which)
        assert dark.returncode == 0 and "dark True" in dark.stdout
        assert "dark False" in cli("blackout", "--end", "--link", which).stdout
        assert cli("stall", "0.2", "--link", which).returncode == 0

        inside = cli("exec", "operator", "--link", which, "--", "ip", "-o", "-4", "addr", "show", "dev", "link0")
        assert inside.returncode == 0, inside.stderr
        assert "10.77.2.2/24" in inside.stdout
    finally:
        up.send_signal(signal.SIGTERM)
        code = up.wait(30)
    assert code == 0, "".join(lines)
    assert "link down" in "".join(lines)
    assert not [n for n in netns.existing() if n.startswith(which)]
    assert cli("status", "--link", which).returncode == 2


@pytest.mark.parametrize("args", [["up", "lte"], ["set", "nope"], ["blackout", "soon"]])
def test_bad_arguments_are_refused(args):
    out = cli(*args)
    assert out.returncode == 2
    assert "invalid" in out.stderr
