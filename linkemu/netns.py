"""Named network namespaces: entering one from a thread, and making sure none is left behind.

A namespace is a name under ``/run/netns`` (``ip netns add``). Entering one is per *thread*
on Linux (``setns(2)`` with ``CLONE_NEWNET`` changes only the calling thread), and a socket
belongs to the namespace it was created in for the rest of its life, wherever it is used
from. So test code can open a client socket "in the operator's network" by creating it in a
thread that has entered the namespace (:func:`entered`, :func:`call_in`); a child process
started from such a thread would inherit it too, but :func:`command` (``ip netns exec``)
is the plain way to start one.

Names are ``PREFIX-PID-N-SIDE`` (``linkemu-4242-0-robot``): unique per live process,
so links of several processes (several engineers, parallel test runs) never collide, and a
name whose PID is dead belongs to a run that died: :func:`remove_stale` (called by every
``Link.start``) kills what still runs in it and deletes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from server.procutil import process_alive

log = logging.getLogger("linkemu.netns")

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")
SIDES = ("robot", "middle", "operator")
DEFAULT_PREFIX = "linkemu"
_NAME = re.compile(r"^(?P<prefix>[a-z0-9][a-z0-9-]*?)-(?P<pid>\d+)-(?P<n>\d+)-(?P<side>robot|middle|operator)$")
# sbin is not on every non-login PATH; iproute2 and nftables install there
_SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")

T = TypeVar("T")


class NetnsError(RuntimeError):
    """A namespace operation failed (the message carries the command's output)."""


def tool(name: str) -> str:
    """The path of ``ip``, ``tc`` or ``nft`` (PATH first, then the sbin directories)."""
    for d in os.environ.get("PATH", "").split(os.pathsep) + list(_SBIN):
        path = os.path.join(d, name)
        if d and os.access(path, os.X_OK):
            return path
    raise NetnsError(f"{name} not found (install iproute2 and nftables: scripts/install-network-tools.sh)")


def run(argv: list[str], stdin: str | None = None, timeout_s: float = 30.0) -> str:
    """Run a tool; its stdout, or :class:`NetnsError` with its stderr."""
    argv = [tool(argv[0]), *argv[1:]]
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        shown = f" (input:\n{stdin.rstrip()})" if stdin else ""
        raise NetnsError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}{shown}")
    return proc.stdout


def name_for(prefix: str, pid: int, n: int, side: str) -> str:
    """The namespace name of one side of link ``n`` of process ``pid``.

    >>> name_for("linkemu", 42, 0, "robot")
    'linkemu-42-0-robot'
    """
    name = f"{prefix}-{pid}-{n}-{side}"
    if not _NAME.match(name):
        raise ValueError(f"bad namespace prefix {prefix!r} (lower-case letters, digits and dashes)")
    return name


def parse_name(name: str) -> tuple[str, int, int, str] | None:
    """(prefix, pid, n, side) of a name this module made, else None.

    >>> parse_name("h6-linkemu-42-3-operator"), parse_name("someone-elses")
    (('h6-linkemu', 42, 3, 'operator'), None)
    """
    m = _NAME.match(name)
    return (m["prefix"], int(m["pid"]), int(m["n"]), m["side"]) if m else None


def existing() -> list[str]:
    """Every named namespace on this machine."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def pids_in(name: str) -> list[int]:
    """Processes whose network namespace is ``name`` (``ip netns pids``), never this process."""
    try:
        out = run(["ip", "netns", "pids", name])
    except NetnsError:
        return []
    return [int(p) for p in out.split() if p.isdigit() and int(p) != os.getpid()]


def kill_all_in(name: str, grace_s: float = 3.0) -> None:
    """SIGTERM everything running in ``name``, then SIGKILL what is left after ``grace_s``."""
    pids = pids_in(name)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids_in(name) if p in pids]
            time.sleep(0.02)
        if not pids:
            return
    log.warning("processes still in namespace %s after SIGKILL: %s", name, pids)


def add(name: str) -> None:
    run(["ip", "netns", "add", name])


def delete(name: str) -> None:
    """Kill what runs in ``name`` and delete it (its devices go with it); quiet if it is gone."""
    if name not in existing():
        return
    kill_all_in(name)
    try:
        run(["ip", "netns", "delete", name])
    except NetnsError as err:
        if name in existing():
            raise
        log.debug("%s", err)


def remove_stale(prefix: str | None = None) -> list[str]:
    """Delete the namespaces of runs that died (their PID is gone); returns their names.
    ``prefix`` None: whatever the prefix."""
    removed = []
    for name in existing():
        parsed = parse_name(name)
        if parsed is None or (prefix is not None and parsed[0] != prefix) or process_alive(parsed[1]):
            continue
        log.info("removing namespace %s left by a dead run (pid %d)", name, parsed[1])
        delete(name)
        removed.append(name)
    return removed


#: the link's address range; in the namespace this process started in it is made unreachable while a
#: link is up, so a socket opened by mistake outside the link's namespaces (a test that forgot
#: :func:`entered`) fails at once instead of following the default route off the machine
GUARDED_RANGE = "10.77.0.0/16"


def guard_root_route() -> None:
    """Add ``unreachable GUARDED_RANGE`` in this process's own namespace (idempotent)."""
    run(["ip", "route", "replace", "unreachable", GUARDED_RANGE])


def release_root_route(prefix: str | None = None) -> None:
    """Remove the guard once no link's namespace is left on the machine (another process's link keeps it)."""
    if any(parse_name(n) for n in existing()):
        return
    with contextlib.suppress(NetnsError):
        run(["ip", "route", "del", "unreachable", GUARDED_RANGE])


def command(name: str, argv: list[str]) -> list[str]:
    """``argv`` run inside ``name``: ``ip netns exec NAME argv`` (execs, so the PID is argv's own)."""
    return [tool("ip"), "netns", "exec", name, *argv]


# ---------------------------------------------------------------------- entering from a thread
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """The calling thread is inside namespace ``name`` for the block (sockets made in it stay there)."""
    with open("/proc/thread-self/ns/net", "rb") as home, open(NETNS_DIR / name, "rb") as target:
        _setns(target.fileno())
        try:
            yield
        finally:
            _setns(home.fileno())


def call_in(name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a fresh thread inside namespace ``name``; its result or its exception.
    The thread is fresh so nothing this thread holds (an event loop, a connection pool) leaks across."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            with entered(name):
                out["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller
            out["error"] = exc

    t = threading.Thread(target=body, name=f"netns:{name}", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]
