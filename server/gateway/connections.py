"""Which connections the gateway keeps when it is full, and a deadline for each request to arrive.

aiohttp has no header-read timeout and keeps idle keep-alive connections for an hour by default
(``keepalive_timeout`` 3,630 s): a hostile review held 2,000 half-open connections that sent headers
one byte at a time. Then (issue 18, item 3) one global cap of 256 was the only defence: 300
slow-header sockets from one address, re-opened as soon as they closed, made 198 of 199 new
connections fail for 40 s, an HTTP e-stop from a new connection among them (reset), and each
refusal logged an aiohttp ``AssertionError`` traceback (33,763 of them, 16 MB of log in 40 s).

A new connection cannot be told apart from the attacker's when it arrives: both are a TCP
handshake from the same address (on loopback the attacker and the operator are both 127.0.0.1).
What tells them apart comes later: a legitimate client sends its headers at once, and a logged-in
one presents a session or a token. So the guard never turns a new connection away while it can
make room, and makes room from the connections that have shown least:

* **limits**: ``max_connections`` in all, of which connections that have not presented valid
  credentials (:meth:`ConnectionGuard.mark_authenticated`, from the trust layer's principal) hold at
  most ``max_connections - reserved_connections``: the reserve is for authenticated ones;
* **who gives way** when a new connection would exceed either: first the connections of an
  address beyond ``max_connections_per_address``, then of a /24 (IPv4) or /64 (IPv6) beyond
  ``max_connections_per_network``, then anyone's; within that, by rank (``RANK_NAMES``; the guard
  notices a request when it looks, at the latest in its 1 s sweep): a connection that has not
  completed its headers after ``GRACE_S`` (slow headers), one that never authenticated and sits
  idle, one that never authenticated and has been served for ``GRACE_S`` (a trickled login body),
  an authenticated idle keep-alive, a busy one of a login session beyond
  ``max_connections_per_session``, a fresh one (no headers yet, younger than ``GRACE_S``), oldest
  first, and last one that never authenticated and has just started a request (an e-stop before the
  trust layer has seen it). Authenticated connections serving a request (a websocket, an e-stop)
  of a session within its share are never evicted; only when nothing may go is the new connection
  refused (503 ``busy``, then FIN);
* **shares, not walls**: an address may exceed its share while there is room, and gives way first
  when there is none. A per-address wall could not save the operator who shares the attacker's
  address (loopback here, a NAT elsewhere), and the smaller the set a fresh connection competes in,
  the sooner a reconnecting attacker's newer connections push it out: with the attack confined to
  its address's 64, 1 of 1,046 e-stops on new connections from a busy client process was reset
  before its bytes arrived; competing among the 224 unauthenticated slots, 0 of 1,337;
* **not before its bytes are read**: a connection whose headers have arrived but not yet been read
  (peeked on its socket) is skipped: it is about to complete them (without this, 2 of 189 e-stops
  on new connections were refused in the slow-header attack, when every connection of the address
  had fresh bytes waiting);
* **deadline**: a connection that has not *completed* a request for ``request_timeout_s`` while no
  request is being handled is closed — a slow-header client, or an idle keep-alive one. A
  connection serving a long request (a websocket, an MJPEG stream) is not idle and is left alone.

Refusals and evictions never log per connection: one line gives the counts every
``connection_log_s``. A refused connection is registered with aiohttp like any other and closed on
the next loop pass (closing it inside ``connection_made`` left aiohttp's request task to fail its
first assertion: the traceback per refusal). In local mode (no users) every loopback client is
the one admin and counts as authenticated once it has completed a request, so what holds there is
the eviction of connections that have not completed their headers, or sit idle, in favour of a
new one (docs/security.md, "Connections and streams").

It patches ``connection_made``/``connection_lost`` on the runner's ``web.Server`` instance (the
protocol factory every connection reports to) and sweeps once a second.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import ipaddress
import logging
import math
import socket
import termios
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from aiohttp import web

log = logging.getLogger(__name__)

_BUSY_BODY = b'{"error": {"code": "busy", "message": "the server is at its connection limits; try again later"}}'
BUSY_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n%b" % (len(_BUSY_BODY), _BUSY_BODY))

LINGER_S = 0.5       # a refused connection is closed this long after its 503 (see _send_busy)
MAX_LINGERING = 64

# eviction ranks, lowest first; a connection with none is never evicted
SLOW, UNAUTHENTICATED_IDLE, UNAUTHENTICATED_BUSY, IDLE, SESSION_EXCESS, FRESH, STARTING = range(7)
RANK_NAMES = ("slow_headers", "unauthenticated_idle", "unauthenticated_busy", "idle", "session_excess", "fresh",
              "starting")
#: a client sends its headers at once (on a LAN within milliseconds; over TLS one round trip after the
#: handshake): a connection that has not completed them after this long is slow, one younger is fresh
GRACE_S = 1.0


def network_of(address: str) -> tuple[str, str]:
    """(address, its /24 or /64) with IPv4-mapped IPv6 as IPv4; anything else is its own network.

    >>> network_of("192.0.2.7"), network_of("2001:db8::1"), network_of("::ffff:127.0.0.1")
    (('192.0.2.7', '192.0.2.0/24'), ('2001:db8::1', '2001:db8::/64'), ('127.0.0.1', '127.0.0.0/24'))
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address, address
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    prefix = 24 if ip.version == 4 else 64
    return str(ip), str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


