"""A cap on connections and a deadline for each request to arrive.

aiohttp has no header-read timeout and keeps idle keep-alive connections for an hour by
default (``keepalive_timeout`` 3,630 s): a hostile review held 2,000 half-open connections
that sent headers one byte at a time. The guard:

* refuses (closes at once) a connection beyond ``max_connections``;
* closes a connection that has not *completed* a request for ``request_timeout_s`` while no
  request is being handled — a slow-header client, or an idle keep-alive one. A connection
  serving a long request (a websocket, an MJPEG stream) is not idle and is left alone.

It patches ``connection_made``/``connection_lost`` on the runner's ``web.Server`` instance
(the protocol factory every connection reports to) and sweeps once a second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from aiohttp import web

log = logging.getLogger(__name__)


class ConnectionGuard:
    def __init__(self, max_connections: int, request_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s
        self.clock = clock
        self.refused = 0
        self.timed_out = 0
        self._seen: dict[Any, tuple[int, float]] = {}  # handler → (requests completed, when that changed)
        self._server: web.Server | None = None
        self._task: asyncio.Task | None = None
        self._at_cap = False

    def install(self, server: web.Server) -> None:
        self._server = server
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            if len(server.connections) >= self.max_connections:
                self.refused += 1
                if not self._at_cap:
                    log.warning("connection cap reached (%d): refusing new connections", self.max_connections)
                    self._at_cap = True
                transport.abort()
                return
            self._seen[handler] = (0, self.clock())
            made(handler, transport)

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            self._seen.pop(handler, None)
            if self._at_cap and len(server.connections) < self.max_connections * 0.9:
                log.info("connections back under the cap")
                self._at_cap = False
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def sweep(self) -> int:
        """Close connections idle past the deadline; returns how many."""
        server = self._server
        if server is None:
            return 0
        now = self.clock()
        closed = 0
        for handler, transport in list(server._connections.items()):
            count = getattr(handler, "_request_count", 0)
            seen = self._seen.get(handler)
            if seen is None or seen[0] != count:
                self._seen[handler] = (count, now)
                continue
            busy = getattr(handler, "_current_request", None) is not None
            if not busy and now - seen[1] > self.request_timeout_s:
                transport.abort()
                self._seen.pop(handler, None)
                closed += 1
        if closed:
            self.timed_out += closed
            log.info("closed %d connection(s) with no request for %g s", closed, self.request_timeout_s)
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
        server = self._server
        return {"connections": len(server.connections) if server else 0, "max_connections": self.max_connections,
                "refused": self.refused, "timed_out": self.timed_out}
