"""Process helpers shared by the launcher, the runtime and the gateway (Linux first, portable where it can)."""

from __future__ import annotations

import ctypes
import logging
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
