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
import fcntl
import logging
import struct
import time
import weakref
from typing import Any

import orjson

from aiohttp import WSCloseCode, web

from server.gateway.latest import LatestWriter, StallSweeper
from server.gateway.subscription import Subscription, diff

log = logging.getLogger(__name__)

MAX_CONTROL_QUEUE = 256  # control replies and events a client keeps at most (the oldest goes first)
#: linux/sockios.h: the bytes a TCP socket holds that it has not sent yet
SIOCOUTQNSD = 0x894B


def kernel_unsent(sock: object) -> int:
    """Bytes the kernel holds unsent for ``sock`` (0 where it cannot say: not TCP, not Linux)."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), SIOCOUTQNSD, b"\0\0\0\0"))[0]  # type: ignore[attr-defined]
    except (OSError, ValueError, AttributeError):
        return 0


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
    """The telemetry message for one snapshot, built at most once per distinct ``dropped`` count; for subscribed
    clients (:mod:`server.gateway.subscription`) the snapshot parsed once and each subscription's part of it
    selected and serialised once."""

    __slots__ = ("data", "t", "_by_dropped", "_parsed", "_selected")

    def __init__(self, data: bytes, t: float | None = None) -> None:
        self.data = data
        self.t = time.monotonic() if t is None else t  # when the gateway got it (its age counts from here)
        self._by_dropped: dict[int, bytes] = {}
        self._parsed: dict[str, Any] | None = None
        self._selected: dict[tuple[Any, ...], tuple[dict[str, Any], bytes]] = {}

    @property
    def parsed(self) -> dict[str, Any]:
        if self._parsed is None:
            self._parsed = orjson.loads(self.data)
        return self._parsed

    def selected(self, sub: Subscription) -> tuple[dict[str, Any], bytes]:
        """The subscription's part of the snapshot and its JSON, shared by every client with the same selection."""
        key = sub.key()
        hit = self._selected.get(key)
        if hit is None:
            part = sub.select(self.parsed)
            hit = self._selected[key] = (part, orjson.dumps(part))
        return hit

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


