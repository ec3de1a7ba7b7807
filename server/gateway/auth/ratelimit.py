"""Per-address limits on failed logins (OctoPrint-style): N a minute and M an hour.

Only failures count (a right password does not wipe the record: that would reset an
attacker's budget); while an address is over either limit every login attempt from
it is refused with 429 before any password is checked (so the limit also bounds the
CPU an attacker can spend on argon2). IPv6 clients are counted per /64, the block one
host usually gets. Memory is bounded: at most ``max_addresses`` are tracked, the
least recently failed forgotten first.

An attempt is counted *before* its password is checked (:meth:`LoginLimiter.begin`),
as a failure until it proves right (:meth:`LoginLimiter.end`), and an address has at
most one check in progress: a second attempt meanwhile is refused at once. Checking
first and counting after the ~0.1 s argon2 let 40 concurrent wrong logins from one
address through to 32 password checks against a limit of 3 a minute, and filled the
check queue so that everyone else's login got 503 for 3.5 s (issue 18).

>>> t = [0.0]
>>> lim = LoginLimiter(per_minute=3, per_hour=10, clock=lambda: t[0])
>>> for _ in range(3): lim.failed("192.0.2.7")
>>> lim.retry_after_s("192.0.2.7")
60.0
>>> t[0] = 60.5; lim.retry_after_s("192.0.2.7")
0.0
>>> lim.begin("192.0.2.7"), lim.begin("192.0.2.7")   # one check at a time per address
(0.0, 1.0)
>>> lim.end("192.0.2.7", failed=False); lim.retry_after_s("192.0.2.7")   # it was right: not counted
0.0
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict, deque
from typing import Callable

MINUTE_S = 60.0
HOUR_S = 3600.0
#: Retry-After for an attempt refused because the address has a check in progress
BUSY_RETRY_S = 1.0


def limit_key(addr: str) -> str:
    """The bucket of an address: itself for IPv4, its /64 for IPv6.

    >>> limit_key("2001:db8:1:2:3:4:5:6"), limit_key("192.0.2.7")
    ('2001:db8:1:2::/64', '192.0.2.7')
    """
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else str(ip)


class LoginLimiter:
    def __init__(self, per_minute: int, per_hour: int, clock: Callable[[], float] = time.monotonic,
                 max_addresses: int = 10000) -> None:
        self.per_minute = per_minute
        self.per_hour = per_hour
        self.clock = clock
        self.max_addresses = max_addresses
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._checking: dict[str, float] = {}   # key → when its check in progress was counted

    def _times(self, key: str, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        while times and now - times[0] >= HOUR_S:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def retry_after_s(self, addr: str) -> float:
        """0 when ``addr`` may try to log in now; else how long until it may."""
        now = self.clock()
        key = limit_key(addr)
        times = self._times(key, now)
        if key in self._checking:
            return BUSY_RETRY_S
        if times is None:
            return 0.0
        wait = 0.0
        if len(times) >= self.per_hour:
            wait = max(wait, times[-self.per_hour] + HOUR_S - now)
        recent = [t for t in times if now - t < MINUTE_S]
        if len(recent) >= self.per_minute:
            wait = max(wait, recent[-self.per_minute] + MINUTE_S - now)
        return max(0.0, wait)

    def begin(self, addr: str) -> float:
        """Before a password check: 0 when it may go ahead (it is counted now, as a failure until
        :meth:`end` says otherwise, and ``addr`` has a check in progress until then); else how long to
        wait (over a limit, or a check from this address in progress) and nothing is counted."""
        wait = self.retry_after_s(addr)
        if wait > 0:
            return wait
        key = limit_key(addr)
        self._checking[key] = self._count(key)
        return 0.0

    def end(self, addr: str, failed: bool) -> None:
        """After the check :meth:`begin` allowed: a right password (or no check made after all) takes
        its count back; a failure keeps it."""
        key = limit_key(addr)
        counted = self._checking.pop(key, None)
        if counted is not None and not failed:
            times = self._failures.get(key)
            if times is not None:
                try:
                    times.remove(counted)
                except ValueError:  # already gone (over an hour, or the bounded table forgot it)
                    pass
                if not times:
                    del self._failures[key]

    def failed(self, addr: str) -> None:
        """A failure counted after the fact (an attempt that got no :meth:`begin`: a wrong second factor)."""
        self._count(limit_key(addr))

    def _count(self, key: str) -> float:
        now = self.clock()
        times = self._times(key, now)
        if times is None:
            times = self._failures[key] = deque(maxlen=self.per_hour)
        times.append(now)
        self._failures.move_to_end(key)
        while len(self._failures) > self.max_addresses:
            self._failures.popitem(last=False)
        return now

