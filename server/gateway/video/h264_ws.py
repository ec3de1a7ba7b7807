"""H.264 over ``/ws/video?codec=h264``: where UDP is blocked, the same encoded stream on the websocket.

PiKVM's answer to NATs and firewalls that break WebRTC: the tier encoders' packets, framed as
length-prefixed NAL units (:mod:`~server.gateway.video.nal`), decoded in the browser with WebCodecs
(which needs a secure context: https, or http on localhost; elsewhere the dashboard falls back to
JPEG and says why).

Flow control: a P-frame cannot be skipped the way a JPEG can (the next one needs it), so instead of
one credit the viewer gets a *window*: frames go out while fewer than ``window`` are unacked and
their bytes stay under about one round trip at the target rate. Frames that wait longer than the
age budget are dropped here, at the sender, and the stream restarts at the next keyframe
(:class:`~server.gateway.video.tiers.Subscription`). The acks drive the same rate controller as
WebRTC's receiver reports (:meth:`~server.gateway.video.ratecontrol.RateController.on_ack`):
delivery rate, and round-trip inflation as the queueing signal.

Binary frame (server → client): 4-byte big-endian header length ``n``, ``n`` bytes of JSON
``{"type": "frame", "codec": "h264", "seq", "capture_t", "mono_t", "width", "height", "keyframe", "tier",
"bytes"}`` (``mono_t`` and ``capture_t``: the capture, monotonic and Unix, as the JPEG header's), then the access unit as length-prefixed NAL units. Client → server: ``{"type": "ack",
"seq": n, "hold_ms", "lag_ms"}`` once frame ``n`` is decoded (``hold_ms``: arrival → decoded → ack;
``lag_ms``: the browser's event loop lag; both optional, the rate controller takes them out of the
round trip). Text ``{"type": "rate", "data": {...}}`` reports the
controller's state when the tier changes and every second.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from typing import Any

from aiohttp import web

from server.gateway.video.encoder import EncodedPacket
from server.gateway.video.frames import unix_time
from server.gateway.video.nal import length_prefixed
from server.gateway.video.ratecontrol import RateController
from server.gateway.video.service import VideoService
from server.gateway.video.tiers import Tier
from server.gateway.video.viewers import VideoViewer

log = logging.getLogger(__name__)

MAX_WINDOW = 8
RATE_REPORT_S = 1.0


def frame_message(pkt: EncodedPacket) -> bytes:
    """The binary websocket message of one H.264 access unit (see the module docstring)."""
    body = length_prefixed(pkt.data)
    header = json.dumps({"type": "frame", "codec": "h264", "seq": pkt.seq,
                         "capture_t": round(unix_time(pkt.capture_t), 6), "mono_t": pkt.capture_t,
                         "width": pkt.width, "height": pkt.height, "keyframe": pkt.keyframe, "tier": pkt.tier,
                         "bytes": len(body)}, separators=(",", ":")).encode()
    return b"".join((len(header).to_bytes(4, "big"), header, body))


class H264Viewer:
    """The sender side of one H.264 websocket viewer: window, acks, rate control."""

    def __init__(self, service: VideoService, client: VideoViewer) -> None:
        self.service = service
        self.client = client
        self.sub = service.subscribe("h264")
        client.stream = self.sub
        self.rc = RateController(service.tiers.ladder(), now=time.monotonic(), settings=service.rate_settings)
        self.sub.switch(self.rc.tier)
        self.sub.set_bitrate(self.rc.bitrate_bit_s)
        service.tiers.on_ladder.add(self._new_ladder)
        self.in_flight: dict[int, tuple[float, int]] = {}  # seq → (sent monotonic, bytes)
        self.last_report = 0.0
        self.rate_dirty = True

    def window_open(self) -> bool:
        if not self.in_flight:
            return True
        if len(self.in_flight) >= MAX_WINDOW:
            return False
        rtt = self.rc.rtt_min_s if self.rc.rtt_min_s is not None else 0.1
        budget = self.rc.bitrate_bit_s / 8.0 * (rtt + 0.05) + 16_000
        return sum(n for _, n in self.in_flight.values()) < budget

    def ack(self, seq: int, hold_s: float = 0.0, lag_s: float | None = None) -> None:
        """Frame ``seq`` (and every one before it) decoded; the browser held it ``hold_s`` itself and its
        event loop runs ``lag_s`` late (the rate controller takes both out of the round trip)."""
        now = time.monotonic()
        if lag_s is not None:
            self.rc.on_health(now=now, lag_s=lag_s)
        done = [s for s in self.in_flight if s <= seq]
        for s in done:
            sent, nbytes = self.in_flight.pop(s)
            self.client.acked += 1
            d = self.rc.on_ack(now=now, nbytes=nbytes, rtt_s=now - sent, hold_s=hold_s if s == seq else 0.0)
            self._apply(d.tier_changed)
        if done:
            self.client.in_flight = None if not self.in_flight else max(self.in_flight)
            self.client.in_flight_since = min((t for t, _ in self.in_flight.values()), default=None)
            self.client.wake.set()

    def _new_ladder(self, ladder: list[Tier]) -> None:
        """The capture's size changed: the ladder was fitted to it again (tiers.py)."""
        self._apply(self.rc.set_ladder(ladder, now=time.monotonic()).tier_changed)

    def _apply(self, tier_changed: bool) -> None:
        if tier_changed:
            self.sub.switch(self.rc.tier)
            self.rate_dirty = True
            log.info("H.264 viewer %d: tier %s (%s)", self.client.id, self.rc.tier, self.rc.last_reason)
        self.sub.set_bitrate(self.rc.bitrate_bit_s)

    def rate_message(self) -> str | None:
        now = time.monotonic()
        if not self.rate_dirty and now - self.last_report < RATE_REPORT_S:
            return None
        self.rate_dirty = False
        self.last_report = now
        return json.dumps({"type": "rate", "data": {**self.rc.to_json(), "stream": self.sub.to_json()}},
                          default=_finite)

    def close(self) -> None:
        self.service.tiers.on_ladder.discard(self._new_ladder)
        self.sub.close()


