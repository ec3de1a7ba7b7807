"""JPEG over ``/ws/video`` that leaves room for telemetry (issue 20 §5): per viewer, step the JPEG's quality, size
and frame rate down from its ack timing and the path's measured throughput, and back up with hysteresis.

Why: a JPEG viewer gets the next frame the moment it acks the previous one, so its stream takes whatever the
path gives it; with real-camera frames (≥ 50 KB at 640×480, q70) on a 1–2 Mbit/s uplink that is most of the
bottleneck the telemetry socket shares (issue 20: telemetry ages 0.4–0.9 s with video running). Per viewer, on
each ack: the video's rate is the bytes of the frames acked over the last ``WINDOW_S``; the path's throughput is
the kernel's measurement on the video socket (``TCP_INFO`` ``tcpi_delivery_rate``, the best over the window: a
stop-and-wait stream is often application-limited, which only under-reads it). While the video uses more than
``[video] jpeg_link_share`` of it for ``DOWN_AFTER_S`` the viewer steps one rung down :data:`LADDER` (quality
first, then size, then frame rate); below ``HYSTERESIS`` × the share for ``UP_AFTER_S`` it steps back up. A rung
below the top gets its own encode of the shared frame (decoded, scaled, re-encoded in a worker thread, never on
the event loop). ``GET /api/video``'s clients show each viewer's rung (``jpeg``).
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from server.gateway import tcpinfo
from server.gateway.video.frames import EncodedFrame, encode_frame

WINDOW_S = 2.0  # the duty is measured over this much of the recent past
DOWN_AFTER_S = 1.0  # over the share this long (and this long since the last step): one rung down
UP_AFTER_S = 4.0  # under HYSTERESIS × the share this long: one rung up
HYSTERESIS = 0.5


@dataclass(frozen=True)
class Rung:
    quality_scale: float  # × the configured quality (at least MIN_QUALITY)
    size_scale: float  # × the configured width and height
    fps_scale: float  # × the configured frame rate


#: the top is the configured stream; each rung roughly halves the bytes per second of the one above
LADDER = (Rung(1.0, 1.0, 1.0), Rung(0.7, 1.0, 1.0), Rung(0.6, 0.75, 1.0), Rung(0.5, 0.5, 1.0),
          Rung(0.5, 0.5, 0.5), Rung(0.4, 0.5, 0.25), Rung(0.4, 0.25, 0.25))
MIN_QUALITY = 20


def delivery_rate_bytes_s(sock: Any) -> float | None:
    """The kernel's delivery-rate estimate for a TCP socket (``tcpi_delivery_rate``, bytes/s; None: unknown)."""
    info = tcpinfo.read(sock)
    return (info.delivery_rate_bytes_s or None) if info is not None else None


class JpegPacer:
    """One JPEG websocket viewer's rung (touched only on the event loop). ``rate``: a callable that reads the
    path's throughput in bytes/s (None when it cannot: then the rung never changes)."""

    def __init__(self, share: float, quality: int, fps: float, rate: Any = None, *, enabled: bool = True) -> None:
        self.share = share
        self.enabled = enabled
        self.quality = quality
        self.fps = fps
        self.rate = rate
        self.level = 0
        self.steps_down = 0
        self.steps_up = 0
        self._in_flight: tuple[float, int] | None = None  # (send time, bytes)
        self._acked: collections.deque[tuple[float, int]] = collections.deque()  # (ack time, bytes)
        self._rates: collections.deque[tuple[float, float]] = collections.deque()  # (time, bytes/s)
        self._over_since: float | None = None
        self._under_since: float | None = None
        self._changed_t = -1e9
        self.last_send_t = -1e9
        self.last_use = 0.0

    @property
    def rung(self) -> Rung:
        return LADDER[self.level]

    def frame_quality(self) -> int:
        return max(MIN_QUALITY, round(self.quality * self.rung.quality_scale))

    def min_interval_s(self) -> float:
        """The shortest time between two frames at this rung."""
        return 1.0 / max(self.fps * self.rung.fps_scale, 0.5)

    def sent(self, nbytes: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._in_flight = (now, nbytes)
        self.last_send_t = now

    def acked(self, now: float | None = None) -> None:
        """A frame's ack: its bytes count, the path's rate is read, and the rung may change."""
        now = time.monotonic() if now is None else now
        if self._in_flight is None:
            return
        _, nbytes = self._in_flight
        self._in_flight = None
        self._acked.append((now, nbytes))
        rate = self.rate() if self.rate is not None else None
        if rate:
            self._rates.append((now, rate))
        self._step(now)

    def use(self, now: float) -> float | None:
        """The share of the path's throughput the video used over the last ``WINDOW_S`` (None: not known yet)."""
        start = now - WINDOW_S
        while self._acked and self._acked[0][0] < start:
            self._acked.popleft()
        while self._rates and self._rates[0][0] < start:
            self._rates.popleft()
        if not self._rates or len(self._acked) < 2:
            return None
        best = max(r for _, r in self._rates)
        video = sum(n for _, n in self._acked) / WINDOW_S
        return video / best

    def _step(self, now: float) -> None:
        use = self.use(now)
        if use is None or not self.enabled:
            return
        self.last_use = use
        if use > self.share:
            self._under_since = None
            self._over_since = self._over_since if self._over_since is not None else now
            if now - self._over_since >= DOWN_AFTER_S and now - self._changed_t >= DOWN_AFTER_S \
                    and self.level < len(LADDER) - 1:
                self.level += 1
                self.steps_down += 1
                self._changed_t = now
                self._over_since = None
        elif use < self.share * HYSTERESIS:
            self._over_since = None
            self._under_since = self._under_since if self._under_since is not None else now
            if now - self._under_since >= UP_AFTER_S and now - self._changed_t >= UP_AFTER_S and self.level > 0:
                self.level -= 1
                self.steps_up += 1
                self._changed_t = now
                self._under_since = None
        else:
            self._over_since = self._under_since = None

    def to_json(self) -> dict[str, Any]:
        r = self.rung
        best = max((x for _, x in self._rates), default=None)
        return {"level": self.level, "quality": self.frame_quality(), "size_scale": r.size_scale,
                "fps": round(self.fps * r.fps_scale, 2), "use": round(self.last_use, 3), "share": self.share,
                "path_bit_s": None if best is None else round(best * 8), "steps_down": self.steps_down,
                "steps_up": self.steps_up, "enabled": self.enabled}


def reencode(frame: EncodedFrame, quality: int, size_scale: float) -> EncodedFrame:
    """The shared frame at a lower quality and size (CPU work: call it in a worker thread)."""
    img = cv2.imdecode(np.frombuffer(frame.jpeg, np.uint8), cv2.IMREAD_COLOR)
    if size_scale < 1.0:
        w = max(32, int(img.shape[1] * size_scale) // 2 * 2)
        h = max(32, int(img.shape[0] * size_scale) // 2 * 2)
        img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
    return encode_frame(img, quality, frame.seq, frame.capture_t)


__all__ = ["LADDER", "JpegPacer", "delivery_rate_bytes_s", "reencode"]
