"""Clean-up is guaranteed: ``close`` leaves no namespace and no process; a run that dies (SIGKILL)
leaves its namespaces only until the next ``Link.start`` on the machine; a run that forgets to
close is cleaned at interpreter exit; a link that fails half-built removes what it made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from linkemu import Link, LinkError, netns
from tests.conftest import REPO, wait_until
from tests.linkemu.plugin import skip_unless_links

CHILD = textwrap.dedent("""
    import json, subprocess, sys, time
    from linkemu import Link
    link = Link("lan").start()
    sleeper = link.popen_in("robot", ["sleep", "600"])
    print(json.dumps({"names": list(link.names.values()), "delayline": link.delayline_info["pid"],
                      "sleeper": sleeper.pid}), flush=True)
    if sys.argv[1] == "hang":
        time.sleep(600)
""")


def run_child(mode: str) -> tuple[subprocess.Popen, dict]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, mode], cwd=REPO, stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    assert line, "the child did not bring its link up"
    return child, json.loads(line)


def gone(pid: int) -> bool:
    """Not running (a zombie of someone else's counts as gone: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.fixture(autouse=True)
def _needs_links():
    skip_unless_links()


def test_close_leaves_no_namespace_and_no_process():
    link = Link("4g").start()
    names = list(link.names.values())
    delayline = link.delayline_info["pid"]
    sleeper = link.popen_in("robot", ["sleep", "600"])
    assert set(names) <= set(netns.existing())
    link.close()
    assert not set(names) & set(netns.existing())
    assert sleeper.wait(10) == -signal.SIGTERM, "the process in the robot namespace was not stopped"
    assert gone(delayline)
    link.close()  # idempotent


def test_a_dead_runs_namespaces_are_removed_by_the_next_start(link_factory):
    child, made = run_child("hang")
    assert set(made["names"]) <= set(netns.existing())
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    # its delay line sees its control pipe close and exits by itself
    wait_until(lambda: gone(made["delayline"]), 10, "the orphaned delay line to exit")
    assert set(made["names"]) <= set(netns.existing()), "the namespaces went before anyone swept them"
    link_factory("lan")  # any start sweeps the dead
    assert not set(made["names"]) & set(netns.existing())
    wait_until(lambda: gone(made["sleeper"]), 10, "the dead run's process in its robot namespace to be killed")


def test_a_run_that_forgets_to_close_is_cleaned_at_exit():
    child, made = run_child("exit")
    assert child.wait(30) == 0
    assert not set(made["names"]) & set(netns.existing())
    wait_until(lambda: gone(made["sleeper"]) and gone(made["delayline"]), 10, "its processes to be stopped")


def test_a_link_that_fails_half_built_removes_what_it_made(monkeypatch):
    def broken(self, profile):
        raise LinkError("tc refused (injected)")

    monkeypatch.setattr(Link, "_apply", broken)
    link = Link("4g")
    with pytest.raises(LinkError, match="injected"):
        link.start()
    assert not set(link.names.values()) & set(netns.existing())
    assert not link.alive


def test_the_links_addresses_are_unreachable_outside_its_namespaces():
    """A socket opened by mistake in the test's own namespace must fail at once, never follow the
    default route off the machine (the range is private, but no server of ours is out there)."""
    import errno
    import socket

    with Link("lan"):
        routes = subprocess.run([netns.tool("ip"), "route", "show", netns.GUARDED_RANGE], capture_output=True,
                                text=True).stdout
        assert "unreachable" in routes
        s = socket.socket()
        s.settimeout(5)
        try:
            with pytest.raises(OSError) as err:
                s.connect((Link.robot_ip, 9))
            assert err.value.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH)
        finally:
            s.close()
