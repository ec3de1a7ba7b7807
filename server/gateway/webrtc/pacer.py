"""A pacer for a peer's RTP: video leaves at the rate the path takes, not in bursts that fill its queue.

Why: aiortc sends a frame's RTP packets back to back. On ``4g`` (a 2 Mbit/s uplink with a 250 ms FIFO, the
video at ~1.3 Mbit/s) a keyframe of up to 16 KB (the VBV cap, encoder.py) arrives at the bottleneck in a
millisecond and drains in ~65 ms, and everything queued behind it — the telemetry data channel's snapshots, the
e-stop's reply — waits for it: the dashboard's telemetry age p99 was ~220 ms on the data channel as on the
websocket, where the link's one-way delay is 60 ± 20 ms. libwebrtc has a pacer for this (``PacingController``,
2.5× the target bitrate); aiortc has none.

Here: a token bucket in front of the DTLS transport's ``_send_rtp`` (RTP only; RTCP passes at once). Its rate is
``pace_share`` of the rate controller's path estimate (REMB and loss, ratecontrol.py), never under
``min_factor`` × the encoder's target (so the encoder's own rate always fits and a frame never waits more than
a frame interval), with a burst of ``burst_bytes``. So the bottleneck's queue holds at most the burst, the rest of
a big frame waits here, in our hands, where it delays only the video (a keyframe is spread over ~one frame
interval more); on a LAN the estimate is high and the pacer costs nothing measurable (``bench/bench_webrtc.py``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable


def is_rtcp(data: bytes) -> bool:
    """RTCP, not RTP (RFC 5761 §4: the second byte is a packet type 192–223 for RTCP).

    >>> is_rtcp(bytes([0x80, 200]) + bytes(6)), is_rtcp(bytes([0x80, 96]) + bytes(10))
    (True, False)
    """
    return len(data) > 1 and 192 <= data[1] <= 223


class Pacer:
    """A token bucket: :meth:`wait` returns when ``nbytes`` may leave at ``rate_bit_s()``.

    >>> clock = [0.0]
    >>> p = Pacer(lambda: 8000.0, burst_bytes=1000, clock=lambda: clock[0])   # 1 kB/s, 1 kB burst
    >>> p.delay(1000), p.delay(500)        # the burst goes at once, the next 500 B wait 0.5 s
    (0.0, 0.5)
    >>> clock[0] = 2.0; p.delay(1000)      # the bucket refilled (never beyond the burst)
    0.0
    """

    def __init__(self, rate_bit_s: Callable[[], float], *, burst_bytes: int = 2400,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate_bit_s = rate_bit_s
        self.burst_bytes = burst_bytes
        self.clock = clock
        self._tokens = float(burst_bytes)
        self._t = clock()
        self.waited_s = 0.0  # total time packets were held
        self.held = 0  # packets that waited

    def delay(self, nbytes: int) -> float:
        """Take ``nbytes`` from the bucket; how long the sender must wait before sending them (s)."""
        now = self.clock()
        rate = max(self.rate_bit_s(), 1.0) / 8.0
        self._tokens = min(float(self.burst_bytes), self._tokens + (now - self._t) * rate)
        self._t = now
        self._tokens -= nbytes
        if self._tokens >= 0:
            return 0.0
        wait = -self._tokens / rate
        self.waited_s += wait
        self.held += 1
        return wait

    def wrap(self, send: Callable[[bytes], Awaitable[None]]) -> Callable[[bytes], Awaitable[None]]:
        """``send`` (a DTLS transport's ``_send_rtp``) paced; RTCP is never held."""

        async def paced(data: bytes) -> None:
            if not is_rtcp(data):
                wait = self.delay(len(data))
                if wait > 0:
                    await asyncio.sleep(wait)
            await send(data)

        return paced

    def to_json(self) -> dict[str, Any]:
        return {"rate_bit_s": int(self.rate_bit_s()), "held": self.held, "waited_s": round(self.waited_s, 3)}
