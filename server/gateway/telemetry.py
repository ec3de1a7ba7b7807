"""Telemetry fan-out: a snapshot serialised once (by the runtime), one latest-wins slot per client.

The runtime serialises each snapshot once; the gateway forwards those bytes to every client
wrapped in the ``{"type": "telemetry", ...}`` envelope, without parsing them. The producer
never awaits a client. A client that is idle (nothing queued, nothing being sent, an empty
socket buffer, no compression negotiated) gets the websocket frame written straight to its
transport: the frame is built once per snapshot and shared by every such client (as the
``websockets`` library's ``broadcast()`` does), so a snapshot to N clients costs N
``transport.write`` calls and no task switch. Any other client gets the snapshot swapped into
its one-slot mailbox (counting a drop when the previous one was never sent), and its own writer
task sends it, so one slow browser can only fall behind itself. Control replies and safety
events go through a small bounded queue per client that the writer sends before the next
snapshot.
"""

from __future__ import annotations

import asyncio
import collections
import logging

import struct
import time
import weakref
from typing import Any

import orjson

from aiohttp import WSCloseCode, web

log = logging.getLogger(__name__)

MAX_CONTROL_QUEUE = 256


def text_frame(payload: bytes) -> bytes:
    """One unmasked, uncompressed websocket text frame (RFC 6455 §5.2: a server never masks).

    >>> text_frame(b"hi")
    b'\\x81\\x02hi'
    >>> text_frame(b"x" * 200)[:4]
    b'\\x81~\\x00\\xc8'
    >>> text_frame(b"x" * 70000)[:10] == bytes([0x81, 127]) + (70000).to_bytes(8, "big")
    True
    """
    n = len(payload)
    if n < 126:
        return struct.pack("!BB", 0x81, n) + payload
    if n < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, n) + payload
    return struct.pack("!BBQ", 0x81, 127, n) + payload


class Frames:
    """The telemetry message for one snapshot, built at most once per distinct ``dropped`` count."""

    __slots__ = ("data", "_by_dropped")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._by_dropped: dict[int, bytes] = {}

    def text(self, dropped: int) -> str:
        return f'{{"type":"telemetry","dropped":{dropped},"data":{self.data.decode()}}}'

    def frame(self, dropped: int) -> bytes:
        frame = self._by_dropped.get(dropped)
        if frame is None:
            frame = self._by_dropped[dropped] = text_frame(
                b'{"type":"telemetry","dropped":%d,"data":%b}' % (dropped, self.data))
        return frame


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
        self.slot: Frames | None = None
        self.control: collections.deque[str] = collections.deque(maxlen=MAX_CONTROL_QUEUE)
        self.wake = asyncio.Event()
        self.dropped = 0
        self.sent = 0
        self.direct = 0  # of ``sent``: written as the snapshot's shared frame (see the module docstring)
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

    def offer(self, frames: Frames) -> None:
        if self._write_now(frames):
            return
        if self.slot is not None:
            self.dropped += 1
        self.slot = frames
        self.drained.clear()
        self.wake.set()

    def _write_now(self, frames: Frames) -> bool:
        """Write the snapshot's shared frame straight to the socket when nothing could be interleaved or
        held back: no send in progress, nothing queued, the socket buffer empty and no compression
        negotiated (a compressed stream's frames are the writer's). False: the writer task sends it."""
        transport = self.transport
        ws = self.ws
        if (self.send_since is not None or self.control or self.slot is not None or transport is None
                or self.task is None or ws.closed or ws.compress or transport.is_closing()
                or transport.get_write_buffer_size()):
            return False
        transport.write(frames.frame(self.dropped))
        self.sent += 1
        self.direct += 1
        return True

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
                frames, self.slot = self.slot, None
                if frames is not None and not ws.closed:
                    await self._send(frames.text(self.dropped))
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

    def publish(self, data: bytes) -> None:
        """A new snapshot (JSON bytes, as serialised by the runtime) for every client."""
        self.published += 1
        frames = Frames(data)
        for c in list(self.clients):
            c.offer(frames)

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
