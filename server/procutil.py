"""Process helpers shared by the launcher, the runtime and the gateway (Linux first, portable where it can)."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux ``prctl``), so a
    launcher killed with ``kill -9`` leaves no orphan: the runtime then halts the robot and exits.
    Returns whether it was armed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        log.debug("prctl(PR_SET_PDEATHSIG) unavailable", exc_info=True)
        return False


def process_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a runtime that died but is not reaped yet).
    A read of ``/proc`` (in memory, microseconds); ``os.kill(pid, 0)`` where there is none.

    >>> process_alive(os.getpid()), process_alive(None)
    (True, False)
    """
    if pid is None or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]  # "pid (comm) S ...": comm may hold spaces
    return state not in (b"Z", b"X", b"x")


def say_line(*lines: str) -> None:
    """Write ``lines`` to standard output, each in one write, and flush. ``print`` writes a text and its newline
    apart; the children of ``python -m server`` share its pipe, unbuffered, and a log line of another thread or
    process landed between a ``listening on`` URL's port and its newline (a harness read the port as the log
    line's text). Used for every line a harness or a supervisor reads."""
    for line in lines:
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