def request_waiting(transport: asyncio.BaseTransport) -> bool:
    """Have the end of a request's headers arrived on this connection's socket, not yet read by the loop?

    Peeked (``MSG_PEEK``: left for aiohttp to read). A slow-header client's waiting bytes never end
    its headers; a client that sent its request at once is about to complete them. Over TLS the
    bytes are encrypted: any waiting bytes count.
    """
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    buf = array.array("i", [0])
    try:
        fd = sock.fileno()
        fcntl.ioctl(fd, termios.FIONREAD, buf, True)
        if buf[0] <= 0:
            return False
        if transport.get_extra_info("sslcontext") is not None:
            return True
        peek = socket.socket(fileno=fd)  # a second object on the same descriptor, detached (not closed) below
        try:
            data = peek.recv(min(buf[0], 16384), socket.MSG_PEEK | socket.MSG_DONTWAIT)
        finally:
            peek.detach()
    except (OSError, ValueError):
        return False
    return b"\r\n\r\n" in data or data.startswith((b"\r\n", b"\n"))


class Group:
    """Connections of one scope (an address, a network, all), in the order they opened: those that have
    not completed a request's headers yet (``fresh``) apart from the others (``requested``)."""

    __slots__ = ("fresh", "requested")

    def __init__(self) -> None:
        self.fresh: dict[Any, Conn] = {}
        self.requested: dict[Any, Conn] = {}

    def __len__(self) -> int:
        return len(self.fresh) + len(self.requested)


@dataclass(eq=False)
class Conn:
    """One connection in the guard's books."""

    handler: Any
    transport: asyncio.Transport
    address: str
    network: str
    opened: float
    since: float                 # when ``count`` last changed (``opened`` until a request completes)
    groups: tuple[Group, ...] = ()
    count: int = 0               # requests whose headers were complete, at the last look
    authenticated: bool = False  # a request on it presented valid credentials (local mode: a local client)
    session: str | None = None   # the login session it presented (None in local mode)

    def look(self, now: float) -> bool:
        """Refresh ``count``/``since`` from aiohttp's handler; True while a request is being handled."""
        count = getattr(self.handler, "_request_count", 0)
        if count != self.count:
            if not self.count:
                self.promote()
            self.count, self.since = count, now
        return getattr(self.handler, "_current_request", None) is not None or bool(getattr(self.handler, "_messages",
                                                                                           None))

    def promote(self) -> None:
        for g in self.groups:
            if g.fresh.pop(self.handler, None) is not None:
                g.requested[self.handler] = self

    def rank(self, now: float, session_over: bool = False) -> int | None:
        """Its eviction rank (``RANK_NAMES``; None: never); ``session_over``: its session holds more
        connections than its share."""
        busy = self.look(now)
        young = now - self.since < GRACE_S
        if self.authenticated:
            if not busy:
                return IDLE
            return SESSION_EXCESS if session_over else None
        if busy:
            return STARTING if young else UNAUTHENTICATED_BUSY
        if self.count:
            return UNAUTHENTICATED_IDLE
        return FRESH if young else SLOW


@dataclass
class Window:
    """Refusals and evictions since the last log line."""

    refused: int = 0
    evicted: dict[str, int] = field(default_factory=dict)

    def empty(self) -> bool:
        return not self.refused and not self.evicted