class TelemetryClient(LatestWriter[Frames]):
    """One websocket subscriber: a latest-wins telemetry slot plus a bounded control queue
    (:class:`~server.gateway.latest.LatestWriter`), and the shared frame written straight to an idle socket."""

    def __init__(self, ws: web.WebSocketResponse, peer: str, transport: asyncio.Transport | None = None, *,
                 max_age_s: float = 0.0, source_rate_hz: float = 50.0) -> None:
        backlog = None
        if transport is not None and max_age_s > 0:
            sock = transport.get_extra_info("socket")
            # the writer's buffer and the kernel's unsent bytes: a snapshot goes out only onto an empty socket,
            # so it never waits behind older ones (16 KiB unsent were ~0.4 s of age on 4g with a download)
            backlog = (lambda: transport.get_write_buffer_size() + kernel_unsent(sock)) if sock is not None \
                else transport.get_write_buffer_size
        super().__init__(ws.send_str, transport, name=peer, max_priority=MAX_CONTROL_QUEUE, backlog=backlog,
                         max_age_s=max_age_s)
        self.ws = ws
        self.peer = peer
        self.bucket = None  # the reader's TokenBucket (server.ratelimit), for stats
        self.direct = 0  # of ``sent``: written as the snapshot's shared frame (see the module docstring)
        self.task: asyncio.Task | None = None  # the writer, owned by the websocket handler
        self.stream: Any = None  # its commands' CommandStream (server.gateway.link), for stats
        # issue 20 §5: what it subscribed to (None: every snapshot in full, as before), the decimation schedule
        self.subscription: Subscription | None = None
        self.subscribes = 0
        self.decimated = 0  # snapshots skipped to keep to its rate_hz (not ``dropped``: never meant for it)
        self.keyframes = 0
        self.bytes_sent = 0  # telemetry message bytes of its subscription (before any compression)
        self.tcp: dict[str, Any] | None = None  # the kernel's measure of its socket (ws_telemetry.tcp_report)
        self._next_due = 0.0
        self._tolerance_s = 0.5 / max(source_rate_hz, 1e-3)  # half a snapshot period: jitter never skips one
        self._last: dict[str, Any] | None = None  # the delta encoding's base: the part last sent
        self._since_key = 0

    @property
    def closed(self) -> bool:
        return self._aborted or self.ws.closed

    async def flush_then_close(self, timeout_s: float, code: int = WSCloseCode.GOING_AWAY,
                               message: bytes = b"server shutdown") -> None:
        """Give the writer up to ``timeout_s`` to send what is queued (the final snapshot, the error that says why
        the socket closes), then close."""
        try:
            await asyncio.wait_for(self.drained.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        await self.close_going_away(code, message)

    async def close_going_away(self, code: int = WSCloseCode.GOING_AWAY, message: bytes = b"server shutdown") -> None:
        """Stop the writer first (no frame may interleave with the close frame), then close (1001 by default)."""
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.ws.close(code=code, message=message)

    def subscribe(self, sub: Subscription) -> None:
        """Use ``sub`` from the next snapshot on: the schedule restarts and a delta stream starts with a keyframe."""
        self.subscription = sub
        self.subscribes += 1
        self._next_due = 0.0
        self._last = None

    def offer(self, frames: Frames) -> None:
        sub = self.subscription
        if sub is None:
            if not self._write_now(frames):
                super().offer(frames)
            return
        if not self._due(frames.t, 1.0 / sub.rate_hz):
            self.decimated += 1
            return
        super().offer(frames)

    def _due(self, t: float, period_s: float) -> bool:
        """Whether a snapshot received at ``t`` goes to this client: one per ``period_s`` on a fixed schedule (so
        10 Hz out of 50 is every fifth, whatever the jitter), re-anchored after a gap."""
        if t < self._next_due - self._tolerance_s:
            return False
        self._next_due = self._next_due + period_s if t - self._next_due < period_s else t + period_s
        return True

    def slot_message(self, frames: Frames) -> str:
        sub = self.subscription
        if sub is None:
            return frames.text(self.dropped)
        part, data = frames.selected(sub)
        if sub.encoding == "json":
            text = f'{{"type":"telemetry","dropped":{self.dropped},"data":{data.decode()}}}'
        elif self._last is None or self._since_key + 1 >= sub.keyframe_every:
            self._since_key = 0
            self.keyframes += 1
            text = f'{{"type":"telemetry","dropped":{self.dropped},"encoding":"delta","key":true,' \
                   f'"data":{data.decode()}}}'
        else:
            self._since_key += 1
            patch, deleted = diff(self._last, part)
            text = f'{{"type":"telemetry","dropped":{self.dropped},"encoding":"delta","data":{dumps(patch)}' + \
                (f',"deleted":{dumps(deleted)}}}' if deleted else "}")
        self._last = part
        self.bytes_sent += len(text)
        return text

    def subscription_json(self) -> dict[str, Any]:
        """For ``GET /api/telemetry``'s per-client entry."""
        sub = self.subscription
        return {"subscription": None if sub is None else sub.to_json(), "subscribes": self.subscribes,
                "decimated": self.decimated, "keyframes": self.keyframes, "bytes_sent": self.bytes_sent}

    def item_age(self, frames: Frames) -> float:
        return time.monotonic() - frames.t

    def _write_now(self, frames: Frames) -> bool:
        """Write the snapshot's shared frame straight to the socket when nothing could be interleaved or
        held back: no send in progress, nothing queued, the socket buffer empty and no compression
        negotiated (a compressed stream's frames are the writer's). False: the writer task sends it."""
        transport = self.transport
        ws = self.ws
        if (self.send_since is not None or self.control or self.slot is not None or transport is None
                or self.task is None or ws.closed or ws.compress or transport.is_closing()
                or transport.get_write_buffer_size() or self.backlogged()):
            return False
        if self.max_age_s > 0 and self.item_age(frames) > self.max_age_s:
            self.expired += 1
            return True
        transport.write(frames.frame(self.dropped))
        self.sent += 1
        self.direct += 1
        return True

    def send_control(self, message: dict[str, Any] | str) -> None:
        self.priority(message if isinstance(message, str) else dumps(message))

    async def writer(self) -> None:
        await self.run()

    def abort(self) -> None:
        """Drop the connection at once (a peer that does not read cannot be sent a close frame)."""
        super().abort()
        if self.task is not None:
            self.task.cancel()


class TelemetryHub:
    """Offers each snapshot to every client (latest wins) and queues events for all of them. Who may join
    is :mod:`server.gateway.admission`'s decision (``telemetry.max_clients`` and its reserves)."""

    def __init__(self, writer_stall_s: float = 10.0) -> None:
        self.writer_stall_s = writer_stall_s
        self.clients: weakref.WeakSet[TelemetryClient] = weakref.WeakSet()
        #: WebRTC telemetry data channels (server.gateway.webrtc.telemetry): offered every snapshot, no client slot
        self.channels: weakref.WeakSet[Any] = weakref.WeakSet()
        self.sweeper = StallSweeper(writer_stall_s, lambda: self.clients, what="telemetry client",
                                    on_abort=self.clients.discard)
        self.published = 0
        self.latest: Frames | None = None  # the newest snapshot (a subscription's names are checked against it)
        #: stamped commands the runtime dropped, by reason (``stale``, ``reordered``), every socket since start
        self.commands_dropped: dict[str, int] = {}

    @property
    def closed_stalled(self) -> int:
        return self.sweeper.closed_stalled

    def publish(self, data: bytes) -> None:
        """A new snapshot (JSON bytes, as serialised by the runtime) for every client."""
        self.published += 1
        frames = self.latest = Frames(data)
        for c in list(self.clients):
            c.offer(frames)
        for ch in list(self.channels):
            ch.offer(frames)

    def broadcast(self, message: dict[str, Any]) -> None:
        """Queue a control-plane message (an event) for every client."""
        text = dumps(message)
        for c in list(self.clients):
            c.send_control(text)

    def sweep(self, now: float | None = None) -> int:
        """Close every client whose writer has not made progress for ``writer_stall_s`` (it holds a
        slot without reading, whatever it sends); returns how many."""
        return self.sweeper.sweep(now)

    async def start(self) -> None:
        self.sweeper.start()

    async def stop(self) -> None:
        """Let each writer send what is queued (the last snapshot shows the halt), then close with 1001."""
        await self.sweeper.stop()
        clients = list(self.clients)
        self.clients.clear()
        for c in clients:  # let each writer send what is queued, briefly, before the close frame
            c.wake.set()
        await asyncio.sleep(0)
        await asyncio.gather(*(c.flush_then_close(0.5) for c in clients), return_exceptions=True)

    def runtime_drops(self) -> dict[str, Any]:
        """The runtime's per-stream drop counts from the newest snapshot (``link.dropped_by_stream``, heartbeats
        included; {}: none)."""
        if self.latest is None:
            return {}
        link = self.latest.parsed.get("link")
        return (link.get("dropped_by_stream") if isinstance(link, dict) else None) or {}

    def stats(self) -> dict[str, Any]:
        clients = list(self.clients)
        return {
            "clients": len(clients),
            "datachannels": len(self.channels),  # WebRTC telemetry channels (server.gateway.webrtc.telemetry)
            "published": self.published,
            "dropped": sum(c.dropped for c in clients),
            "expired": sum(c.expired for c in clients),
            "commands_dropped": dict(self.commands_dropped),
            "closed_stalled": self.closed_stalled,
            "t": time.time(),
        }
