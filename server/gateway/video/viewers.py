"""The JPEG viewers (``/ws/video`` with credits, ``/video.mjpeg``): their state and the drop count.

Touched only on the event loop. A *drop* is a frame that was the newest while the viewer watched and
never went to it: a slow viewer gets fewer frames, never older ones (notes/performance.md §3: with
one credit in flight a slow reader stayed at 35 ms p99, with ``drain()`` alone 4–7 s behind).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from dataclasses import dataclass, field
from typing import Any

MAX_OUTBOX = 16


@dataclass(eq=False)
class VideoViewer:
    """One viewer. Touched only on the event loop."""

    id: int
    kind: str  # "ws" | "mjpeg" | "h264" (H.264 over the websocket) | "webrtc"
    remote: str | None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0
    dropped: int = 0
    acked: int = 0
    last_seq: int = 0
    first_seq: int = 0  # the oldest frame this client could have received
    in_flight: int | None = None  # seq sent and not yet acked (websocket only)
    status_dirty: bool = False
    # error replies waiting to be sent: bounded, so a client that never reads cannot grow the server
    outbox: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_OUTBOX))
    replies_dropped: int = 0
    send_since: float | None = None  # monotonic start of the send in progress
    in_flight_since: float | None = None  # when the unacked frame was sent
    transport: Any = None
    #: H.264 and WebRTC viewers: their encoded stream (a :class:`~server.gateway.video.tiers.Subscription`)
    stream: Any = None
    #: WebRTC viewers: the peer (its state, rate control and data-channel counters in ``GET /api/video``)
    peer: Any = None
    #: JPEG websocket viewers: their rung (:class:`~server.gateway.video.jpeg_pacing.JpegPacer`, issue 20 §5)
    pacer: Any = None

    async def flush_replies(self, send: Any, status: Any) -> None:
        """Send the queued error replies, then the status (``status()``: the message) if it changed."""
        while self.outbox:
            await send(self.outbox.popleft())
        if self.status_dirty:
            self.status_dirty = False
            await send(status())

    @property
    def jpeg(self) -> bool:
        """Whether this viewer takes the JPEG stream (and so makes the service encode JPEG)."""
        return self.kind in ("ws", "mjpeg")

    def stuck_for(self, now: float) -> float:
        """How long this viewer has blocked progress: a send the peer does not read, or a frame it
        does not ack (0 when neither)."""
        since = [t for t in (self.send_since, self.in_flight_since) if t is not None]
        return now - min(since) if since else 0.0

    @property
    def label(self) -> str:
        """How the stall sweeper's log names this viewer."""
        return f"{self.id} ({self.kind}, {self.remote})"

    def abort(self) -> None:
        """Drop the connection at once (a viewer that does not read cannot be sent a close frame)."""
        if self.transport is not None:
            self.transport.abort()

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.id, "kind": self.kind, "remote": self.remote, "sent": self.sent,
            "dropped": self.dropped, "acked": self.acked, "in_flight": 0 if self.in_flight is None else 1,
        }
        if self.stream is not None:
            out["stream"] = self.stream.to_json()
        if self.pacer is not None:
            out["jpeg"] = self.pacer.to_json()
        if self.peer is not None:
            peer = self.peer.to_json()
            out["webrtc"] = {k: peer[k] for k in ("state", "codec", "rate", "stream", "rtcp", "commands", "telemetry",
                                                  "pacer")}
        return out


class ViewerRegistry:
    """The viewers by id, and the drop bookkeeping when the newest JPEG is replaced."""

    def __init__(self) -> None:
        self._viewers: dict[int, VideoViewer] = {}
        self._ids = itertools.count(1)

    def add(self, kind: str, remote: str | None, first_seq: int) -> VideoViewer:
        v = VideoViewer(next(self._ids), kind, remote)
        v.first_seq = first_seq
        self._viewers[v.id] = v
        v.wake.set()
        return v

    def remove(self, viewer: VideoViewer) -> None:
        self._viewers.pop(viewer.id, None)

    def all(self) -> list[VideoViewer]:
        return list(self._viewers.values())

    def __bool__(self) -> bool:
        return bool(self._viewers)

    def any_jpeg(self) -> bool:
        return any(v.jpeg for v in self._viewers.values())

    def wake_all(self, status: bool = False) -> None:
        for v in self._viewers.values():
            if status:
                v.status_dirty = True
            v.wake.set()

    def count_replaced(self, prev_seq: int) -> None:
        """The JPEG ``prev_seq`` is replaced: a drop for each JPEG viewer that watched and never got it."""
        for v in self._viewers.values():
            if v.jpeg and v.first_seq <= prev_seq and v.last_seq < prev_seq:
                v.dropped += 1