def _finite(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else str(v)


async def h264_sender(ws: web.WebSocketResponse, viewer: H264Viewer) -> None:
    """The only writer of ``ws``: status, errors, rate reports, then frames while the window is open."""
    client, sub, service = viewer.client, viewer.sub, viewer.service

    async def send(data: str | bytes) -> None:
        client.send_since = time.monotonic()
        await (ws.send_str(data) if isinstance(data, str) else ws.send_bytes(data))
        client.send_since = None

    async def wake_on_packets() -> None:
        while not ws.closed:
            sub.ready.clear()
            await sub.ready.wait()
            client.wake.set()
            await asyncio.sleep(0)

    pump = asyncio.create_task(wake_on_packets())
    try:
        while not ws.closed:
            try:
                await asyncio.wait_for(client.wake.wait(), RATE_REPORT_S)
            except asyncio.TimeoutError:
                pass
            client.wake.clear()
            await client.flush_replies(send, service.status_message)
            msg = viewer.rate_message()
            if msg is not None:
                await send(msg)
            while viewer.window_open():
                pkt = sub.get_nowait()
                if pkt is None:
                    break
                data = frame_message(pkt)
                viewer.in_flight[pkt.seq] = (time.monotonic(), len(data))
                viewer.rc.on_sent(now=time.monotonic(), nbytes=len(data), age_s=time.monotonic() - pkt.capture_t)
                client.in_flight = pkt.seq
                if client.in_flight_since is None:
                    client.in_flight_since = time.monotonic()
                client.last_seq = pkt.seq
                await send(data)
                client.sent += 1
            if not viewer.window_open() and sub.queue:
                client.dropped = sub.counters["dropped_stale"]
    except (ConnectionError, RuntimeError) as err:  # peer went away mid-send
        log.debug("H.264 video websocket %d: %s", client.id, err)
    finally:
        pump.cancel()
