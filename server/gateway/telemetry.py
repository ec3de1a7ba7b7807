"""Telemetry fan-out: a snapshot serialised once (by the runtime), one latest-wins slot per client.

The runtime serialises each snapshot once; the gateway forwards those bytes to every client
wrapped in the ``{"type": "telemetry", ...}`` envelope, without parsing them. The producer
never awaits a client: it swaps the new message into each client's
one-slot mailbox (counting a drop when the previous one was never sent) and
sets an event. Each client has its own writer task, so one slow browser can only
fall behind itself. Control replies and safety events go through a small
bounded queue per client that the writer sends before the next snapshot.
"""

from __future__ import annotations

import asyncio
import collections
import logging

import orjson
import time
import weakref
from typing import Any

from aiohttp import WSCloseCode, web

log = logging.getLogger(__name__)

MAX_CONTROL_QUEUE = 256


def dumps(obj: Any) -> str:
    """Compact JSON; NaN/inf become null (JSON has no NaN). orjson: ~10× faster than the stdlib here,
    which matters because the snapshot is serialised on the event loop at the telemetry rate."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode()


class TelemetryClient:
    """One websocket subscriber: a latest-wins telemetry slot plus a bounded control queue."""

    def __init__(self, ws: web.WebSocketResponse, peer: str, transport: asyncio.Transport | None = None) -> None:
        self.ws = ws
        self.peer = peer
        self.transport = transport
        self.send_since: float | None = None  # monotonic start of the send in progress (None: not sending)
        self.bucket = None  # the reader's TokenBucket (server.ratelimit), for stats
        self.drained = asyncio.Event()  # set while nothing is queued or being sent
        self.slot: str | None = None
        self.control: collections.deque[str] = collections.deque(maxlen=MAX_CONTROL_QUEUE)
        self.wake = asyncio.Event()
        self.dropped = 0
        self.sent = 0
        self.task: asyncio.Task | None = None  # the writer, owned by the websocket handler

    async def flush_then_close(self, timeout_s: float) -> None:
        """Give the writer up to ``timeout_s`` to send what is queued (the final snapshot), then close."""
        try:
            await asyncio.wait_for(self.drained.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        await self.close_going_away()

    async def close_going_away(self) -> None:
        """Stop the writer first (no frame may interleave with the close frame), then close with 1001."""
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")

    def offer(self, data_json: str) -> None:
        if self.slot is not None:
            self.dropped += 1
        self.slot = data_json
        self.drained.clear()
        self.wake.set()

    def send_control(self, message: dict[str, Any] | str) -> None:
        self.control.append(message if isinstance(message, str) else dumps(message))
        self.drained.clear()
        self.wake.set()

    async def _send(self, text: str) -> None:
        self.send_since = time.monotonic()
        await self.ws.send_str(text)
        self.send_since = None

    async def writer(self) -> None:
        ws = self.ws
        try:
            while not ws.closed:
                await self.wake.wait()
                self.wake.clear()
                while self.control and not ws.closed:
                    await self._send(self.control.popleft())
                data, self.slot = self.slot, None
                if data is not None and not ws.closed:
                    await self._send(f'{{"type":"telemetry","dropped":{self.dropped},"data":{data}}}')
                    self.sent += 1
                if self.slot is None and not self.control:
                    self.drained.set()
        except (ConnectionResetError, RuntimeError, asyncio.CancelledError):
            pass

    def stuck_for(self, now: float) -> float:
        """How long the send in progress has waited for the peer to read (0 when not sending)."""
        since = self.send_since
        return 0.0 if since is None else now - since

    def abort(self) -> None:
        """Drop the connection at once (a peer that does not read cannot be sent a close frame)."""
        if self.transport is not None:
            self.transport.abort()
        if self.task is not None:
            self.task.cancel()


class TelemetryHub:
    """Offers each snapshot to every client (latest wins) and queues events for all of them."""

    def __init__(self, max_clients: int = 100, writer_stall_s: float = 10.0) -> None:
        self.max_clients = max_clients
        self.writer_stall_s = writer_stall_s
        self.closed_stalled = 0
        self._sweeper: asyncio.Task | None = None
        self.clients: weakref.WeakSet[TelemetryClient] = weakref.WeakSet()
        self.published = 0
        self.last: str | None = None

    def publish(self, data_json: str) -> None:
        """A new snapshot (JSON text, as serialised by the runtime) for every client."""
        self.last = data_json
        self.published += 1
        for c in list(self.clients):
            c.offer(data_json)

    def broadcast(self, message: dict[str, Any]) -> None:
        """Queue a control-plane message (an event) for every client."""
        text = dumps(message)
        for c in list(self.clients):
            c.send_control(text)

    def sweep(self, now: float | None = None) -> int:
        """Close every client whose writer has not made progress for ``writer_stall_s`` (it holds a
        slot without reading, whatever it sends); returns how many."""
        now = time.monotonic() if now is None else now
        stuck = [c for c in list(self.clients) if c.stuck_for(now) > self.writer_stall_s]
        for c in stuck:
            log.warning("telemetry client %s has not read for %.1f s: closing it", c.peer, c.stuck_for(now))
            self.clients.discard(c)
            c.abort()
        self.closed_stalled += len(stuck)
        return len(stuck)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.writer_stall_s / 2))
            self.sweep()

    async def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="telemetry-sweeper")

    async def stop(self) -> None:
        """Let each writer send what is queued (the last snapshot shows the halt), then close with 1001."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        clients = list(self.clients)
        self.clients.clear()
        for c in clients:  # let each writer send what is queued, briefly, before the close frame
            c.wake.set()
        await asyncio.sleep(0)
        await asyncio.gather(*(c.flush_then_close(0.5) for c in clients), return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        clients = list(self.clients)
        return {
            "clients": len(clients),
            "published": self.published,
            "dropped": sum(c.dropped for c in clients),
            "closed_stalled": self.closed_stalled,
            "t": time.time(),
        }