class ConnectionGuard:
    def __init__(self, max_connections: int, request_timeout_s: float, *, per_address: int | None = None,
                 per_network: int | None = None, per_session: int | None = None, reserved: int = 0, log_every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_connections = max_connections
        self.per_address = per_address or max_connections
        self.per_network = per_network or max_connections
        self.reserved = reserved
        self.request_timeout_s = request_timeout_s
        self.log_every_s = log_every_s
        self.clock = clock
        self.refused = 0
        self.timed_out = 0
        self.evicted = dict.fromkeys(RANK_NAMES, 0)
        self._conns: dict[Any, Conn] = {}  # handler → Conn
        self._all = Group()
        self._by_address: dict[str, Group] = {}
        self._by_network: dict[str, Group] = {}
        self._unauthenticated = 0
        self.per_session = per_session or max_connections
        self._sessions: dict[str, int] = {}  # login session → its connections
        self._lingering = 0
        self._window = Window()
        self._logged_at = -math.inf
        self._server: web.Server | None = None
        self._task: asyncio.Task | None = None

    @classmethod
    def from_config(cls, scfg: Any) -> "ConnectionGuard":
        """From the ``[server]`` table (:class:`server.settings.ServerConfig`)."""
        return cls(scfg.max_connections, scfg.request_timeout_s, per_address=scfg.max_connections_per_address,
                   per_network=scfg.max_connections_per_network, per_session=scfg.max_connections_per_session,
                   reserved=scfg.reserved_connections,
                   log_every_s=scfg.connection_log_s)

    # ------------------------------------------------------------------ aiohttp's connection callbacks
    def install(self, server: web.Server) -> None:
        self._server = server
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)  # registered like any other: aiohttp's own lifecycle runs unchanged
            if not self._admit(handler, transport):
                transport.pause_reading()  # aiohttp never sees its request
                # not now: aiohttp creates the request task after this returns, and a transport closed
                # before that task first runs fails its assertions (the traceback per refusal)
                asyncio.get_running_loop().call_soon(self._send_busy, transport)

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            self._forget(handler)
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def mark_authenticated(self, handler: Any, session: str | None = None) -> None:
        """A request on this connection presented valid credentials (of login ``session``): it may use the
        reserve, and is no longer evicted while it serves a request, unless its session holds more than
        ``per_session`` connections."""
        conn = self._conns.get(handler)
        if conn is not None and not conn.authenticated:
            conn.authenticated = True
            conn.promote()
            self._unauthenticated -= 1
            if session is not None:
                conn.session = session
                self._sessions[session] = self._sessions.get(session, 0) + 1

    # ------------------------------------------------------------------ admission
    def _admit(self, handler: Any, transport: asyncio.Transport) -> bool:
        peer = transport.get_extra_info("peername")
        address, network = network_of(peer[0] if isinstance(peer, tuple) and peer else "?")
        now = self.clock()
        while True:
            if self._unauthenticated >= self.max_connections - self.reserved:
                authenticated_too = False  # the reserve is for connections that authenticated
            elif len(self._conns) >= self.max_connections:
                authenticated_too = True
            else:
                break
            victim = self._victim(authenticated_too, now)
            if victim is None:
                self._note_refused(now)
                return False
            self._evict(victim, now)
        groups = (self._all, self._by_address.setdefault(address, Group()), self._by_network.setdefault(network, Group()))
        conn = Conn(handler, transport, address, network, opened=now, since=now, groups=groups)
        self._conns[handler] = conn
        for g in groups:
            g.fresh[handler] = conn
        self._unauthenticated += 1
        self._maybe_log(now)
        return True

    def _victim(self, authenticated_too: bool, now: float) -> Conn | None:
        """Who gives way: first the connections of addresses beyond their share (most beyond first), then
        of networks beyond theirs, then anyone's; within a scope :meth:`_best`."""
        over = [g for g in self._by_address.values() if len(g) > self.per_address]
        over.sort(key=len, reverse=True)
        nets = [g for g in self._by_network.values() if len(g) > self.per_network]
        nets.sort(key=len, reverse=True)
        for group in (*over, *nets, self._all):
            victim = self._best(group, authenticated_too, now)
            if victim is not None:
                return victim
        return None

    def _best(self, group: Group, authenticated_too: bool, now: float) -> Conn | None:
        """The lowest rank (``RANK_NAMES``), oldest first: slow headers, unauthenticated idle, unauthenticated
        and served for a while, authenticated idle, fresh, unauthenticated and just started. Never an
        authenticated connection serving a request, nor one whose request is waiting on its socket."""
        ranked: list[tuple[int, float, Conn]] = []
        for c in list(group.fresh.values()):  # oldest first: the first one still without headers is the one
            rank = c.rank(now)
            if rank is None or c.count:  # it has completed a request meanwhile (now in ``requested``)
                if rank is not None and (authenticated_too or not c.authenticated):
                    ranked.append((rank, c.since, c))
                continue
            if not request_waiting(c.transport):
                if rank == SLOW:
                    return c
                ranked.append((rank, c.opened, c))
                break
        for c in list(group.requested.values()):
            if c.authenticated and not authenticated_too:
                continue
            rank = c.rank(now, c.session is not None and self._sessions.get(c.session, 0) > self.per_session)
            if rank is not None:
                ranked.append((rank, c.since, c))
        ranked.sort(key=lambda e: (e[0], e[1]))
        return next((c for rank, _, c in ranked if rank in (SLOW, FRESH) or not request_waiting(c.transport)), None)

    def _evict(self, conn: Conn, now: float) -> None:
        rank = conn.rank(now)
        name = RANK_NAMES[rank if rank is not None else IDLE]
        self.evicted[name] += 1
        self._window.evicted[name] = self._window.evicted.get(name, 0) + 1
        self._forget(conn.handler)
        conn.transport.abort()

    def _forget(self, handler: Any) -> None:
        conn = self._conns.pop(handler, None)
        if conn is None:
            return
        for g in conn.groups:
            g.fresh.pop(handler, None)
            g.requested.pop(handler, None)
        for index, key in ((self._by_address, conn.address), (self._by_network, conn.network)):
            if not index.get(key, True):
                del index[key]
        if not conn.authenticated:
            self._unauthenticated -= 1
        elif conn.session is not None:
            left = self._sessions.pop(conn.session) - 1
            if left:
                self._sessions[conn.session] = left

    def _send_busy(self, transport: asyncio.Transport) -> None:
        """503 ``busy``, then FIN, and the socket closed ``LINGER_S`` later: closed at once with the
        client's request unread, the kernel would reset the connection and the client could lose the
        answer (at most ``MAX_LINGERING`` at a time; beyond, closed at once)."""
        if transport.is_closing():
            return
        transport.write(BUSY_RESPONSE)
        if self._lingering >= MAX_LINGERING or not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._lingering += 1

        def end() -> None:
            self._lingering -= 1
            transport.abort()

        asyncio.get_running_loop().call_later(LINGER_S, end)

    # ------------------------------------------------------------------ the log: counts, not lines
    def _note_refused(self, now: float) -> None:
        self.refused += 1
        self._window.refused += 1
        self._maybe_log(now)

    def _maybe_log(self, now: float) -> None:
        if self._window.empty() or now - self._logged_at < self.log_every_s:
            return
        w, self._window = self._window, Window()
        first = self._logged_at == -math.inf
        self._logged_at = now
        evicted = ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in w.evicted.items()) or "none"
        log.warning("connection limits: %d refused, evicted %s %s; %d open (%d unauthenticated; caps %d, "
                    "%d per address, %d per network, %d reserved)", w.refused, evicted,
                    "(first at the limits)" if first else f"in the last {self.log_every_s:g} s",
                    len(self._conns), self._unauthenticated, self.max_connections, self.per_address,
                    self.per_network, self.reserved)

    # ------------------------------------------------------------------ the deadline
    def sweep(self) -> int:
        """Close connections idle past the deadline; returns how many."""
        now = self.clock()
        closed = 0
        for conn in list(self._conns.values()):
            busy = conn.look(now)
            if not busy and now - conn.since > self.request_timeout_s:
                self._forget(conn.handler)
                conn.transport.abort()
                closed += 1
        if closed:
            self.timed_out += closed
            log.info("closed %d connection(s) with no request for %g s", closed, self.request_timeout_s)
        self._maybe_log(now)
        return closed

    async def run(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.sweep()

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="connection-guard")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        return {"connections": len(self._conns), "unauthenticated": self._unauthenticated,
                "max_connections": self.max_connections, "per_address": self.per_address,
                "per_network": self.per_network, "per_session": self.per_session, "reserved": self.reserved, "refused": self.refused,
                "evicted": dict(self.evicted), "timed_out": self.timed_out,
                "busiest_addresses": self._busiest(self._by_address), "busiest_networks": self._busiest(self._by_network)}

    @staticmethod
    def _busiest(index: dict[str, Group], n: int = 10) -> dict[str, int]:
        return dict(sorted(((key, len(group)) for key, group in index.items()), key=lambda kv: -kv[1])[:n])


GUARD = web.AppKey("connection_guard", ConnectionGuard)


def authenticated_middleware(principal: Callable[[web.Request], Any]) -> Callable:
    """A middleware (placed after the trust layer's) that tells the app's guard which connections
    presented valid credentials, and of which session: ``principal(request)`` (a
    :class:`~server.gateway.auth.Principal` or None)."""

    @web.middleware
    async def mark(request: web.Request, handler: Callable) -> web.StreamResponse:
        guard = request.app.get(GUARD)
        who = principal(request) if guard is not None else None
        if who is not None:
            guard.mark_authenticated(request.protocol, getattr(who, "session_id", None))
        return await handler(request)

    return mark


__all__ = ["GUARD", "ConnectionGuard", "authenticated_middleware", "network_of", "request_waiting"]
