"""Per-address limits on failed logins (OctoPrint-style): N a minute and M an hour.

Only failures count (a right password does not wipe the record: that would reset an
attacker's budget); while an address is over either limit every login attempt from
it is refused with 429 before any password is checked (so the limit also bounds the
CPU an attacker can spend on argon2). IPv6 clients are counted per /64, the block one
host usually gets. Memory is bounded: at most ``max_addresses`` are tracked, the
least recently failed forgotten first.

>>> t = [0.0]
>>> lim = LoginLimiter(per_minute=3, per_hour=10, clock=lambda: t[0])
>>> for _ in range(3): lim.failed("192.0.2.7")
>>> lim.retry_after_s("192.0.2.7")
60.0
>>> t[0] = 60.5; lim.retry_after_s("192.0.2.7")
0.0
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict, deque
from typing import Callable

MINUTE_S = 60.0
HOUR_S = 3600.0


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
        times = self._times(limit_key(addr), now)
        if times is None:
            return 0.0
        wait = 0.0
        if len(times) >= self.per_hour:
            wait = max(wait, times[-self.per_hour] + HOUR_S - now)
        recent = [t for t in times if now - t < MINUTE_S]
        if len(recent) >= self.per_minute:
            wait = max(wait, recent[-self.per_minute] + MINUTE_S - now)
        return max(0.0, wait)

    def failed(self, addr: str) -> None:
        now = self.clock()
        key = limit_key(addr)
        times = self._times(key, now)
        if times is None:
            times = self._failures[key] = deque(maxlen=self.per_hour)
        times.append(now)
        self._failures.move_to_end(key)
        while len(self._failures) > self.max_addresses:
            self._failures.popitem(last=False)

