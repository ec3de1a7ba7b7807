"""The connection guard's choice of who gives way, in process: stand-in aiohttp handlers and transports,
an injected clock (the real server and the attacks are in ``test_connections.py``)."""

from __future__ import annotations

import collections
from typing import Any

from server.gateway.connections import GRACE_S, ConnectionGuard


class Transport:
    def __init__(self, address: str) -> None:
        self.address = address
        self.aborted = False

    def get_extra_info(self, name: str) -> Any:
        return (self.address, 40000) if name == "peername" else None  # no socket: nothing to peek

    def abort(self) -> None:
        self.aborted = True


class Handler:
    """What the guard reads of aiohttp's RequestHandler."""

    def __init__(self) -> None:
        self._request_count = 0
        self._current_request = None
        self._messages: collections.deque = collections.deque()

    def request(self, busy: bool) -> None:
        self._request_count += 1
        self._current_request = object() if busy else None


class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


def guard(max_connections: int, reserved: int = 0, **shares: int) -> tuple[ConnectionGuard, Clock]:
    clock = Clock()
    return ConnectionGuard(max_connections, 60.0, reserved=reserved, clock=clock, **shares), clock


def connect(g: ConnectionGuard, address: str = "192.0.2.1") -> tuple[Handler, Transport, bool]:
    h, t = Handler(), Transport(address)
    return h, t, g._admit(h, t)


def test_who_gives_way_first_in_order() -> None:
    g, clock = guard(7)
    slow = connect(g)            # no headers, for over a second by the time it matters
    unauth_idle = connect(g)
    unauth_idle[0].request(busy=False)
    unauth_busy = connect(g)     # a login body trickling in, say
    unauth_busy[0].request(busy=True)
    idle = connect(g)
    idle[0].request(busy=False)
    g.mark_authenticated(idle[0], "s1")
    serving = connect(g)         # an authenticated request being served: never
    serving[0].request(busy=True)
    g.mark_authenticated(serving[0], "s2")
    g.sweep()                    # the guard notices the requests (it reads aiohttp's counters when it looks)
    clock.t += GRACE_S + 1
    fresh = connect(g)           # no headers yet, just now
    starting = connect(g)        # headers just complete, the trust layer has not seen it yet
    starting[0].request(busy=True)
    everyone = [slow, unauth_idle, unauth_busy, idle, fresh, starting, serving]
    order = []
    for _ in range(5):
        assert connect(g, "198.51.100.9")[2]
        order += [c for c in everyone if c[1].aborted and c not in order]
    assert order == [slow, unauth_idle, unauth_busy, idle, fresh]
    newest = connect(g, "198.51.100.9")  # the oldest fresh one now is the first newcomer, not ``starting``
    assert newest[2] and not starting[1].aborted and not serving[1].aborted
    assert g.stats()["evicted"] == {"slow_headers": 1, "unauthenticated_idle": 1, "unauthenticated_busy": 1,
                                    "idle": 1, "session_excess": 0, "fresh": 2, "starting": 0}


def test_with_only_served_authenticated_connections_a_new_one_is_refused() -> None:
    g, _ = guard(2)
    for session in ("a", "b"):
        h, _, _ = connect(g)
        h.request(busy=True)
        g.mark_authenticated(h, session)
    assert connect(g)[2] is False and g.refused == 1


def test_a_session_beyond_its_share_gives_way_even_while_served() -> None:
    g, _ = guard(3, per_session=1)
    hog = []
    for _ in range(2):
        h, t, _ = connect(g)
        h.request(busy=True)
        g.mark_authenticated(h, "viewer")
        hog.append(t)
    h, t, _ = connect(g)
    h.request(busy=True)
    g.mark_authenticated(h, "operator")
    assert connect(g)[2] and hog[0].aborted and not t.aborted


def test_the_reserve_is_only_for_authenticated_connections() -> None:
    g, _ = guard(5, reserved=2)
    served = []
    h, t, _ = connect(g)
    h.request(busy=True)
    g.mark_authenticated(h, "a")
    served.append(t)
    silent = [connect(g) for _ in range(3)]  # the unauthenticated share (5 - 2) is full; one slot left in all
    assert connect(g)[2] and silent[0][1].aborted  # an unauthenticated one made room: the slot stays reserved
    assert not any(t.aborted for t in served)
    assert g.stats()["unauthenticated"] == 3 and g.stats()["connections"] == 4


def test_when_full_the_address_beyond_its_share_gives_way_first() -> None:
    g, _ = guard(4, per_address=2)
    hog = [connect(g, "192.0.2.1") for _ in range(3)]
    other = connect(g, "198.51.100.7")   # older than none of the hog's but the hog is beyond its share
    assert connect(g, "198.51.100.8")[2]
    assert hog[0][1].aborted and not other[1].aborted
